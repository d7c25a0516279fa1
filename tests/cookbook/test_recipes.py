"""Every cookbook recipe runs offline, as written, finishes cleanly, and prints figures
that hold: each recipe's output is read back and its numbers checked against each other
(what a recipe says it did is what it did)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

COOKBOOK = Path(__file__).resolve().parents[2] / "cookbook"
RECIPES = sorted(p for p in COOKBOOK.glob("*.py") if not p.name.startswith("_"))


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _found(pattern: str, out: str) -> tuple[str, ...]:
    match = re.search(pattern, out)
    assert match, f"the recipe did not print {pattern!r}:\n{out[-1500:]}"
    return match.groups()


def _requests_within_budget(out: str) -> None:
    """'the largest of the N requests the model received held T (budget B)', after a
    history over the budget, and every page read."""
    assert "Read all 40 pages; the last was Page 39: reference RF-1039." in out
    requests, largest, budget = _found(r"the largest of the (\d+) requests the model "
                                       r"received held ([\d,]+) \(budget ([\d,]+)\)", out)
    (history,) = _found(r"\(?([\d,]+) tokens\)?; the largest", out)
    assert _number(requests) == 41  # 40 page reads and the answer
    assert _number(largest) <= _number(budget) < _number(history)


def _langchain_agent(out: str) -> None:
    _requests_within_budget(out)
    numbered = [int(n) for n in re.findall(r"^compaction (\d+): ", out, re.M)]
    assert numbered and numbered == list(range(1, len(numbered) + 1))


def _llamaindex_function_agent(out: str) -> None:
    count, budget, largest = _found(r"(\d+) compactions under a budget of ([\d,]+) input "
                                    r"tokens; the largest request after one was ([\d,]+)", out)
    lines = re.findall(r"^compaction: ([\d,]+) -> ([\d,]+) tokens, (\d+) summary", out, re.M)
    assert int(count) == len(lines) > 0  # every compaction that ran was heard
    assert max(_number(after) for _, after, _ in lines) == _number(largest) <= _number(budget)
    assert all(_number(after) < _number(before) for before, after, _ in lines)
    assert "Read 30 pages; the last was Page 29" in out


def _reading_events(out: str) -> None:
    calls, count, total, budget, largest = _found(
        r"(\d+) model calls, (\d+) compactions; the full history is ([\d,]+) tokens against a "
        r"budget of ([\d,]+) \(over budget uncompacted\); the largest request sent was "
        r"([\d,]+) tokens", out)
    assert int(count) == out.count("compaction applied:") > 0
    assert out.count("compaction started") >= int(count)
    assert _number(largest) <= _number(budget) < _number(total)
    assert int(calls) > int(count)


def _choosing_policies(out: str) -> None:
    before, budget = _found(r"history: \d+ messages, ([\d,]+) tokens; budget ([\d,]+)", out)
    rows = re.findall(r"^(.+?)\s+(\d+)\s+([\d,]+)\s+(\d+)%\s+\S+$", out, re.M)
    assert len(rows) >= 7
    for name, _, tokens, saved in rows:
        assert _number(tokens) <= _number(budget), name
        assert int(saved) == round(100 * (1 - _number(tokens) / _number(before))), name


def _llamaindex_chat_engine(out: str) -> None:
    stored, seen = _found(r"the store holds (\d+) messages; the model sees (\d+) of them", out)
    assert 0 < int(seen) < int(stored)
    assert "the oldest orders stay searchable: ['You said: Question 3" in out


def _postgres_workers(out: str) -> None:
    workers, wrote, stored = _found(r"(\d+) workers wrote (\d+) messages; (\d+) are stored", out)
    assert int(workers) == 4 and int(wrote) == int(stored) > 0


def _search_tools(out: str) -> None:
    assert "Station Kepler pays 41 credits per ton of iron ore." in out
    assert '"query": "copper", "count": 2' in out


def _swarm_agents(out: str) -> None:
    runs = {name: (int(steps), int(stored), int(context), idle) for name, steps, stored,
            context, idle in re.findall(r"^(drone-\d): (\d+) steps, (\d+) messages stored, "
                                         r"at most (\d+) in context, idle: (.+)$", out, re.M)}
    assert set(runs) == {"drone-1", "drone-2", "drone-3"}
    assert runs["drone-1"][0] == 30 and runs["drone-1"][3] == "no"
    assert all(context < stored or steps == 0 for steps, stored, context, _ in runs.values())
    assert runs["drone-3"][0] == 0 and "failed to respond" in runs["drone-3"][3]


CHECKS: dict[str, Callable[[str], None]] = {
    "choosing_policies": _choosing_policies,
    "langchain_agent": _langchain_agent,
    "langchain_chat_model": _requests_within_budget,
    "langgraph_prebuilt": _requests_within_budget,
    "llamaindex_chat_engine": _llamaindex_chat_engine,
    "llamaindex_function_agent": _llamaindex_function_agent,
    "postgres_workers": _postgres_workers,
    "reading_events": _reading_events,
    "search_tools": _search_tools,
    "swarm_agents": _swarm_agents,
}


def test_the_cookbook_has_its_recipes_and_each_has_its_checks() -> None:
    names = {p.stem for p in RECIPES}
    assert {"choosing_policies", "reading_events", "swarm_agents", "search_tools",
            "postgres_workers"} <= names
    assert names == set(CHECKS)


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_runs_and_its_figures_hold(recipe: Path, tmp_path: Path) -> None:
    env = {**os.environ, "CONTEXTFOLD_OFFLINE": "1"}
    env.pop("OPENAI_API_KEY", None)  # recipes must run offline; a key switches to real models
    done = subprocess.run([sys.executable, str(recipe)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    output = f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"{recipe.name} failed:\n{output}"
    CHECKS[recipe.stem](done.stdout)
