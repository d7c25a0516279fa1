"""JSON descriptions of a memory's parts, for ``to_dict`` / ``from_dict``.

A workflow ``Context`` stores its memory as JSON. Within one process the live parts (the
policy, summarizer, counter and store objects) are found again through a weak registry,
so a round trip keeps the very same objects. Across processes each part is rebuilt from
its description: the budget from its fields, the counter from its name, a contextfold
policy from its class and simple parameters, a file or PostgreSQL store from its
location, and an in-memory store from the history carried inline. A summarizer cannot be
described (it wraps an LLM): pass ``summarizer=`` to ``from_dict`` in a new process.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import uuid
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import contextfold as cf
import contextfold.policy as cf_policy
from contextfold.errors import ConfigurationError
from contextfold.integration import CountKeeper, message_from_dict, message_to_dict

__all__ = [
    "Parts",
    "describe_budget",
    "describe_counter",
    "describe_policy",
    "describe_store",
    "find_live",
    "open_store",
    "revive_budget",
    "revive_counter",
    "revive_policy",
    "revive_store",
]

logger = logging.getLogger("contextfold")


@dataclasses.dataclass(eq=False)
class Parts:
    """The live objects behind a memory, registered under ``key`` while they live."""

    policy: Any
    budget: cf.Budget
    counter: cf.TokenCounter
    summarizer: Any
    store: Any
    retry: Any = None
    """The summarizer's ``RetryPolicy`` (``None``: the Compactor's default)."""
    store_url: str | None = None
    """The PostgreSQL URL the store was opened with (it carries its credentials)."""
    owns_store: bool = False
    """True when the store was opened from a name, path or URL (``close`` closes it)."""
    histories: dict[str, list[cf.Message]] = dataclasses.field(default_factory=dict)
    """Each session's history as loaded from the store and appended to since: shared by
    every memory object built from these parts (a ``Context`` may rebuild its memory)."""
    keepers: dict[str, CountKeeper] = dataclasses.field(default_factory=dict)
    """Each session's token counts not yet kept in the store, shared like its history."""
    key: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        _LIVE[self.key] = self


_LIVE: weakref.WeakValueDictionary[str, Parts] = weakref.WeakValueDictionary()


def find_live(key: object) -> Parts | None:
    """The parts registered under ``key`` in this process, if they are still alive."""
    return _LIVE.get(key) if isinstance(key, str) else None


# -- stores ------------------------------------------------------------------------------


def default_sqlite_path() -> Path:
    """``$CONTEXTFOLD_DATA_DIR/history.db``, else under ``$XDG_DATA_HOME`` or
    ``~/.local/share/contextfold``."""
    base = os.environ.get("CONTEXTFOLD_DATA_DIR")
    if base:
        root = Path(base)
    else:
        xdg = os.environ.get("XDG_DATA_HOME")
        root = (Path(xdg) if xdg else Path.home() / ".local" / "share") / "contextfold"
    root.mkdir(parents=True, exist_ok=True)
    return root / "history.db"


def open_store(spec: Any) -> tuple[Any, str | None]:
    """A store from what ``from_defaults`` accepts, and the PostgreSQL URL when given.

    ``None``/``"memory"``: a ``MemoryStore``; ``"sqlite"``: the default SQLite file;
    ``"sqlite:///path"`` or a ``.db``/``.sqlite``/``.sqlite3`` path: that SQLite file;
    ``"postgresql://..."``: a ``PostgresStore``; a store object: itself.
    """
    if spec is None or spec == "memory":
        return cf.MemoryStore(), None
    if not isinstance(spec, (str, Path)):
        if not callable(getattr(spec, "append", None)) or not callable(getattr(spec, "load",
                                                                                None)):
            raise ConfigurationError(f"store must be a contextfold store, got {spec!r}")
        return spec, None
    text = str(spec)
    if text == "sqlite":
        return cf.SQLiteStore(default_sqlite_path()), None
    if text.startswith("sqlite:///"):
        return cf.SQLiteStore(text[len("sqlite:///"):]), None
    if text.startswith(("postgresql", "postgres://")):
        return cf.PostgresStore(text), text
    if text.endswith((".db", ".sqlite", ".sqlite3")) or text == ":memory:":
        return cf.SQLiteStore(text), None
    raise ConfigurationError(
        "store must be a store object, 'memory', 'sqlite', 'sqlite:///<path>', a .db path "
        f"or a postgresql:// URL, got {text!r}"
    )


def describe_store(store: Any, store_url: str | None, session_id: str) -> dict[str, Any]:
    """Where the history lives; the history itself when it lives only in this process."""
    if isinstance(store, cf.SQLiteStore) and store.path != ":memory:":
        return {"kind": "sqlite", "path": os.path.abspath(store.path)}
    if isinstance(store, cf.PostgresStore):
        return {"kind": "postgres", "url": store_url}
    return {"kind": "inline", "messages": [message_to_dict(m) for m in store.load(session_id)]}


