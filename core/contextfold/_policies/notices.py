"""Removal notices: every run of messages a policy drops leaves one line in view.

A policy that drops whole messages (truncation, a loop slice, a turn-aware composition)
leaves the model no sign of what went unless it says so. One notice per run of dropped
messages, where the run was, names how many went, the tools they ran and their most salient
identifiers, and the handle that reads them back::

    [12 messages removed (tools: read_file x3, grep; ids: REF-7Q2K-0005, inv_2231);
    read_original("ctx_1a2b3c4d5e6f")]

(one line). The rules a provider enforces hold: a notice is a user message of the
``"summary"`` source (context, never a prompt, never a second system message, never an
assistant message before the first user message), and it is placed between the kept
messages, never between a tool call and its result.

The handles are the ones the driver would give the run on its own: one per block of
`HANDLE_BLOCK` positions, so a run that grows at every
call (what a loop slice leaves out of an agent loop) keeps the handles of its full blocks
and their originals are kept once. The policy reports the run's ``"dropped"`` targets with
those handles, so the driver keeps the originals when the compaction happens, not when the
report is first read: the model can read a notice's handle at once.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._contract.policy import CompactionContext, Target, dropped_targets
from .._counting.bounds import token_bounds
from .._lossless.handles import HANDLE_BLOCK
from .._lossless.ledger_payload import is_ledger
from .._lossless.references import handle_for
from .._messages.model import Message
from .._messages.prompt_kinds import LEDGER_SOURCE
from .._messages.structure import leading_system_count
from .salience import salient_identifiers

__all__ = ["NOTICE_META", "Marks", "fitted_marks", "is_notice", "mark_removals",
           "notice_message"]

NOTICE_META = "removed"
"""The metadata key of a notice (the number of messages it stands for)."""

_IDS = 4  # identifiers named per notice
_TOOLS = 3  # tool names named per notice
_SCANNED = 256  # the newest messages of a run whose identifiers a notice ranks


def is_notice(message: Message) -> bool:
    """True for a removal notice this module made."""
    return message.source == "summary" and NOTICE_META in message.metadata


def notice_message(run: Sequence[Message], handles: Sequence[str], *, detail: bool = True
                   ) -> Message:
    """The notice for ``run`` (the dropped messages, in order) whose originals ``handles``
    read back; ``detail=False`` leaves out the tool names and identifiers."""
    what = ""
    if detail:
        parts = []
        tools = Counter(c.name for m in run if m.tool_calls for c in m.tool_calls)
        if tools:
            named = [f"{n} x{c}" if c > 1 else n for n, c in tools.most_common(_TOOLS)]
            more = len(tools) - len(named)
            parts.append("tools: " + ", ".join(named) + (f", +{more} more" if more > 0 else ""))
        ids = salient_identifiers(run[-_SCANNED:], _IDS)
        if ids:
            parts.append("ids: " + ", ".join(ids))
        what = f" ({'; '.join(parts)})" if parts else ""
    reads = ", ".join(f'read_original("{h}")' for h in handles)
    noun = "message" if len(run) == 1 else "messages"
    return Message(role="user", content=f"[{len(run)} {noun} removed{what}; {reads}]",
                   source="summary", metadata={"compaction": "notice", NOTICE_META: len(run)})


@dataclass(frozen=True)
class Marks:
    """An output with its notices, and the ``"dropped"`` targets their handles name."""

    messages: list[Message]
    """The output with a notice in place of each run of dropped messages."""
    origins: list[int | None]
    """What each output position held in the input (``None`` for a notice)."""
    targets: list[Target]
    """A ``"dropped"`` target for every dropped message, with its block's handle."""
    notices: list[tuple[int, Message]]
    """Each notice with the input position its run ends at."""

    def placed(self, out: Sequence[Message], origins: Sequence[int | None]) -> Marks:
        """These notices placed in ``out``, an output that keeps the same input positions
        (its messages cut or not)."""
        marked, where = _placed(out, origins, self.notices)
        return Marks(marked, where, self.targets, self.notices)


def mark_removals(
    messages: Sequence[Message], out: Sequence[Message], origins: Sequence[int | None],
    context: CompactionContext, *, detail: bool = True, first: int | None = None,
) -> Marks:
    """``out`` (the policy's output; ``origins`` gives each position's input index, ``None``
    for what the policy made) with a notice for every run of ``messages`` (from ``first``,
    by default after the leading system messages) that ``out`` does not hold.

    A run's notice goes before the first kept message that comes after the run in the
    input (after the output's leading system messages, never before a tool result), or at
    the end. Earlier ledgers are not counted as removed: a ledger is merged, not dropped.
    """
    start = leading_system_count(messages) if first is None else first
    kept = {o for o in origins if o is not None}
    runs = _runs(messages, start, kept)
    if not runs:
        return Marks(list(out), list(origins), [], [])
    notices: list[tuple[int, Message]] = []
    targets: list[Target] = []
    for a, b in runs:
        handles = []
        for x, y in _blocks(a, b):
            handle, made = _block(messages, x, y, context)
            handles.append(handle)
            targets += made
        notices.append((b, _notice(messages, a, b, handles, detail)))
    marked, where = _placed(out, origins, notices)
    return Marks(marked, where, targets, notices)


