"""Budget: validation on construction, the model table, prefix matching and overrides."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextfold import Budget
from contextfold.errors import ConfigurationError
from contextfold.integration import MODEL_LIMITS, ModelLimits


def test_defaults_follow_seed_004() -> None:
    budget = Budget(context_window=100_000, output_reserve=20_000)
    assert budget.input_budget == 80_000
    assert budget.trigger_tokens == 60_000  # 75%
    assert budget.target_tokens == 40_000  # 50%


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context_window": 0}, "Budget.context_window must be an int >= 1, got 0"),
        ({"context_window": -5}, "Budget.context_window must be an int >= 1, got -5"),
        ({"context_window": 1000.0}, "Budget.context_window must be an int >= 1, got 1000.0"),
        ({"context_window": True}, "Budget.context_window must be an int >= 1, got True"),
        ({"context_window": 100, "output_reserve": -1},
         "Budget.output_reserve must be an int >= 0, got -1"),
        ({"context_window": 100, "output_reserve": 100},
         r"Budget.output_reserve must be smaller than context_window \(100\), got 100"),
        ({"context_window": 100, "trigger": 1.5},
         r"Budget.trigger must be a number in \(0, 1\], got 1.5"),
        ({"context_window": 100, "trigger": 0},
         r"Budget.trigger must be a number in \(0, 1\], got 0"),
        ({"context_window": 100, "trigger": float("nan")},
         r"Budget.trigger must be a number in \(0, 1\], got nan"),
        ({"context_window": 100, "trigger": "high"},
         r"Budget.trigger must be a number in \(0, 1\], got \'high\'"),
        ({"context_window": 100, "target": 0.8},
         r"Budget.target must be in \(0, trigger=0.75\], got 0.8"),
        ({"context_window": 100, "target": 0.0},
         r"Budget.target must be a number in \(0, 1\], got 0.0"),
        ({"context_window": 100, "target": None},
         r"Budget.target must be a number in \(0, 1\], got None"),
    ],
)
def test_invalid_budgets_say_what_is_wrong(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Budget(**kwargs)  # type: ignore[arg-type]


def test_configuration_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        Budget(context_window=10, trigger=2)


@given(
    window=st.integers(1, 10**7),
    reserve_share=st.floats(0, 1),
    trigger=st.floats(-0.5, 1.5, allow_nan=False),
    target=st.floats(-0.5, 1.5, allow_nan=False),
)
def test_target_never_exceeds_trigger(
    window: int, reserve_share: float, trigger: float, target: float
) -> None:
    reserve = int(window * reserve_share)
    try:
        budget = Budget(window, reserve, trigger=trigger, target=target)
    except ConfigurationError:
        assert not (0 < target <= trigger <= 1) or reserve >= window
        return
    assert 0 < budget.target <= budget.trigger <= 1
    assert 0 <= budget.target_tokens <= budget.trigger_tokens <= budget.input_budget
    assert budget.input_budget == window - reserve > 0


# -- the model table -----------------------------------------------------------------------

SEED_004 = [
    ("deepseek-v4-pro", 1_000_000, 967_232),
    ("claude-opus-4-6", 1_000_000, 1_000_000),
    ("claude-sonnet-4-6", 1_000_000, 1_000_000),
    ("grok-4.3", 1_000_000, 934_464),
    ("gpt-5", 400_000, 334_464),
    ("gpt-4.1", 1_000_000, 967_232),
    ("kimi-k2", 262_144, 196_608),
    ("qwen3.7-max", 1_000_000, 934_464),
]


@pytest.mark.parametrize(("model", "window", "input_budget"), SEED_004)
def test_seed_004_table(model: str, window: int, input_budget: int) -> None:
    budget = Budget.for_model(model)
    assert (budget.context_window, budget.input_budget) == (window, input_budget)
    assert budget.model == model
    assert (budget.trigger, budget.target) == (0.75, 0.50)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-2024-08-06", "gpt-4o"),  # dated snapshot
        ("openai/gpt-4o", "gpt-4o"),  # provider prefix
        ("GPT-4o", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),  # longest prefix wins
        ("gpt-4-0613", "gpt-4"),
        ("gpt-4-turbo-2024-04-09", "gpt-4-turbo"),
        ("gpt-4.1-mini", "gpt-4.1"),
        ("gpt-5-mini", "gpt-5"),
        ("o3-mini", "o3"),
        ("o1-mini", "o1-mini"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4"),
        ("anthropic/claude-3.5-sonnet", "claude-3-5-sonnet"),  # OpenRouter spelling
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("mistral-large-latest", "mistral-large"),
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1"),
        ("llama3.1:8b", "llama3.1"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5"),
        ("deepseek-chat", "deepseek-chat"),
    ],
)
def test_model_names_match_their_family(model: str, expected: str) -> None:
    limits = MODEL_LIMITS[expected]
    budget = Budget.for_model(model)
    assert (budget.context_window, budget.output_reserve) == (
        limits.context_window,
        limits.output_reserve,
    )


@pytest.mark.parametrize("model", ["gpt-40", "gpt-4oo", "o10", "claude", "my-local-model", ""])
def test_unknown_models_are_a_configuration_error(model: str) -> None:
    with pytest.raises(ConfigurationError, match="unknown model"):
        Budget.for_model(model)


def test_known_families_differ_where_they_should() -> None:
    assert Budget.for_model("gpt-4").context_window == 8_192
    assert Budget.for_model("gpt-4o").context_window == 128_000
    assert Budget.for_model("gpt-4-32k").context_window == 32_768


def test_user_table_adds_and_overrides_models() -> None:
    table = {
        "my-local-model": ModelLimits(32_768, 2_048),
        "GPT-4o": ModelLimits(64_000, 4_000),  # matched case-insensitively
    }
    assert Budget.for_model("my-local-model-q4", table=table).input_budget == 30_720
    assert Budget.for_model("gpt-4o-2024-08-06", table=table).context_window == 64_000
    assert Budget.for_model("gpt-4o").context_window == 128_000  # the table itself is intact


def test_for_model_passes_trigger_and_target_through_validation() -> None:
    budget = Budget.for_model("gpt-4o", trigger=0.9, target=0.6)
    assert budget.trigger_tokens == int(budget.input_budget * 0.9)
    with pytest.raises(ConfigurationError, match="target must be in"):
        Budget.for_model("gpt-4o", trigger=0.5, target=0.6)


def test_model_limits_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        MODEL_LIMITS["x"] = ModelLimits(1, 0)  # type: ignore[index]


def test_budget_is_frozen() -> None:
    budget = Budget(context_window=1000)
    with pytest.raises(AttributeError):
        budget.trigger = 0.9  # type: ignore[misc]
