"""Every option of every command refuses a bad value before any work starts: one line on
standard error naming the option and what it expects, exit status 2."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from contextfold.cli import _parser, main
from contextfold.cli.progress import Progress

# command -> option -> bad values; "" is the positional argument. Options that take no
# value (--real, --no-peers, --quick) have none to get wrong.
BAD: dict[str, dict[str, list[str]]] = {
    "demo": {
        "--data-dir": ["{file}", "{file}/below"],
        "--emails": ["0", "-1", "abc", "2.5", "501"],
        "--model": ["gpt-4o"],  # without --real: the offline demo's model is scripted
    },
    "inspect": {
        "": ["missing.json", "sample:nope", "{dir}"],
        "--policy": ["nope"],
        "--budget": ["0", "-5", "abc"],
        "--model": ["acme-9"],  # no known window: --budget must say it
        "--step": ["0", "-1", "x", "999"],
        "--record": ["-1", "x", "9"],
        "--html": ["{dir}", "{dir}/missing/report.html"],
        "--max-chars": ["0", "-3", "many"],
    },
    "eval": {
        "": ["missing.json", "sample:nope"],
        "--chats": ["-1", "x"],
        "--chat-sessions": ["2", "0", "x"],
        "--policies": ["nope", "threshold,nope", "threshold,threshold", ""],
        "--fractions": ["abc", "0", "-0.5", "1.5", "nan", "0.5,", ""],
        "--model": [],  # any name: an unknown model is counted by the character estimate
        "--limit": ["0", "-2", "x"],
        "--split": ["x", "", "train"],
        "--json": ["{dir}", "{dir}/missing/rows.json"],
    },
    "bench": {
        "": ["nope"],
    },
}
ARGUMENT = {"inspect": ["sample:airline"], "eval": ["sample:assistant_first"]}
"""A good positional argument, for the cases that get an option wrong."""
VALID = {"eval": ["--no-peers", "--policies", "truncation"]}
"""Good options beside the bad one, so that only the bad one can fail."""


def _options(command: str) -> set[str]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    found = set()
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction)):
            continue
        found.add(action.option_strings[-1] if action.option_strings else "")
    return found


@pytest.mark.parametrize("command", sorted(BAD))
def test_every_option_that_takes_a_value_has_bad_values_here(command: str) -> None:
    assert _options(command) == set(BAD[command])


CASES = [(c, o, v) for c, options in BAD.items() for o, values in options.items()
         for v in values]


@pytest.mark.parametrize(("command", "option", "value"), CASES,
                         ids=[f"{c} {o or 'arg'} {v!r}" for c, o, v in CASES])
def test_a_bad_value_is_one_line_and_status_2(
    command: str, option: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # bench needs the checkout
    (tmp_path / "a-file").write_text("x")
    value = value.format(file=tmp_path / "a-file", dir=tmp_path)
    good = VALID.get(command, [])
    if option == "":
        argv = [command, value, *good]
    else:
        argv = [command, *ARGUMENT.get(command, []), *good, option, value]
    out = io.StringIO()
    try:
        status = main(argv, out=out)
    except SystemExit as stop:
        status = stop.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert status == 2, (argv, err)
    assert err.count("\n") == 1 and err.startswith(f"contextfold {command}: error: "), err
    assert out.getvalue() == ""  # refused before anything ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # nothing written


def test_eval_refuses_a_json_file_in_a_missing_folder_before_evaluating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    import contextfold.cli.eval as evaluation

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the evaluation ran")

    monkeypatch.setattr(evaluation, "evaluate", never)
    with pytest.raises(SystemExit) as stop:
        main(["eval", "sample:airline", "--json", str(tmp_path / "no" / "rows.json")])
    assert stop.value.code == 2
    assert "folder" in capsys.readouterr().err and not (tmp_path / "no").exists()


def test_the_samples_are_named_where_a_file_is_missing(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    with pytest.raises(SystemExit):
        main(["inspect", "../shared/traces/nothing.json"])
    assert "sample:airline" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_a_bar_on_a_terminal_once_a_second_has_passed() -> None:
    now = [0.0]
    stream = _Terminal()
    progress = Progress(4, "eval", stream=stream, clock=lambda: now[0])
    progress.advance("threshold: airline.json#0")
    assert stream.getvalue() == ""  # quick work shows nothing
    now[0] = 3.0
    progress.advance("threshold: airline.json#1")
    line = stream.getvalue()
    assert line.startswith("\reval [" + "#" * 14 + "." * 14 + "] 2/4, 3 s, about 3 s left")
    assert "airline.json#1" in line
    progress.close()
    assert stream.getvalue().endswith("\r")


def test_progress_draws_nothing_when_piped() -> None:
    now = [0.0]
    stream = io.StringIO()
    progress = Progress(2, "eval", stream=stream, clock=lambda: now[0])
    now[0] = 10.0
    progress.advance()
    progress.advance()
    progress.close()
    assert stream.getvalue() == ""


def test_eval_draws_its_progress_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextfold.cli.progress as progress_module

    terminal = _Terminal()
    monkeypatch.setattr(progress_module.sys, "stderr", terminal)
    monkeypatch.setattr(progress_module, "QUIET_SECONDS", 0.0)
    out = io.StringIO()
    assert main(["eval", "sample:airline", "--no-peers", "--policies", "truncation,threshold",
                 "--fractions", "0.5"], out=out) == 0
    drawn = terminal.getvalue()
    # 2 policies x 6 transcripts, once for the cuts and once for the call-by-call replay
    assert "] 24/24" in drawn and "threshold: airline.json#5" in drawn
    assert "\r" not in out.getvalue()  # the table stays clean
