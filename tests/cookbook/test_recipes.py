"""Every cookbook recipe runs offline, as written, and finishes cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

COOKBOOK = Path(__file__).resolve().parents[2] / "cookbook"
RECIPES = sorted(p for p in COOKBOOK.glob("*.py") if not p.name.startswith("_"))


def test_the_cookbook_has_its_recipes() -> None:
    names = {p.stem for p in RECIPES}
    assert {"choosing_policies", "reading_events", "swarm_agents", "search_tools",
            "postgres_workers"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_runs(recipe: Path, tmp_path: Path) -> None:
    env = {**os.environ, "CONTEXTFOLD_OFFLINE": "1"}
    env.pop("OPENAI_API_KEY", None)  # recipes must run offline; a key switches to real models
    done = subprocess.run([sys.executable, str(recipe)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    output = f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"{recipe.name} failed:\n{output}"
    assert done.stdout.strip(), f"{recipe.name} printed nothing"
