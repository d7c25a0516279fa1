"""``python -m contextfold.samples``: write the sample files again, beside this module.

``--check`` writes nothing and exits 1 when a shipped file differs from what the
generator makes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ._generate import sample_texts, write_samples


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    if "--check" in argv:
        stale = [name for name, text in sample_texts().items()
                 if not (here / name).is_file()
                 or (here / name).read_text(encoding="utf-8") != text]
        for name in stale:
            print(f"{name} differs from what the generator makes", file=sys.stderr)
        return 1 if stale else 0
    for path in write_samples(here):
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


raise SystemExit(main(sys.argv[1:]))
