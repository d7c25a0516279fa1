"""The contract every layer above passes around: what a policy is given and returns
(`contextfold._contract.policy`) and what a compaction reports (`contextfold._contract.report`)."""
