"""Configuration as data: every setting's constraint is declared on its field, and every
configuration class refuses a value outside it, with a message naming the class and field."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from annotated_types import Ge, Gt, Le, Lt
from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.policy import HeadTail, LearnedImportance, NudgeConfig
from contextfold.stores import ReferenceCache

REQUIRED: dict[type, dict[str, Any]] = {cf.Budget: {"context_window": 10_000}}
CLASSES = [cf.Budget, cf.ThresholdPolicy, cf.TieredPolicy, HeadTail, NudgeConfig,
           cf.ClearToolResultsPass, cf.DedupeSupersededPass, cf.RetryPolicy,
           LearnedImportance, cf.StripImagesPass]


def bounded_fields(cls: type) -> list[tuple[str, type, list[Any]]]:
    """(field, number type, its bounds) for every field with numeric bounds."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        annotation = hints[f.name]
        if typing.get_origin(annotation) in (typing.Union, type(int | None)):
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        if typing.get_origin(annotation) is not typing.Annotated:
            continue
        base, *meta = typing.get_args(annotation)
        bounds = [m for m in meta if isinstance(m, (Ge, Gt, Le, Lt))]
        if bounds and base in (int, float):
            out.append((f.name, base, bounds))
    return out


def outside(bound: Any, offset: float, base: type) -> Any:
    """A value just past ``bound`` (by ``offset``, or by one for ints; an exclusive bound
    itself is outside too)."""
    step = 1 if base is int else offset
    if isinstance(bound, Ge):
        return bound.ge - step
    if isinstance(bound, Gt):
        return bound.gt - (step - 1 if base is int else step)
    if isinstance(bound, Le):
        return bound.le + step
    return bound.lt + (step - 1 if base is int else step)


CASES = [(cls, name, base, bound) for cls in CLASSES
         for name, base, bounds in bounded_fields(cls) for bound in bounds]


def test_every_configuration_class_declares_its_bounds() -> None:
    assert {cls for cls, *_ in CASES} == set(CLASSES) - {cf.StripImagesPass}
    assert len(CASES) >= 30


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_defaults_are_accepted(cls: type) -> None:
    cls(**REQUIRED.get(cls, {}))


@pytest.mark.parametrize(("cls", "name", "base", "bound"), CASES,
                         ids=[f"{c.__name__}.{n}-{type(b).__name__}" for c, n, _, b in CASES])
@given(offset=st.floats(min_value=1e-6, max_value=1e6, allow_nan=False))
def test_a_value_outside_a_bound_is_refused_by_name(
    cls: type, name: str, base: type, bound: Any, offset: float
) -> None:
    value = outside(bound, offset, base)
    with pytest.raises(ConfigurationError, match=rf"^{cls.__name__}\.{name} must be "):
        cls(**{**REQUIRED.get(cls, {}), name: value})


@pytest.mark.parametrize(("cls", "name", "base", "bound"), CASES,
                         ids=[f"{c.__name__}.{n}-{type(b).__name__}" for c, n, _, b in CASES])
@pytest.mark.parametrize("wrong", ["3", True, float("nan"), [1]])  # a bool is no number
def test_a_value_of_the_wrong_type_is_refused(
    cls: type, name: str, base: type, bound: Any, wrong: Any
) -> None:
    with pytest.raises(ConfigurationError, match=rf"^{cls.__name__}\.{name} must be "):
        cls(**{**REQUIRED.get(cls, {}), name: wrong})


def test_constructor_arguments_of_plain_classes_use_the_same_form() -> None:
    with pytest.raises(ConfigurationError, match=r"^ReferenceCache\.capacity must be an int "
                                                 r">= 1, got 0$"):
        ReferenceCache(0)
    with pytest.raises(ConfigurationError, match=r"^LoopSlicePolicy\.selection must be one of "
                                                 r"'recency', 'priority', got 'newest'$"):
        cf.LoopSlicePolicy(selection="newest")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^Budget\.target must be in \(0, "
                                                 r"trigger=0\.5\], got 0\.6$"):
        cf.Budget(context_window=100, trigger=0.5, target=0.6)
