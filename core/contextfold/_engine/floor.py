"""The floor under every policy: when a policy cannot fit its output in the budget, the
system prompt and the latest user request still make a valid request, so the engine sends
that (with a short notice when it fits) instead of refusing the call.

A request too long to fit beside the system prompt (a task statement longer than the
window the policy was given) is cut head+tail, its label naming the handle of its full
text. Only when not even that cut fits does the policy's ``BudgetExceededError`` reach the
caller. What the floor leaves out gets a handle like anything a policy removes, named in
the notice when it fits.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._contract.policy import CompactionContext, PolicyOutcome, Target
from .._head_tail import HeadTail
from .._lossless.references import handle_for, replaced_line
from .._messages.model import Message
from .._messages.prompt_kinds import find_prompt
from .._messages.structure import leading_system_count
from .._policies.fitting import fits_budget, squeeze
from ..errors import BudgetExceededError

__all__ = ["FLOOR_NOTICE", "floor_outcome", "latest_request"]

FLOOR_NOTICE = (
    "[CONTEXT NOTICE]\n"
    "The {dropped} earlier messages of this conversation did not fit the context window and "
    "were left out. Answer the request below; ask again for anything earlier you need."
)


def floor_outcome(
    view: Sequence[Message], context: CompactionContext, error: BudgetExceededError,
    policy: str,
) -> PolicyOutcome:
    """The system messages and the latest user request, with a notice when it fits; the
    request cut head+tail (with its handle) when the pair does not fit whole.

    Raises:
        BudgetExceededError: ``error`` itself, when there is no user request or not even
            the system messages and the request's labelled cut fit.
    """
    n_sys = leading_system_count(view)
    latest = latest_request(view)
    if latest is None:
        raise error
    system = list(view[:n_sys])
    request = view[latest]
    dropped = len(view) - n_sys - 1
    left_out = [i for i in range(n_sys, len(view)) if i != latest]
    span = handle_for(view[i] for i in left_out) if left_out else None
    plain = FLOOR_NOTICE.format(dropped=dropped)
    # The handle is what makes the left-out messages recoverable, so a one-line mark naming
    # it comes before the explanation without it, as the policies' bare notices do.
    texts = ([plain + "\n" + replaced_line(dropped, span),
              f'[{dropped} earlier messages left out; read_original("{span}")]', plain]
             if span else [])  # nothing left out, nothing to say
    notices = [Message(role="user", content=text, source="summary", created_at=context.now,
                       metadata={"compaction": "notice"}) for text in texts]
    budget = context.budget.input_budget
    out: list[Message] | None = None
    noticed_out = False
    # The request whole comes first, then a notice: the request is cut only when even the
    # bare pair does not fit, and then only the one-line notice naming the handle may take
    # some of its room (an explanation without the handle may not).
    for cut, tried in ((False, [*notices, None]), (True, [*notices[1:2], None])):
        for notice in tried:
            candidate = [*system, *([notice] if notice is not None else []), request]
            if (_cut_last(candidate, context) if cut
                    else context.measure(candidate) <= budget):
                out, noticed_out = candidate, notice is not None
                break
        if out is not None:
            break
    else:
        raise error
    count = context.counter.count_message
    gone = tuple(
        Target(i, view[i].role, "dropped", count(view[i]), 0,
               view[i].name if view[i].role == "tool" else None, handle=span)
        for i in left_out
    )
    if out[-1] is not request:
        gone = tuple(sorted((*gone, Target(
            latest, request.role, "truncated", count(request), count(out[-1]),
            handle=handle_for(request))), key=lambda t: t.index))
    return PolicyOutcome(
        messages=out, method="floor", targets=gone,
        notes=(f"policy {policy!r} could not fit the budget ({error}); sent the system prompt "
               f"and the latest user request, {dropped} earlier messages left out",
               *(() if noticed_out or not dropped else
                 (f"no room for the removal notices beside the latest request; the handle "
                  f"of what was left out is {span}",))),
        details={"dropped_messages": dropped, "request_cut": out[-1] is not request},
    )


_REQUEST_SHAPE = HeadTail(head_ratio=0.6, head_cap=10**9, tail_ratio=0.39, tail_cap=10**9)
"""How the floor cuts a request: as much of it as fits, the head (where a task statement
says what to do) more than the tail; not the tool results' shape, whose caps would keep a
few thousand characters of a request the room holds nearly whole."""


def _cut_last(candidate: list[Message], context: CompactionContext) -> bool:
    """Cut the last message of ``candidate`` (the request) head+tail in place to the most
    that fits the budget, its label naming its handle; False, ``candidate`` unchanged,
    when not even that fits or the cut would not name the handle."""
    last = len(candidate) - 1
    return squeeze(candidate, [last], [candidate[last]], fits_budget(context), _REQUEST_SHAPE,
                   context, handles=True)


def latest_request(view: Sequence[Message]) -> int | None:
    """Index of the latest user request: the most recent real prompt (not a summary, a
    nudge or a notice), else the last user message of any kind."""
    start = leading_system_count(view)
    found = find_prompt(view, start)
    if found is not None:
        return found
    return next((i for i in range(len(view) - 1, start - 1, -1) if view[i].role == "user"),
                None)
