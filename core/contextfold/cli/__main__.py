"""``python -m contextfold.cli``: the ``contextfold`` command."""

from . import main

raise SystemExit(main())
