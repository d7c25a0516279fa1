"""The contract every layer above passes around: what a policy is given and returns
(:mod:`.policy`) and what a compaction reports (:mod:`.report`)."""
