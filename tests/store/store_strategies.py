"""Hypothesis strategies for any message the model can hold."""

from __future__ import annotations

from datetime import timedelta, timezone
from typing import Any

from hypothesis import strategies as st

import contextfold as cf
from contextfold.policy import OpaquePart

_text = st.text(max_size=40) | st.text(
    st.characters(codec=None, categories=["Lu", "Cc"])
    | st.characters(min_codepoint=0xD800, max_codepoint=0xDBFF), max_size=5)
"""Any text, including NUL, control characters and lone (high) surrogates, which JSON
carries as escapes. A high+low pair held as two code points is left out: every JSON
reader, ours included, reads it back as the one character it encodes."""
_json_scalars = st.none() | st.booleans() | st.integers() | _text | st.floats(
    allow_nan=False, allow_infinity=False)
json_values: st.SearchStrategy[Any] = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)

_parts = st.one_of(
    st.builds(cf.TextPart, _text),
    st.builds(
        cf.ImagePart, url=_text, detail=st.none() | st.sampled_from(["low", "high", "auto"]),
        width=st.none() | st.integers(0, 10_000), height=st.none() | st.integers(0, 10_000),
        media_type=st.none() | st.just("image/png"),
    ),
    st.builds(OpaquePart, kind=_text, data=st.dictionaries(_text, json_values, max_size=3)),
)

_zones = st.sampled_from([None, timezone.utc, timezone(timedelta(hours=5, minutes=30)),
                          timezone(timedelta(hours=-8))])

_nonempty = _text.filter(bool)


@st.composite
def _messages(draw: st.DrawFn) -> cf.Message:
    """Any message the model accepts: every role, and the fields each role may carry."""
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
    calls: tuple[cf.ToolCall, ...] = ()
    if role == "assistant":
        calls = tuple(draw(st.lists(st.builds(cf.ToolCall, id=_nonempty, name=_text,
                                              arguments=_text), max_size=2)))
    return cf.Message(
        role=role,  # type: ignore[arg-type]
        content=draw(_text | st.lists(_parts, max_size=3).map(tuple)),
        tool_calls=calls,
        tool_call_id=draw(st.none() | _nonempty) if role == "tool" else None,
        name=draw(st.none() | _text),
        reasoning=draw(st.none() | _text),
        source=draw(st.none() | _text),
        sender_id=draw(st.none() | _text),
        created_at=draw(st.none() | st.datetimes(timezones=_zones)),
        metadata=draw(st.dictionaries(_text, json_values, max_size=3)),
        id=draw(st.text(min_size=1, max_size=32)),
    )


messages: st.SearchStrategy[cf.Message] = _messages()