_NOTICES: dict[tuple[tuple[str, ...], bool], Message] = {}
_MEMO_NOTICES = 1024  # notices remembered, oldest forgotten first


def _notice(messages: Sequence[Message], a: int, b: int, handles: list[str], detail: bool
            ) -> Message:
    """The notice of ``messages[a:b]``. Its handles are content hashes of the run, so a run
    named by the same handles gets the same notice object back (its token count already
    known): a policy that rebuilds its output at every call leaves out the same runs."""
    key = (tuple(handles), detail)
    found = _NOTICES.get(key)
    if found is None:
        found = notice_message(messages[a:b], handles, detail=detail)
        if len(_NOTICES) >= _MEMO_NOTICES:
            del _NOTICES[next(iter(_NOTICES))]
        _NOTICES[key] = found
    return found


_MEMO: dict[tuple[int, int, int], tuple[tuple[Message, ...], str, list[Target]]] = {}
_MEMO_BLOCKS = 512  # blocks remembered (references only), oldest forgotten first


def _block(messages: Sequence[Message], x: int, y: int, context: CompactionContext
           ) -> tuple[str, list[Target]]:
    """The handle of ``messages[x:y]`` and its ``"dropped"`` targets. A policy that leaves
    out more of the same history at every call (a loop slice) meets the same blocks again:
    one made before for the very same message objects (compared by identity: messages are
    immutable) is taken as it is instead of being hashed and reported anew."""
    key = (x, y, id(messages[x]))
    found = _MEMO.get(key)
    if found is not None and all(map(operator.is_, found[0], messages[x:y])):
        return found[1], found[2]
    members = tuple(messages[x:y])
    handle = handle_for(members)
    # Bounds, not counts (the report counts them when read); indexed by input position.
    figures = [0] * x + token_bounds(context.counter, members)
    made = dropped_targets(messages, range(x, y), figures, handle)
    if len(_MEMO) >= _MEMO_BLOCKS:
        del _MEMO[next(iter(_MEMO))]
    _MEMO[key] = (members, handle, made)
    return handle, made


def fitted_marks(
    messages: Sequence[Message], out: Sequence[Message], origins: Sequence[int | None],
    context: CompactionContext, fits: Callable[[Sequence[Message]], bool],
) -> Marks | None:
    """`mark_removals` with detailed notices when the result ``fits``, else with
    bare ones (count and handles), else ``None``."""
    for detail in (True, False):
        marks = mark_removals(messages, out, origins, context, detail=detail)
        if fits(marks.messages):
            return marks
    return None


def _runs(messages: Sequence[Message], start: int, kept: set[int]) -> list[tuple[int, int]]:
    """The runs of positions from ``start`` that are not kept (ledgers end a run): the
    gaps between the kept positions, found without visiting each dropped one."""
    ledgers = {i for i, m in enumerate(messages)
               if m.source == LEDGER_SOURCE and i >= start and is_ledger(m)}
    runs: list[tuple[int, int]] = []
    a = start
    for i in sorted(kept | ledgers):
        if i < a:
            continue
        if i > a:
            runs.append((a, i))
        a = i + 1
    if a < len(messages):
        runs.append((a, len(messages)))
    return runs


def _blocks(start: int, end: int) -> list[tuple[int, int]]:
    """``start..end - 1`` cut where a position is a multiple of ``HANDLE_BLOCK`` (the
    driver's blocks, so the handles are the ones it would make)."""
    found = []
    while start < end:
        stop = min(end, (start // HANDLE_BLOCK + 1) * HANDLE_BLOCK)
        found.append((start, stop))
        start = stop
    return found


def _placed(
    out: Sequence[Message], origins: Sequence[int | None], notices: list[tuple[int, Message]],
) -> tuple[list[Message], list[int | None]]:
    """``out`` with each notice before the first kept message from its run's end on."""
    floor = leading_system_count(out)
    marked: list[Message] = list(out[:floor])
    where: list[int | None] = list(origins[:floor])
    pending = list(notices)  # ascending run ends
    for k in range(floor, len(out)):
        o = origins[k]
        if o is not None and out[k].role != "tool":
            while pending and pending[0][0] <= o:
                marked.append(pending.pop(0)[1])
                where.append(None)
        marked.append(out[k])
        where.append(o)
    for _, notice in pending:
        marked.append(notice)
        where.append(None)
    return marked, where