def revive_store(spec: Mapping[str, Any], session_id: str) -> tuple[Any, str | None]:
    """The store a ``describe_store`` dict names (an inline history is appended to a new
    ``MemoryStore``)."""
    kind = spec.get("kind")
    if kind == "sqlite":
        return cf.SQLiteStore(str(spec["path"])), None
    if kind == "postgres":
        url = spec.get("url")
        if not url:
            raise ConfigurationError(
                "this memory's PostgreSQL store was given as an object, so its URL was not "
                "serialized: pass store=... to from_dict"
            )
        return cf.PostgresStore(str(url)), str(url)
    store = cf.MemoryStore()
    store.append(session_id, [message_from_dict(doc) for doc in spec.get("messages", ())])
    return store, None


# -- budget and counter ------------------------------------------------------------------


def describe_budget(budget: cf.Budget) -> dict[str, Any]:
    """The budget's fields."""
    return dataclasses.asdict(budget)


def revive_budget(data: Mapping[str, Any]) -> cf.Budget:
    """A budget from its fields."""
    return cf.Budget(**dict(data))


def describe_counter(counter: cf.TokenCounter) -> str:
    """The counter's name (``tiktoken:<encoding>`` or ``estimate:<chars per token>``)."""
    return counter.name


def revive_counter(name: object, budget: cf.Budget) -> cf.TokenCounter:
    """The counter a name describes; the budget model's counter when it is unknown."""
    if isinstance(name, str) and name.startswith("tiktoken:"):
        try:
            return cf.TiktokenCounter(name[len("tiktoken:"):])
        except ConfigurationError:
            pass
    if isinstance(name, str) and name.startswith("estimate:"):
        return cf.EstimatingCounter(float(name[len("estimate:"):]))
    return cf.counter_for_model(budget.model)


# -- policies ----------------------------------------------------------------------------


class _Opaque(Exception):
    """A value that has no JSON description."""


def describe_policy(policy: Any) -> dict[str, Any]:
    """A contextfold policy's class and parameters (``params`` is ``None`` when a parameter
    has no JSON form; the class defaults are then used on revival)."""
    cls = type(policy)
    name = cls.__name__ if _public(cls.__name__) is cls else None
    try:
        params: dict[str, Any] | None = {k: _value(v) for k, v in _params(policy).items()}
    except _Opaque:
        params = None
    return {"class": name, "params": params, "repr": repr(policy)[:200]}


def revive_policy(data: Mapping[str, Any]) -> Any:
    """The policy a ``describe_policy`` dict names (``ThresholdPolicy()`` with a warning
    when it cannot be rebuilt)."""
    cls = _public(str(data.get("class"))) if data.get("class") else None
    params = data.get("params")
    if cls is not None and isinstance(params, dict):
        try:
            return cls(**{k: _revive(v) for k, v in params.items()})
        except (TypeError, ValueError) as exc:
            logger.warning("contextfold: could not rebuild %s (%s)", data.get("repr"), exc)
    elif cls is not None:
        logger.warning("contextfold: %s rebuilt with its defaults (its parameters have no "
                       "JSON form); pass policy= to from_dict", data.get("repr"))
        return cls()
    logger.warning("contextfold: policy %s cannot be rebuilt; using ThresholdPolicy(); pass "
                   "policy= to from_dict", data.get("repr"))
    return cf.ThresholdPolicy()


def _params(obj: Any) -> dict[str, Any]:
    """Constructor parameters of ``obj``: dataclass init fields, else the attributes named
    like ``__init__``'s parameters."""
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    names = [p for p in inspect.signature(type(obj)).parameters if p not in ("self",)]
    missing = [n for n in names if not hasattr(obj, n)]
    if missing:
        raise _Opaque(f"no attribute for parameter(s) {missing}")
    return {n: getattr(obj, n) for n in names}


def _public(name: str) -> Any:
    """The public contextfold class of that name (policies at the root, their parameter
    classes such as ``HeadTail`` and ``NudgeConfig`` in ``contextfold.policy``), or ``None``."""
    for module in (cf, cf_policy):
        value = getattr(module, name, None)
        if isinstance(value, type):
            return value
    return None


def _value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [_value(v) for v in value]}
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _value(v) for k, v in value.items()}}
    cls = type(value)
    if _public(cls.__name__) is cls:
        return {"__class__": cls.__name__, "params": {k: _value(v)
                                                      for k, v in _params(value).items()}}
    raise _Opaque(f"{cls.__name__} has no JSON description")


def _revive(value: Any) -> Any:
    if isinstance(value, list):
        return [_revive(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tuple__" in value:
        return tuple(_revive(v) for v in value["__tuple__"])
    if "__dict__" in value:
        return {k: _revive(v) for k, v in value["__dict__"].items()}
    cls = _public(str(value.get("__class__")))
    if cls is None:
        raise _Opaque(f"{value.get('__class__')} is not a public contextfold class")
    return cls(**{k: _revive(v) for k, v in value["params"].items()})
