"""Configuration as data: the constraints of a setting are declared on its field, and one
check enforces them when the object is built, with one message form for every mistake::

    @dataclass(frozen=True)
    class Budget:
        trigger: Annotated[float, Gt(0), Le(1)] = 0.75

        def __post_init__(self) -> None:
            check_fields(self)
            # Budget(trigger=1.5): "Budget.trigger must be a number in (0, 1], got 1.5"

Plain classes check their constructor arguments with `check` and the same
annotations. Rules that tie fields together (``target <= trigger``) stay explicit code and
raise with `config_error`, in the same form.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Annotated, Any, Literal, Union

from annotated_types import Ge, Gt, Le, Lt

from .errors import ConfigurationError

__all__ = ["Ge", "Gt", "Le", "Lt", "NonBlank", "check", "check_fields", "config_error"]


class NonBlank:
    """Marks a string setting that must hold more than white space."""


_MARKS = (Ge, Gt, Le, Lt, NonBlank)


def config_error(owner: str, name: str, expected: str, value: object) -> ConfigurationError:
    """``owner.name must be <expected>, got <value>``."""
    return ConfigurationError(f"{owner}.{name} must be {expected}, got {value!r}")


def check_fields(obj: object) -> None:
    """Check every annotated field of the dataclass ``obj`` (see the module docstring)."""
    cls: Any = type(obj)
    for name, annotation in _field_hints(cls).items():
        check(cls.__name__, name, getattr(obj, name), annotation)


def check(owner: str, name: str, value: object, annotation: Any) -> None:
    """Raise [`ConfigurationError`][contextfold.cli.ConfigurationError] unless ``value`` satisfies
    ``annotation``: ``int``, ``float`` (an int is fine), ``bool``, ``str``, a ``Literal``, a class
    (an instance of it), ``X | None``, each with ``Annotated`` bounds (``Ge``, ``Gt``, ``Le``,
    ``Lt``) or ``NonBlank``. Generic types (``tuple[str, ...]``) are not checked here."""
    base, bounds = _split(annotation)
    optional = False
    if typing.get_origin(base) in (Union, types.UnionType):
        args = [a for a in typing.get_args(base) if a is not type(None)]
        optional = len(args) < len(typing.get_args(base))
        if len(args) != 1:
            return
        base, more = _split(args[0])
        bounds = bounds + more
    if value is None and optional:
        return
    if not _is(value, base):
        raise config_error(owner, name, _describe(base, bounds, optional), value)
    for bound in bounds:
        if not _within(value, bound):
            raise config_error(owner, name, _describe(base, bounds, optional), value)


@functools.cache
def _field_hints(cls: type) -> Mapping[str, Any]:
    """The annotations of the fields ``check`` knows how to check, read once per class."""
    if not is_dataclass(cls):
        return {}
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: hints[f.name] for f in fields(cls) if _checkable(hints.get(f.name))}


def _checkable(annotation: Any) -> bool:
    base, _ = _split(annotation)
    if typing.get_origin(base) in (Union, types.UnionType):
        args = [a for a in typing.get_args(base) if a is not type(None)]
        return len(args) == 1 and _checkable(args[0])
    return isinstance(base, type) or typing.get_origin(base) is Literal


def _split(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    if typing.get_origin(annotation) is Annotated:
        base, *meta = typing.get_args(annotation)
        return base, tuple(m for m in meta if isinstance(m, _MARKS) or m is NonBlank)
    return annotation, ()


def _is(value: object, base: Any) -> bool:
    if typing.get_origin(base) is Literal:
        return any(value == choice and type(value) is type(choice)
                   for choice in typing.get_args(base))
    if base is bool:
        return isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if base is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and not math.isnan(value))
    if isinstance(base, type):
        return isinstance(value, base)
    return True


def _within(value: Any, bound: Any) -> bool:
    if bound is NonBlank or isinstance(bound, NonBlank):
        return bool(str(value).strip())
    if isinstance(bound, Ge):
        return bool(value >= bound.ge)
    if isinstance(bound, Gt):
        return bool(value > bound.gt)
    if isinstance(bound, Le):
        return bool(value <= bound.le)
    return bool(value < bound.lt)


def _describe(base: Any, bounds: tuple[Any, ...], optional: bool) -> str:
    if typing.get_origin(base) is Literal:
        what = "one of " + ", ".join(repr(c) for c in typing.get_args(base))
    else:
        what = {int: "an int", float: "a number", bool: "True or False",
                str: "a string"}.get(base, f"a {getattr(base, '__name__', base)}")
        if any(b is NonBlank or isinstance(b, NonBlank) for b in bounds):
            what = "a non-blank string"
    low = next((b for b in bounds if isinstance(b, (Ge, Gt))), None)
    high = next((b for b in bounds if isinstance(b, (Le, Lt))), None)
    if low is not None and high is not None:
        left = f"[{low.ge}" if isinstance(low, Ge) else f"({low.gt}"
        right = f"{high.le}]" if isinstance(high, Le) else f"{high.lt})"
        what = f"{what} in {left}, {right}"
    elif low is not None:
        what += f" >= {low.ge}" if isinstance(low, Ge) else f" > {low.gt}"
    elif high is not None:
        what += f" <= {high.le}" if isinstance(high, Le) else f" < {high.lt}"
    return what + (" or None" if optional else "")
