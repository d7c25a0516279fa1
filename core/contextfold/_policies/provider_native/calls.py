"""What a provider pass sends beyond the messages (its request fields, merged over a
pipeline's passes), the provider calls it asks the driver to make, and the ledger it
writes beside what the provider took out of view."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..._contract.policy import CompactionContext, Policy, SummaryReply, SummaryRequest, Target
from ..._lossless.ledger import Ledger, ledger_beside
from ..._messages.model import Message

__all__ = ["ProviderReply", "ProviderRequest", "ledger_after", "performed", "request_fields"]


def request_fields(policy: Policy) -> dict[str, Any]:
    """The provider request fields ``policy`` sends with every call: its own
    ``request_fields``, or those of a pipeline's passes merged (``betas`` joined,
    ``context_management`` edits concatenated). Empty for a policy that sends none."""
    passes: Sequence[Any] = getattr(policy, "passes", (policy,))
    betas: list[str] = []
    edits: list[Any] = []
    other: dict[str, Any] = {}
    for p in passes:
        fields: Mapping[str, Any] = getattr(p, "request_fields", None) or {}
        for name, value in fields.items():
            if name == "betas":
                betas.extend(b for b in value if b not in betas)
            elif name == "context_management":
                edits.extend(value.get("edits", ()))
            else:
                other[name] = value
    if betas:
        other["betas"] = betas
    if edits:
        other["context_management"] = {"edits": edits}
    return other


@dataclass(frozen=True, slots=True)
class ProviderRequest(SummaryRequest):
    """A call to a provider's own compaction endpoint, yielded by a policy like a summary
    request and made by the driver (the policy stays free of I/O): the driver calls
    ``perform`` and sends back a [`ProviderReply`][contextfold.providers.ProviderReply] with its
    result as ``payload``."""

    perform: Callable[[], Any] | None = None
    """Makes the call; its return value is the reply's ``payload``."""


@dataclass(frozen=True, slots=True)
class ProviderReply(SummaryReply):
    """What the driver sends back for a
    [`ProviderRequest`][contextfold.providers.ProviderRequest]."""

    payload: Any = None
    """What ``perform`` returned (``None`` when it failed: ``error`` says why)."""


def performed(request: ProviderRequest) -> ProviderReply:
    """Make the call ``request`` asks for; a failure comes back as a failed reply (the
    policy then leaves the history to the rest of the engine), never as an exception."""
    if request.perform is None:
        return ProviderReply(text=None, origin="failed", error="nothing to perform")
    try:
        return ProviderReply(text=None, payload=request.perform())
    except Exception as exc:  # any client's error: the policy decides what then
        return ProviderReply(text=None, origin="failed", error=f"{type(exc).__name__}: {exc}")


def ledger_after(
    messages: Sequence[Message], targets: Sequence[Target], out: list[Message],
    context: CompactionContext, ledger: Ledger, *, after: int | None = None,
    previous: Sequence[Message] = (),
) -> tuple[list[Message], dict[str, Any]]:
    """``out`` with a ledger of what ``targets`` took out of ``messages`` (merged with the
    ``previous`` ledgers): right after ``out[after]`` and its tool results, or else just
    before the newest group; and the ledger's figures for the report."""
    return ledger_beside(messages, targets, out, context, ledger, after=after,
                         previous=previous)
