"""The threshold design's e-mail briefing, end to end: 43 long e-mails read in batches through the
Compactor with ThresholdPolicy and the extractive summarizer, on a small budget.

Each e-mail hides its reference number in the middle of a 5,000-character body, where
head+tail truncation cuts it away: only the structured summary can carry it forward. The
test replays the agent loop (compact before every model call, report usage after it) and
checks that compaction triggers repeatedly, every call is valid and within budget, and the
final context still holds all 43 reference numbers.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import contextfold as cf
from contextfold.testing import assert_valid_within

_WORDS = ("statement", "period", "line", "item", "tax", "adjustment", "quarter", "review",
          "amount", "records", "discrepancy", "days", "account", "service", "renewal",
          "shipment", "policy", "team", "meeting", "invoice", "schedule", "customer")


@dataclass(frozen=True)
class Email:
    id: str
    account: str
    subject: str
    reference: str
    body: str


def mailbox(count: int = 43, seed: int = 43) -> list[Email]:
    rng = random.Random(seed)
    refs: set[str] = set()
    emails = []
    for i in range(1, count + 1):
        ref = f"{rng.choice(['KT', 'NW', 'AP', 'SK', 'HR'])}-{rng.randint(1000, 9999)}"
        while ref in refs:
            ref = f"{ref[:2]}-{rng.randint(1000, 9999)}"
        refs.add(ref)

        def filler(n: int) -> str:
            text = " ".join(rng.choice(_WORDS) for _ in range(n // 6))
            return text[:n]

        body = (f"Dear customer,\n\n{filler(2_400)}.\n\nYour reference number is {ref}; "
                f"quote it in every reply.\n\n{filler(2_400)}.\n\nKind regards")
        emails.append(Email(f"EM-{i:03d}", ("home", "work")[i % 2], f"Notice {i}", ref, body))
    return emails


def call(call_id: str, name: str, **args: str) -> cf.ToolCall:
    return cf.ToolCall(call_id, name, json.dumps(args))


def test_43_emails_all_reference_numbers_survive(counter: cf.TokenCounter) -> None:
    emails = mailbox()
    by_id = {e.id: e for e in emails}
    budget = cf.Budget(context_window=14_000)
    compactor = cf.Compactor(policy=cf.ThresholdPolicy(), budget=budget, counter=counter,
                             summarizer=cf.ExtractiveSummarizer(counter=counter))
    history = [
        cf.Message(role="system", content="You are an e-mail assistant."),
        cf.Message(role="user", content="Read all my unread e-mails in both accounts, then "
                   "write a briefing that lists every e-mail with its reference number."),
    ]
    methods: list[str] = []

    def model_call() -> list[cf.Message]:
        result = compactor.compact(history)
        assert_valid_within(result.messages, budget, counter)
        methods.append(result.report.method)
        compactor.observe_usage(input_tokens=counter.count_messages(result.messages))
        return result.messages

    # Discovery: one search per account, the listings hold ids and subjects only.
    model_call()
    searches = (call("s-home", "search_unread", account="home"),
                call("s-work", "search_unread", account="work"))
    history.append(cf.Message(role="assistant", content="Searching both accounts.",
                              tool_calls=searches))
    for s in searches:
        account = json.loads(s.arguments)["account"]
        listing = [{"id": e.id, "subject": e.subject} for e in emails if e.account == account]
        history.append(cf.Message(role="tool", tool_call_id=s.id, name=s.name,
                                  content=json.dumps(listing)))
    # Reading: batches of five, as the runtime batching instruction suggests.
    for start in range(0, len(emails), 5):
        model_call()
        batch = emails[start : start + 5]
        calls = tuple(call(f"r-{e.id}", "read_email", id=e.id) for e in batch)
        history.append(cf.Message(role="assistant", tool_calls=calls,
                                  content=f"Reading e-mails {start + 1}-{start + len(batch)}."))
        for c in calls:
            e = by_id[json.loads(c.arguments)["id"]]
            history.append(cf.Message(role="tool", tool_call_id=c.id, name=c.name,
                                      content=f"Subject: {e.subject}\n\n{e.body}"))
    final = model_call()  # the call that writes the briefing

    assert methods.count("threshold") >= 2, methods
    context_text = "\n".join(m.text for m in final)
    missing = [e.reference for e in emails if e.reference not in context_text]
    assert missing == []
    assert counter.count_messages(history) > 2 * budget.input_budget  # it really had to fold
    # The early e-mails' bodies were cut (or, later, dropped): only the summaries and the
    # ledger of what was cut carry their reference numbers now.
    for e in emails[:10]:
        carriers = [m for m in final if e.reference in m.text]
        assert carriers and all(m.source in ("summary", "ledger") for m in carriers), e.id
