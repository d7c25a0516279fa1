"""The message model: frozen, compared by content, fingerprinted, metadata read-only."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold.policy import OpaquePart
from contextfold.testing import histories


def test_messages_are_frozen() -> None:
    m = cf.Message(role="user", content="hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.content = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cf.ToolCall("c", "f").name = "g"  # type: ignore[misc]


def test_metadata_is_read_only_and_detached_from_the_callers_dict() -> None:
    given_meta = {"importance": 0.5}
    m = cf.Message(role="user", content="hi", metadata=given_meta)
    given_meta["importance"] = 0.9
    assert m.metadata["importance"] == 0.5
    with pytest.raises(TypeError):
        m.metadata["pinned"] = True  # type: ignore[index]
    part = OpaquePart(kind="audio", data={"a": 1})
    with pytest.raises(TypeError):
        part.data["a"] = 2  # type: ignore[index]


def test_equality_ignores_the_id_and_replace_keeps_it() -> None:
    a = cf.Message(role="user", content="hi")
    b = cf.Message(role="user", content="hi")
    assert a == b and a.id != b.id and hash(a) == hash(b)
    assert a != cf.Message(role="user", content="hi!")
    changed = dataclasses.replace(a, content="hello")
    assert changed.id == a.id and changed != a


def test_lists_become_tuples() -> None:
    m = cf.Message(role="assistant", content=[cf.TextPart("a")],  # type: ignore[arg-type]
                   tool_calls=[cf.ToolCall("c", "f")])  # type: ignore[arg-type]
    assert m.content == (cf.TextPart("a"),) and m.tool_calls == (cf.ToolCall("c", "f"),)


def test_convenience_properties() -> None:
    image = cf.ImagePart(url="https://x.test/a.png", width=10, height=20)
    m = cf.Message(role="tool", content=(cf.TextPart("a"), image, cf.TextPart("b")),
                   tool_call_id="c", metadata={"is_error": True, "pinned": True})
    assert m.text == "a\nb" and m.images == (image,)
    assert m.is_error and m.is_pinned and not m.has_tool_calls
    call = cf.Message(role="assistant", content="xy", reasoning="abc",
                      tool_calls=(cf.ToolCall("c", "fn", '{"a":1}'),))
    assert call.has_tool_calls and call.char_count == 2 + 3 + 2 + 7
    assert cf.Message(role="user", content="x").images == ()


def test_fingerprint_follows_content() -> None:
    a = cf.Message(role="user", content="hi", source="direct")
    assert a.fingerprint == cf.Message(role="user", content="hi", source="direct").fingerprint
    assert a.fingerprint != cf.Message(role="user", content="hi", source="broadcast").fingerprint
    assert a.fingerprint != cf.Message(role="user", content="hi", metadata={"x": 1}).fingerprint
    assert a.fingerprint is a.fingerprint  # computed once


def test_repr_shows_only_what_is_set() -> None:
    m = cf.Message(role="user", content="hi", sender_id="")
    assert repr(m) == "Message(role='user', content='hi', sender_id='')"


@given(histories(max_turns=3, max_tool_chars=300))
def test_copies_are_equal_with_equal_fingerprints(history: list[cf.Message]) -> None:
    for m in history:
        copy = dataclasses.replace(m, id="other")
        assert copy == m and copy.fingerprint == m.fingerprint and hash(copy) == hash(m)
    by_fingerprint = {m.fingerprint: m for m in history}
    assert all(by_fingerprint[m.fingerprint] == m for m in history)  # same print, same message


def _reference_fingerprint(message: cf.Message) -> str:
    """The fingerprint as first written (dataclass fields, ``json.dumps``): stored ids and
    handles depend on its bytes, so the faster one must give the same."""
    import hashlib
    import json
    from datetime import datetime

    from contextfold._messages.model import _part_dict

    out = {}
    for f in dataclasses.fields(message):
        if not f.compare:
            continue
        value = getattr(message, f.name)
        if f.name == "content" and not isinstance(value, str):
            value = [_part_dict(p) for p in value]
        elif f.name == "tool_calls":
            value = [[c.id, c.name, c.arguments] for c in value]
        elif f.name == "metadata":
            value = dict(value)
        elif isinstance(value, datetime):
            value = value.isoformat()
        out[f.name] = value
    payload = json.dumps(out, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.blake2b(payload.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@given(histories(max_turns=3, max_tool_chars=300, imperfect=True))
def test_fingerprints_keep_their_bytes(history: list[cf.Message]) -> None:
    odd = cf.Message("user", "\ud83d broken \U0001f600", metadata={"when": object, "n": 1.5},
                     created_at=history[-1].created_at, sender_id="")
    for m in [*history, odd]:
        assert m.fingerprint == _reference_fingerprint(m)


@given(histories(max_turns=3, max_tool_chars=300))
def test_with_stable_id_is_replace_with_the_stable_id(history: list[cf.Message]) -> None:
    from contextfold.integration import stable_id, with_stable_id

    for position, m in enumerate(history):
        made = with_stable_id(position, m)
        expected = dataclasses.replace(m, id=stable_id(position, m))
        assert made == expected and made.id == expected.id and made is not m
        assert repr(made) == repr(expected) and made.fingerprint == expected.fingerprint
        assert made.metadata == m.metadata and made.created_at == m.created_at


def test_a_dataclass_subclass_is_checked_and_frozen_too() -> None:
    @dataclasses.dataclass(frozen=True)
    class Tagged(cf.Message):
        tag: str = ""

    given_meta = {"importance": 0.5}
    m = Tagged("user", "hi", metadata=given_meta, tag="t")
    given_meta["importance"] = 0.9
    assert m.metadata["importance"] == 0.5 and m.tag == "t" and m.id
    with pytest.raises(cf.ConversionError, match="role"):
        Tagged("narrator", "hi")  # type: ignore[arg-type]


_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40)


@given(histories(max_turns=3, max_tool_chars=600), _TEXT, st.one_of(st.none(), _TEXT),
       st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.floats(), _TEXT,
                                                      st.lists(st.integers(), max_size=3)),
                       max_size=3))
def test_the_written_out_payload_is_the_encoders(
    history: list[cf.Message], text: str, name: str | None, metadata: dict[str, object],
) -> None:
    from datetime import datetime, timezone

    from contextfold._messages.model import _CANONICAL_JSON, _canonical, _payload

    made = [cf.Message("user", text, name=name, metadata=metadata,
                       created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
                       source="broadcast", sender_id=""),
            cf.Message("tool", text, tool_call_id=text or "x", name=name)]
    for m in [*history, *made]:
        assert _payload(m) == _CANONICAL_JSON.encode(_canonical(m))


@given(histories(max_turns=3, max_tool_chars=300))
def test_dropped_targets_are_the_targets_the_dataclass_makes(history: list[cf.Message]) -> None:
    from contextfold._contract.policy import dropped_targets
    from contextfold.policy import Target

    sizes = list(range(len(history)))
    made = dropped_targets(history, range(0, len(history), 2), sizes, "ctx_0123456789ab")
    assert made == [Target(i, m.role, "dropped", sizes[i], 0,
                              m.name if m.role == "tool" else None, "ctx_0123456789ab")
                    for i, m in enumerate(history) if i % 2 == 0]
    assert all(hash(a) == hash(b) for a, b in zip(made, made, strict=True))


def test_a_new_id_is_a_uuid4_in_hex() -> None:
    import uuid

    ids = {cf.Message("user", "hi").id for _ in range(500)}
    assert len(ids) == 500
    for made in ids:
        parsed = uuid.UUID(hex=made)
        assert parsed.hex == made and parsed.version == 4 and parsed.variant == uuid.RFC_4122
