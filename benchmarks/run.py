"""Run contextfold's benchmarks side by side with their peers and print one table.

Usage::

    python benchmarks/run.py                 # every benchmarks/bench_*.py module
    python benchmarks/run.py --quick         # smaller sizes, fewer repeats
    python benchmarks/run.py counting        # only bench_counting.py (names are filters)

Each ``bench_<name>.py`` module in this directory exposes::

    def run(quick: bool) -> list[dict]: ...

and returns one dict ("row") per measurement, with these keys:

========  ========  ==========================================================
key       type      meaning
========  ========  ==========================================================
name      str       what was measured ("truncate 10k msgs, warm")
ours      float     contextfold's figure
peer      float?    the peer's figure, measured in the same process on the same
                    input (None when there is no peer for this row)
ratio     float?    how many times better contextfold does, so above 1 always means
                    contextfold is ahead: ``peer / ours`` for times and sizes
                    (computed when omitted), ``ours / peer`` for shares kept
unit      str       unit of ``ours`` and ``peer`` ("ms", "tokens", "%")
notes     str       the peer's name and anything needed to read the row
========  ========  ==========================================================

The runner prints one table for all modules and writes each module's rows to
``benchmarks/results/<name>.json`` (git-ignored) with the machine and versions. A module
can be run on its own (``python benchmarks/bench_counting.py``); it calls :func:`main`.
Timing helper for modules: :func:`best_of` (fastest of several runs, in ms, with the
garbage collector paused during each run as ``timeit`` does).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import platform
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
Row = dict[str, Any]


def settle() -> None:
    """Collect the garbage, then freeze what survived (``gc.freeze``): later collections
    look only at what came after. Called before each timed run, so a collection of the
    loaded encodings and frameworks (0.3-0.5 s each) is not paid again and again."""
    gc.collect()
    gc.freeze()


def best_of(
    fn: Callable[[], object], repeat: int = 5, setup: Callable[[], object] | None = None
) -> float:
    """The fastest of ``repeat`` runs of ``fn`` in milliseconds. ``setup`` runs untimed
    before each run; as in ``timeit``, the garbage collector is off while ``fn`` runs
    (after a collection), so a pause caused by earlier allocations is not charged to it.
    The objects alive then are frozen (:func:`settle`), so later collections stay cheap."""
    best = float("inf")
    for _ in range(max(1, repeat)):
        if setup is not None:
            setup()
        settle()
        gc.disable()
        try:
            started = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - started)
        finally:
            gc.enable()
    return best * 1000


def discover(filters: Sequence[str] = ()) -> dict[str, Path]:
    """``bench_*.py`` modules of this directory by short name, filtered by substring."""
    found = {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}
    if filters:
        found = {k: v for k, v in found.items() if any(f in k for f in filters)}
    return found


def load(name: str, path: Path) -> ModuleType:
    """Import a benchmark module from its file."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def normalize(rows: Sequence[Row], bench: str) -> list[Row]:
    """Rows with every key present and the ratio filled in."""
    out = []
    for row in rows:
        missing = {"name", "ours", "unit"} - row.keys()
        if missing:
            raise ValueError(f"bench_{bench}: row {row!r} lacks {sorted(missing)}")
        full = {"peer": None, "ratio": None, "notes": "", **row, "bench": bench}
        if full["ratio"] is None and full["peer"] is not None and full["ours"]:
            full["ratio"] = full["peer"] / full["ours"]
        out.append(full)
    return out


def table(rows: Sequence[Row]) -> str:
    """The rows as a fixed-width text table."""
    head = ("bench", "measurement", "ours", "peer", "ratio", "unit", "notes")
    lines = [
        (
            r["bench"],
            r["name"],
            _num(r["ours"]),
            _num(r["peer"]),
            _ratio(r["ratio"]),
            r["unit"],
            r["notes"],
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines, strict=False)]
    widths[-1] = 0  # notes: no padding
    fmt = "  ".join(f"{{:{'>' if i in (2, 3, 4) else '<'}{w}}}" for i, w in enumerate(widths))
    rule = "  ".join("-" * w for w in widths[:-1]) + "  -----"
    return "\n".join([fmt.format(*head), rule, *(fmt.format(*line) for line in lines)])


def _ratio(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.2g}x" if value < 1 else f"{value:,.1f}x"


def _num(value: float | None) -> str:
    if value is None:
        return ""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value < 1 else f"{value:.2f}"


def write(bench: str, rows: Sequence[Row], quick: bool, seconds: float) -> Path:
    """Write a module's rows to ``results/<bench>.json``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{bench}.json"
    payload = {
        "bench": bench,
        "quick": quick,
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(seconds, 2),
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "versions": _versions(),
        "rows": list(rows),
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("contextfold", "tiktoken", "langchain-core", "llama-index-core"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            continue
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected benchmark modules, print the table, write the JSON files."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="run only modules whose name contains one")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    args = parser.parse_args(argv)
    modules = discover(args.names)
    if not modules:
        print(f"no benchmark matches {args.names}", file=sys.stderr)
        return 2
    all_rows: list[Row] = []
    for bench, path in modules.items():
        print(f"running bench_{bench} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        module = load(bench, path)
        settle()  # what is loaded by now stays out of the module's collections
        rows = normalize(module.run(args.quick), bench)
        written = write(bench, rows, args.quick, time.perf_counter() - started)
        print(f"  wrote {written.relative_to(HERE.parent)}", file=sys.stderr)
        all_rows.extend(rows)
    print(table(all_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
