"""The demo's world: a mailbox of long unread e-mails and the tools that read it.

Modelled on the threshold design's briefing task: search two accounts, read every unread e-mail
(each several thousand characters with a reference number that the final briefing
needs), then write the briefing. Deterministic: the same seed gives the same mailbox.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

__all__ = ["Email", "Mailbox"]

_SENDERS = ("billing@keeta.example", "orders@northwind.example", "no-reply@apple.example",
            "travel@skyways.example", "hr@acme.example", "support@cloudly.example")
_TOPICS = ("order delivered", "invoice due", "deadline reminder", "flight change",
           "policy update", "ticket resolved", "payment received", "contract renewal")
_FILLER = (
    "The attached statement lists every line item for the period together with the taxes "
    "and the adjustments agreed last quarter. Please review the amounts against your own "
    "records and let us know about any discrepancy within fourteen days. "
)


@dataclass(frozen=True)
class Email:
    """One unread e-mail."""

    id: str
    account: str
    sender: str
    subject: str
    date: str
    reference: str
    amount: str
    body: str


class Mailbox:
    """Unread e-mails across two accounts, and the tool functions over them."""

    accounts = ("younes@example.com", "team@example.com")

    def __init__(self, count: int = 43, *, seed: int = 7, body_chars: int = 6_000) -> None:
        rng = random.Random(seed)
        self.emails: dict[str, Email] = {}
        for i in range(1, count + 1):
            eid = f"EM-{i:03d}"
            ref = f"{rng.choice(['KT', 'NW', 'AP', 'SK', 'HR', 'CL'])}-{rng.randint(1000, 9999)}"
            amount = f"${rng.randint(10, 4_000)}.{rng.randint(0, 99):02d}"
            date = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            subject = f"{rng.choice(_TOPICS).capitalize()} ({ref})"
            filler = (_FILLER * (body_chars // len(_FILLER) + 1))[:body_chars]
            body = (
                f"Reference number: {ref}\nDate: {date}\nAmount: {amount}\n\n"
                f"Dear customer,\n\n{filler}\n\nYour reference number is {ref}.\n"
            )
            self.emails[eid] = Email(eid, self.accounts[i % 2], rng.choice(_SENDERS), subject,
                                     date, ref, amount, body)
        self.reads: list[str] = []

    def list_accounts(self) -> str:
        """The tool ``list_accounts``."""
        return json.dumps({"accounts": list(self.accounts)})

    def search_unread(self, account: str) -> str:
        """The tool ``search_unread``: ids and subjects of an account's unread e-mails."""
        found = [
            {"id": e.id, "from": e.sender, "subject": e.subject}
            for e in self.emails.values() if e.account == account
        ]
        return json.dumps({"account": account, "count": len(found), "emails": found})

    def read_email(self, email_id: str) -> str:
        """The tool ``read_email``: the whole e-mail."""
        self.reads.append(email_id)
        e = self.emails.get(email_id)
        if e is None:
            return json.dumps({"error": f"no e-mail {email_id}"})
        return json.dumps({"id": e.id, "from": e.sender, "subject": e.subject, "body": e.body})

    def call(self, name: str, arguments: dict[str, str]) -> str:
        """Run the tool ``name``."""
        if name == "list_accounts":
            return self.list_accounts()
        if name == "search_unread":
            return self.search_unread(arguments["account"])
        if name == "read_email":
            return self.read_email(arguments["email_id"])
        return json.dumps({"error": f"unknown tool {name}"})

    TOOLS = (
        {"type": "function", "function": {
            "name": "list_accounts", "description": "List the user's e-mail accounts.",
            "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {
            "name": "search_unread", "description": "Unread e-mails of one account.",
            "parameters": {"type": "object", "properties": {"account": {"type": "string"}},
                           "required": ["account"]}}},
        {"type": "function", "function": {
            "name": "read_email", "description": "Read one e-mail in full.",
            "parameters": {"type": "object", "properties": {"email_id": {"type": "string"}},
                           "required": ["email_id"]}}},
    )
    """OpenAI tool definitions of the three tools."""
