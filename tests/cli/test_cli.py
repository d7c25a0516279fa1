"""The command line: inspect and eval on small transcripts, and the evaluation's rules."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import contextfold as cf
from contextfold.cli import main
from contextfold.cli.eval import (
    Contender,
    cached_prefixes,
    evaluate,
    independent_identifiers,
    needed_next,
    our_contender,
    probes_of,
)
from contextfold.cli.replay import step_boundaries
from contextfold.cli.transcripts import Transcript, generated_chats, load_transcripts
from contextfold.policy import extract_identifiers


def _chat(turns: int) -> list[dict[str, object]]:
    msgs: list[dict[str, object]] = [{"role": "system", "content": "You are a support agent."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Look up order ORD-{1000 + i} please."})
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "get_order",
                          "arguments": json.dumps({"id": f"ORD-{1000 + i}"})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}",
                     "content": f"Order ORD-{1000 + i} shipped 2024-05-{10 + i % 18:02d}. " * 40})
        msgs.append({"role": "assistant", "content": f"Order ORD-{1000 + i} has shipped."})
    return msgs


@pytest.fixture()
def transcript_file(tmp_path: Path) -> Path:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(_chat(12)))
    return path


def test_inspect_prints_steps_savings_and_a_chosen_step(transcript_file: Path,
                                                         tmp_path: Path) -> None:
    out = io.StringIO()
    status = main(["inspect", str(transcript_file), "--policy", "truncation", "--budget", "3000",
                   "--step", "5", "--html", str(tmp_path / "r.html")], out=out)
    text = out.getvalue()
    assert status == 0, text
    assert "input validation: clean" in text
    assert "what the model sees at step 5" in text
    assert "compaction(s); at the last step the model sees" in text
    assert (tmp_path / "r.html").exists()
    seen = json.loads(text.split("what the model sees at step 5:\n", 1)[1].split("\nreport")[0])
    assert seen[0]["role"] == "system"


def test_inspect_reports_problems_of_the_input(tmp_path: Path) -> None:
    msgs = _chat(3)
    del msgs[3]  # the first tool result: its call is left unanswered
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(msgs))
    out = io.StringIO()
    assert main(["inspect", str(path), "--policy", "truncation", "--budget", "3000"],
                out=out) == 0
    assert "unanswered_call" in out.getvalue()


def test_inspect_unreadable_file_is_a_clear_error(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text("[{")
    assert main(["inspect", str(path)], out=io.StringIO()) == 2
    assert str(path) in capsys.readouterr().err


def test_inspect_a_step_after_the_replay_is_a_clear_error_before_it_runs(
        transcript_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert main(["inspect", str(transcript_file), "--budget", "3000", "--step", "999"],
                out=out) == 2
    assert out.getvalue() == ""  # nothing was replayed
    assert capsys.readouterr().err == (
        "contextfold inspect: error: --step 999: the replay has steps 1 to 25\n")


def test_inspect_a_record_outside_the_file_is_a_clear_error(
        transcript_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert main(["inspect", str(transcript_file), "--record", "3"], out=out) == 2
    assert "holds records 0 to 0" in capsys.readouterr().err


def test_inspect_marks_where_max_chars_cut_the_step(transcript_file: Path) -> None:
    out = io.StringIO()
    assert main(["inspect", str(transcript_file), "--budget", "3000", "--step", "5",
                 "--max-chars", "200"], out=out) == 0
    assert "more characters; raise --max-chars to see them]" in out.getvalue()


def test_inspect_an_unknown_model_names_the_budget_option(
    transcript_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(transcript_file), "--model", "acme-9"], out=io.StringIO()) == 2
    assert "--budget TOKENS" in capsys.readouterr().err


def test_every_benchmark_module_keeps_the_runner_contract() -> None:
    """``contextfold bench`` calls ``run(quick)`` of every ``benchmarks/bench_*.py``."""
    import ast

    benchmarks = Path(__file__).resolve().parents[2] / "benchmarks"
    modules = sorted(benchmarks.glob("bench_*.py"))
    assert modules
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        runs = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "run"]
        assert runs, f"{path.name} has no run(quick)"
        assert [a.arg for a in runs[0].args.args] == ["quick"], path.name


def test_bench_quick_runs_from_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real command, on its quickest module, in a subprocess as a user runs it."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "bench", "--quick", "truncation"],
        cwd=root, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "truncation" in done.stdout and "ratio" in done.stdout


def test_eval_prints_ours_and_peers(transcript_file: Path) -> None:
    out = io.StringIO()
    status = main(["eval", str(transcript_file), "--policies", "truncation",
                   "--fractions", "0.5,0.8"], out=out)
    text = out.getvalue()
    assert status == 0, text
    assert text.count("truncation") == 2
    assert "langchain trim_messages" in text
    assert "llamaindex ChatMemoryBuffer" in text


def _whole(t: Transcript, allowance: int, counter: cf.TokenCounter) -> list[cf.Message]:
    return list(t.messages)


def _system_and_last(t: Transcript, allowance: int, counter: cf.TokenCounter) -> list[cf.Message]:
    return [t.messages[0], cf.Message("user", "Anything else?")]


def _broken(t: Transcript, allowance: int, counter: cf.TokenCounter) -> list[cf.Message]:
    raise cf.BudgetExceededError("everything", needed=10, available=1)


def test_evaluation_rules(transcript_file: Path, counter: cf.TokenCounter) -> None:
    [t] = load_transcripts(transcript_file)
    idents, _ = probes_of(t)
    assert "ORD-1000" in idents and "You are a support agent." not in idents
    rows = evaluate([t], [Contender("whole", _whole), Contender("tiny", _system_and_last),
                          Contender("broken", _broken)], fractions=(0.5, 1.0), counter=counter)
    by = {(r.contender, r.fraction): r for r in rows}
    # The whole history is over a half allowance: the provider would reject it.
    assert by[("whole", 0.5)].over_budget == 1 and by[("whole", 0.5)].kept == 0
    assert by[("whole", 1.0)].score == 1.0
    assert by[("tiny", 0.5)].kept == 0 and by[("tiny", 0.5)].saved > 0.9
    assert by[("broken", 0.5)].errors and by[("broken", 0.5)].kept == 0


def test_probes_are_found_independently_of_the_summarizer() -> None:
    text = ('Call get_user_details for ana@example.com about ORD-1042 (see src/app/main.py); '
            'the total was 1204.50 and "flight": "HAT001", then the end.')
    found = independent_identifiers(text)
    assert {"get_user_details", "ana@example.com", "ORD-1042", "src/app/main.py", "1204.50",
            "HAT001"} <= set(found)
    assert not {"Call", "the", "total", "end"} & set(found)
    # not the summarizer's extractor: what one finds the other need not
    assert set(found) != set(extract_identifiers(text))
    assert "get_user_details" not in extract_identifiers(text)


def _whole_but_old(t: Transcript, allowance: int, counter: cf.TokenCounter) -> list[cf.Message]:
    """The system prompt and the last three messages: what came earlier is out of view."""
    return [t.messages[0], *t.messages[-3:]] if len(t.messages) > 4 else list(t.messages)


def test_needed_next_asks_whether_the_model_had_what_its_next_action_used(
    transcript_file: Path, counter: cf.TokenCounter,
) -> None:
    [t] = load_transcripts(transcript_file)
    need = needed_next(t)
    # each call's argument repeats the order id the user gave just before
    assert need and all(any(p.startswith("ORD-") for p in probes) for probes in need.values())
    rows = evaluate([t], [Contender("whole", _whole), Contender("short", _whole_but_old)],
                    fractions=(1.0,), counter=counter)
    by = {r.contender: r for r in rows}
    assert by["whole"].needed == by["short"].needed == sum(map(len, need.values()))
    assert by["whole"].needed_score == 1.0
    assert by["short"].needed_score < 1.0  # the final answers use ids seen only earlier


def test_facts_recalled_asks_whether_the_answering_call_had_the_latest_value(
    counter: cf.TokenCounter,
) -> None:
    [t] = generated_chats(1, seed=4, sessions=4)
    assert t.asked and all(n < len(t.messages) for n in t.asked)
    rows = evaluate([t], [Contender("whole", _whole), Contender("short", _whole_but_old),
                          Contender("broken", _broken)], fractions=(1.0,), counter=counter)
    by = {r.contender: r for r in rows}
    asked = sum(map(len, t.asked.values()))
    assert by["whole"].asked == by["short"].asked == by["broken"].asked == asked
    assert by["whole"].recall_score == 1.0
    # the last three messages hold the question, not the fact stated sessions earlier
    assert by["short"].recall_score < 0.5
    assert by["broken"].asked_kept == 0 and by["broken"].errors


def test_context_used_is_the_share_of_the_allowance_sent_where_the_history_is_over_it(
    counter: cf.TokenCounter,
) -> None:
    [t] = generated_chats(1, seed=5, sessions=4)
    rows = evaluate([t], [Contender("whole", _whole), Contender("short", _whole_but_old)],
                    fractions=(0.5,), counter=counter)
    by = {r.contender: r for r in rows}
    assert by["whole"].fills and min(by["whole"].fills) > 1.0  # over: it keeps nothing
    assert by["whole"].recall_score == 0.0
    assert len(by["short"].fills) == len(by["whole"].fills) and by["short"].fill < 0.2


def test_eval_runs_on_generated_chats_alone(tmp_path: Path) -> None:
    out = io.StringIO()
    status = main(["eval", "--chats", "2", "--chat-sessions", "3", "--policies", "truncation",
                   "--no-peers", "--fractions", "0.5", "--json", str(tmp_path / "rows.json")],
                  out=out)
    text = out.getvalue()
    assert status == 0, text
    assert text.startswith("2 transcript(s)") and "facts recalled" in text
    [row] = json.loads((tmp_path / "rows.json").read_text())
    assert row["asked"] > 0 and 0 < row["recall"] <= 1 and row["fill"] > 0.5
    assert main(["eval", "--policies", "truncation"], out=io.StringIO()) == 2


def test_cached_prefix_counts_calls_that_start_with_the_whole_previous_request(
    counter: cf.TokenCounter,
) -> None:
    [t] = generated_chats(1, seed=6, sessions=3)
    rows = evaluate([t], [Contender("whole", _whole), Contender("short", _whole_but_old)],
                    fractions=(1.0,), counter=counter)
    by = {r.contender: r for r in rows}
    # each measured call (one that uses earlier probes, answers a question, or the last)
    # beside the model call before it
    calls = step_boundaries(t.messages)
    measured = {*needed_next(t), *t.asked, len(t.messages)}
    pairs = sum(1 for n in measured if any(c < n for c in calls))
    assert by["whole"].prefix_pairs == by["short"].prefix_pairs == pairs > 3
    assert by["whole"].cached_score == 1.0  # every request extends the one before
    assert by["short"].cached_score == 0.0  # a sliding window never repeats its start
    a, b = cf.Message("user", "a"), cf.Message("assistant", "b")
    assert cached_prefixes([[a], [a, b], [b], [b, a]]) == (3, 2)


def test_recoverable_counts_what_the_handles_in_view_lead_back_to(
    transcript_file: Path, counter: cf.TokenCounter,
) -> None:
    [t] = load_transcripts(transcript_file)
    rows = evaluate([t], [our_contender("threshold", cf.ThresholdPolicy),
                          Contender("short", _whole_but_old)], fractions=(0.05,),
                    counter=counter)
    by = {r.contender: r for r in rows}
    threshold, short = by["threshold"], by["short"]
    # a twentieth of the tokens: probes left the view (at a tenth nearly all of them stay,
    # and a summary's timestamp can decide the last one)
    assert threshold.kept < threshold.probes
    assert threshold.recoverable == threshold.probes  # each one is behind a handle in view
    assert short.recoverable == short.kept < short.probes  # a peer keeps no originals
