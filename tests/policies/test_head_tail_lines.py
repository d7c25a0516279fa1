"""Head+tail cuts keep the middle's lines that name salient identifiers, in the room of
the plain cut, with the handle in the label and the cuts at line or word boundaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contextfold._head_tail import HeadTail, truncate_head_tail

HANDLE = "ctx_0123456789ab (read_original)"
FILLER = "the shipment left the depot and the customer asked about the delivery window"


def log(marked: dict[int, str], lines: int = 200) -> str:
    """A long tool result: filler lines, a few of them naming an identifier."""
    return "\n".join(f"{k:03d} {FILLER} {marked.get(k, '')}".rstrip() for k in range(lines))


def test_the_lines_of_the_middle_naming_identifiers_follow_the_label() -> None:
    text = log({60: "order ORD-9060 refunded", 120: "see ReviewTokenStore._trim_end"})
    ids = ["ORD-9060", "ReviewTokenStore._trim_end"]
    plain = truncate_head_tail(text, handle=HANDLE)
    cut = truncate_head_tail(text, handle=HANDLE, identifiers=ids)
    head, rest = cut.split("\n[TRUNCATED", 1)
    label, rest = rest.split("]\n", 1)
    assert label.endswith(f"and 2 lines of the middle naming identifiers; full text: {HANDLE}")
    assert rest.startswith(f"… 060 {FILLER} order ORD-9060 refunded\n"
                           f"… 120 {FILLER} see ReviewTokenStore._trim_end\n")
    assert text.startswith(head) and head.endswith("\n")  # ends at a line's end
    assert len(cut) <= len(plain)
    assert "ORD-9060" not in plain and "ReviewTokenStore" not in plain


def test_identifiers_the_head_or_tail_show_keep_no_line() -> None:
    text = log({1: "order ORD-0001", 199: "order ORD-0199"})
    ids = ["ORD-0001", "ORD-0199"]
    assert truncate_head_tail(text, identifiers=ids) == truncate_head_tail(text)


def test_a_long_line_is_kept_around_its_identifier_at_word_bounds() -> None:
    words = " ".join(f"w{k}" for k in range(400))
    text = log({100: f"{words} REF-7Q2K-0005 {words}"})
    cut = truncate_head_tail(text, identifiers=["REF-7Q2K-0005"])
    line = next(x for x in cut.splitlines() if x.startswith("… "))
    assert "REF-7Q2K-0005" in line and len(line) <= 2 + 160
    assert all(word.startswith("w") or word in ("…", "REF-7Q2K-0005")
               for word in line.split())  # no word cut in half


@given(
    marked=st.dictionaries(st.integers(0, 299),
                           st.from_regex(r"[A-Z]{2,4}-[0-9]{4,6}", fullmatch=True), max_size=12),
    shape=st.tuples(st.floats(0.01, 0.4), st.floats(0.01, 0.4)),
    cap=st.one_of(st.none(), st.integers(0, 4_000)),
)
def test_a_cut_keeping_lines_never_takes_more_than_the_plain_cut(
    marked: dict[int, str], shape: tuple[float, float], cap: int | None,
) -> None:
    text = log(marked, 300)
    form = HeadTail(head_ratio=shape[0], tail_ratio=shape[1])
    plain = truncate_head_tail(text, form, handle=HANDLE, max_chars=cap)
    cut = truncate_head_tail(text, form, handle=HANDLE, max_chars=cap,
                             identifiers=list(marked.values()))
    assert len(cut) <= len(plain)
    if plain != text:
        assert HANDLE in cut  # the label keeps its handle
    # Every kept line is a line (or a piece of one) of the original.
    for line in cut.splitlines():
        if line.startswith("… "):
            assert line[2:] in text


def test_identifiers_whose_line_does_not_fit_are_named_alone() -> None:
    # A tight cut: head and tail of a few dozen characters leave no room for a whole line
    # of the middle, but its identifiers are still named, in no more than the plain cut.
    text = log({100: "order ORD-9100", 150: "order ORD-9150", 200: "order ORD-9200"}, 300)
    form = HeadTail(head_ratio=0.01, tail_ratio=0.01)
    ids = ["ORD-9100", "ORD-9150", "ORD-9200"]
    plain = truncate_head_tail(text, form, handle=HANDLE, max_chars=120)
    cut = truncate_head_tail(text, form, handle=HANDLE, max_chars=120, identifiers=ids)
    assert len(cut) <= len(plain)
    named = [line for line in cut.splitlines() if line.startswith("[also in the middle: ")]
    assert len(named) == 1
    assert any(value in named[0] for value in ids)
    assert all(value not in plain for value in ids)
    assert HANDLE in cut



def test_a_cut_that_shows_nothing_has_the_short_label_and_keeps_the_handle() -> None:
    # The room a label takes is the room a handle needs on the tightest budgets.
    text = log({}, lines=20)
    cut = truncate_head_tail(text, handle=HANDLE, max_chars=0)
    label = f"[TRUNCATED — {len(text):,} chars original, all omitted; full text: {HANDLE}]"
    assert cut == f"\n{label}\n"
    shown = truncate_head_tail(text, handle=HANDLE, max_chars=2)
    assert "showing first 1 + last 1 chars" in shown and len(shown) > len(cut) + 20
