"""Optional dependencies, imported only when a feature needs them.

Every "install the extra" error is built here, so each names the exact ``pip install``
line (``MissingExtraError``). A test fakes a missing package with
``sys.modules[name] = None``, which makes the import below fail the same way.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtraError

__all__ = ["require"]


def require(module: str, *, extra: str, feature: str, package: str | None = None) -> ModuleType:
    """Import ``module`` or raise ``MissingExtraError`` naming ``extra`` and ``feature``.

    Args:
        module: the importable name, such as ``"sqlalchemy"``.
        extra: the contextfold extra that installs it (``"postgres"``).
        feature: what needs it, for the message (``"PostgresStore"``).
        package: the distribution name when it differs from the top-level module.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        raise MissingExtraError(package or top, extra, feature) from exc
