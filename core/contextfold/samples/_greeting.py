"""A support chat whose assistant speaks first, written from a seed.

Chat widgets often open with the assistant's greeting, so the history an agent keeps
starts with an assistant message before any user message: a request providers reject
until it is repaired (``assistant_before_user``). The rest is an ordinary support run
with tool calls: the customer's account, an invoice with many line items, a plan change.
"""

from __future__ import annotations

import json
import random
from typing import Any

__all__ = ["greeting_messages"]

_SYSTEM = ("You are the support assistant of Northwind Mobile. Verify the customer with their "
           "account number and the last four digits of the card on file before reading or "
           "changing anything. Quote invoice numbers and amounts exactly.")
_PLANS = (("Basic 5", 15), ("Plus 20", 30), ("Unlimited", 45), ("Family 4x", 95))
_ITEMS = ("roaming data", "international call", "premium SMS", "device instalment",
          "insurance", "late fee", "data top-up", "streaming add-on")


def _call_id(rng: random.Random) -> str:
    return "call_" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(20))


def greeting_messages(seed: int = 0) -> list[dict[str, Any]]:
    """The chat as one OpenAI-format message list."""
    rng = random.Random(seed)
    account = f"NW-{rng.randrange(100_000, 999_999)}"
    card = f"{rng.randrange(10_000):04d}"
    invoice = f"INV-2024-{rng.randrange(10_000, 99_999)}"
    plan, price = rng.choice(_PLANS[:2])
    new_plan, new_price = _PLANS[2]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _SYSTEM},
        {"role": "assistant", "content": "Hi, I'm the Northwind Mobile assistant. How can I "
                                         "help you today?"},
        {"role": "user", "content": f"My last bill is way higher than usual. Account {account}, "
                                    f"card ending {card}."},
    ]

    def call(name: str, arguments: dict[str, Any], result: Any) -> None:
        call_id = _call_id(rng)
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})

    lines: list[dict[str, Any]] = [{"line": f"{rng.randrange(100, 999)}-{rng.randrange(100, 999)}-"
                      f"{rng.randrange(1000, 9999)}",
              "plan": plan, "monthly": price,
              "usage": [{"date": f"2024-04-{day:02d}", "item": rng.choice(_ITEMS),
                         "reference": f"U{rng.randrange(10**7, 10**8)}",
                         "amount": round(rng.random() * 40, 2)}
                        for day in range(1, 31) if rng.random() < 0.7]}
             for _ in range(3)]
    call("verify_customer", {"account": account, "card_last_four": card},
         {"verified": True, "name": "Dana Whitfield", "account": account, "lines": 3})
    call("get_invoice", {"account": account, "latest": True},
         {"invoice": invoice, "period": "2024-04", "due": "2024-05-21", "lines": lines,
          "total": round(sum(u["amount"] for ln in lines for u in ln["usage"]) + 3 * price, 2)})
    roaming = [u for ln in lines for u in ln["usage"] if u["item"] == "roaming data"]
    first = roaming[0]["reference"] if roaming else "none"
    messages.append({"role": "assistant", "content": (
        f"Invoice {invoice} has {len(roaming)} roaming data charges across your three lines, "
        f"the first one {first}. Roaming is not part of the {plan} plan. Would a plan that "
        "includes roaming help?")})
    messages.append({"role": "user", "content": f"Yes, what would {new_plan} cost for all "
                                                "three lines?"})
    call("quote_plan", {"account": account, "plan": new_plan, "lines": 3},
         {"plan": new_plan, "monthly_per_line": new_price, "lines": 3,
          "total_monthly": 3 * new_price, "includes": ["roaming in 40 countries",
                                                       "unlimited data", "hotspot 30 GB"],
          "starts": "2024-06-01", "quote": f"Q-{rng.randrange(10_000, 99_999)}"})
    messages.append({"role": "assistant", "content": (
        f"{new_plan} is ${new_price} per line, ${3 * new_price} a month for three lines, "
        "roaming included, from 2024-06-01. Shall I switch all three lines (yes/no)?")})
    messages.append({"role": "user", "content": "Yes, switch them, and can you waive the "
                                                "roaming charges on this invoice?"})
    call("change_plan", {"account": account, "plan": new_plan, "lines": "all"},
         {"ok": True, "effective": "2024-06-01", "order": f"ORD-{rng.randrange(10**6, 10**7)}"})
    call("request_credit", {"account": account, "invoice": invoice,
                            "references": [u["reference"] for u in roaming]},
         {"ok": True, "credit": round(sum(u["amount"] for u in roaming), 2),
          "case": f"CASE-{rng.randrange(10_000, 99_999)}", "review_days": 3})
    messages.append({"role": "assistant", "content": (
        f"Done: all three lines move to {new_plan} on 2024-06-01, and a credit for the "
        f"{len(roaming)} roaming charges of {invoice} is under review (3 days).")})
    messages.append({"role": "user", "content": "Thanks, that's everything."})
    messages.append({"role": "assistant", "content": "You're welcome. Have a good day!"})
    return messages
