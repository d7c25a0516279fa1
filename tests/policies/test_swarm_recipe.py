"""The swarm recipe (cookbook/swarm_agents.py) runs and shows what it promises."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[2] / "cookbook" / "swarm_agents.py"


def test_swarm_recipe(capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("swarm_agents", RECIPE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "swarm_agents", module)  # dataclasses look it up
    spec.loader.exec_module(module)
    runs = module.main()
    one, two, three = runs["drone-1"], runs["drone-2"], runs["drone-3"]
    # the mission keeps drone-1 busy long after it left the scan window, in a tiny context
    assert one.steps == 30 and one.idle_reason is None
    assert set(one.prompts_seen) == {"broadcast"}
    # (system, mission, the one-line notice of what the slice leaves out, the latest loop)
    assert one.largest_context <= 5
    # a late joiner inherits the swarm's mission from the store
    assert two.steps == 5 and set(two.prompts_seen) == {"broadcast"}
    # no mission: three unanswered nudges, then idle and the loop stops
    assert three.steps == 0
    assert three.prompts_seen == ["nudge", "nudge", "nudge"]
    assert three.idle_reason == "failed to respond after 3 encouragements"
    assert "drone-3: 0 steps" in capsys.readouterr().out
