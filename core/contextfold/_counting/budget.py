"""Token budgets: how much input a model takes and when compaction starts and stops."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated

from .._config import Ge, Gt, Le, check_fields, config_error
from ..errors import ConfigurationError

__all__ = ["MODEL_LIMITS", "Budget", "ModelLimits"]


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """A model's context window and the output it should have room for."""

    context_window: int
    """Tokens the model accepts, input and output together."""
    output_reserve: int
    """Tokens kept free for the reply (0 where the provider counts output separately)."""


# Prefixes matched longest first. The threshold design's table, plus the OpenAI, Anthropic, Google,
# Mistral, Llama and Qwen families as their providers publish them.
MODEL_LIMITS: Mapping[str, ModelLimits] = MappingProxyType(
    {
        # the threshold design
        "deepseek-v4-pro": ModelLimits(1_000_000, 32_768),
        "claude-opus-4-6": ModelLimits(1_000_000, 0),
        "claude-sonnet-4-6": ModelLimits(1_000_000, 0),
        "grok-4.3": ModelLimits(1_000_000, 65_536),
        "gpt-5": ModelLimits(400_000, 65_536),
        "gpt-4.1": ModelLimits(1_000_000, 32_768),
        "kimi-k2": ModelLimits(262_144, 65_536),
        "qwen3.7-max": ModelLimits(1_000_000, 65_536),
        # OpenAI
        "gpt-4o": ModelLimits(128_000, 16_384),
        "gpt-4o-mini": ModelLimits(128_000, 16_384),
        "chatgpt-4o": ModelLimits(128_000, 16_384),
        "gpt-4.5": ModelLimits(128_000, 16_384),
        "gpt-4-turbo": ModelLimits(128_000, 4_096),
        "gpt-4-0125-preview": ModelLimits(128_000, 4_096),
        "gpt-4-1106-preview": ModelLimits(128_000, 4_096),
        "gpt-4-32k": ModelLimits(32_768, 4_096),
        "gpt-4": ModelLimits(8_192, 4_096),
        "gpt-3.5-turbo": ModelLimits(16_385, 4_096),
        "o1": ModelLimits(200_000, 100_000),
        "o1-mini": ModelLimits(128_000, 65_536),
        "o3": ModelLimits(200_000, 100_000),
        "o4-mini": ModelLimits(200_000, 100_000),
        # Anthropic
        "claude-opus-4": ModelLimits(200_000, 32_000),
        "claude-sonnet-4": ModelLimits(200_000, 64_000),
        "claude-3-7-sonnet": ModelLimits(200_000, 64_000),
        "claude-3-5-sonnet": ModelLimits(200_000, 8_192),
        "claude-3-5-haiku": ModelLimits(200_000, 8_192),
        "claude-haiku-4-5": ModelLimits(200_000, 64_000),
        "claude-3-opus": ModelLimits(200_000, 4_096),
        "claude-3-haiku": ModelLimits(200_000, 4_096),
        # Google
        "gemini-2.5-pro": ModelLimits(1_048_576, 65_536),
        "gemini-2.5-flash": ModelLimits(1_048_576, 65_536),
        "gemini-2.0-flash": ModelLimits(1_048_576, 8_192),
        "gemini-1.5-pro": ModelLimits(2_097_152, 8_192),
        "gemini-1.5-flash": ModelLimits(1_048_576, 8_192),
        # Mistral
        "mistral-large": ModelLimits(131_072, 8_192),
        "mistral-small": ModelLimits(131_072, 8_192),
        "codestral": ModelLimits(262_144, 8_192),
        # Meta Llama
        "llama-3.1": ModelLimits(131_072, 4_096),
        "llama-3.3": ModelLimits(131_072, 4_096),
        "llama-3.2": ModelLimits(131_072, 4_096),
        "llama-4": ModelLimits(1_000_000, 8_192),
        "llama3.1": ModelLimits(131_072, 4_096),  # Ollama's spelling
        "llama3.2": ModelLimits(131_072, 4_096),
        "llama3.3": ModelLimits(131_072, 4_096),
        # DeepSeek API
        "deepseek-chat": ModelLimits(128_000, 8_192),
        "deepseek-reasoner": ModelLimits(128_000, 65_536),
        # Qwen
        "qwen2.5": ModelLimits(131_072, 8_192),
        "qwen3": ModelLimits(131_072, 8_192),
    }
)


def _normal(name: str) -> str:
    """The lookup key of a model name: lower case, no provider prefix ("openai/gpt-4o"),
    and Anthropic's version dots as dashes (OpenRouter's "claude-3.5-sonnet")."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    return key.replace(".", "-") if key.startswith("claude") else key


def _lookup(name: str, table: Mapping[str, ModelLimits]) -> ModelLimits | None:
    key = _normal(name)
    # Longest prefix first: "gpt-4o-2024-08-06" matches "gpt-4o"; "gpt-4o" never "gpt-4".
    for prefix in sorted(table, key=len, reverse=True):
        if key == prefix or (key.startswith(prefix) and not key[len(prefix)].isalnum()):
            return table[prefix]
    return None


@dataclass(frozen=True, slots=True)
class Budget:
    """How many tokens the model's input may take, and when compaction runs.

    ``input_budget = context_window - output_reserve``. Compaction triggers when the input
    passes ``trigger`` of that budget and shrinks it to ``target`` (the threshold design: 75% and
    50%). With an LLM summarizer, the next compaction is prepared in the background once
    the input passes ``prepare`` (60%), so the call that crosses the trigger does not wait
    for a summary.
    """

    context_window: Annotated[int, Ge(1)]
    """Tokens the model accepts, input and output together."""
    output_reserve: Annotated[int, Ge(0)] = 0
    """Tokens kept free for the reply."""
    trigger: Annotated[float, Gt(0), Le(1)] = 0.75
    """Fraction of the input budget at which compaction starts, in (0, 1]."""
    target: Annotated[float, Gt(0), Le(1)] = 0.50
    """Fraction of the input budget compaction shrinks to, in (0, trigger]."""
    model: str | None = None
    """The model this budget was made for, when known; used to pick a token counter."""
    prepare: Annotated[float, Gt(0), Le(1)] | None = 0.6
    """Fraction of the input budget past which the next compaction is prepared in the
    background (an LLM summarizer only); ``None``, or a value at or above ``trigger``,
    prepares nothing."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.output_reserve >= self.context_window:
            raise config_error("Budget", "output_reserve",
                               f"smaller than context_window ({self.context_window})",
                               self.output_reserve)
        if self.target > self.trigger:
            raise config_error("Budget", "target", f"in (0, trigger={self.trigger}]",
                               self.target)

    @property
    def input_budget(self) -> int:
        """Tokens the input may take: the hard limit every policy output must fit."""
        return self.context_window - self.output_reserve

    @property
    def trigger_tokens(self) -> int:
        """Input tokens above which threshold compaction starts."""
        return int(self.input_budget * self.trigger)

    @property
    def target_tokens(self) -> int:
        """Input tokens compaction aims for."""
        return int(self.input_budget * self.target)

    @property
    def prepare_tokens(self) -> int | None:
        """Input tokens past which the next compaction is prepared ahead of time; ``None``
        when nothing is prepared."""
        if self.prepare is None or self.prepare >= self.trigger:
            return None
        return int(self.input_budget * self.prepare)

    @classmethod
    def for_model(
        cls,
        model: str,
        *,
        trigger: float = 0.75,
        target: float = 0.50,
        prepare: float | None = 0.6,
        table: Mapping[str, ModelLimits] | None = None,
    ) -> Budget:
        """The budget of a known model (``MODEL_LIMITS``; ``table`` entries override it).

        Raises:
            ConfigurationError: the model is in neither table.
        """
        merged = {_normal(k): v for k, v in {**MODEL_LIMITS, **(table or {})}.items()}
        limits = _lookup(model, merged)
        if limits is None:
            raise ConfigurationError(
                f"unknown model {model!r}: pass table={{...: ModelLimits(...)}} or build "
                "Budget(context_window=..., output_reserve=...) yourself"
            )
        return cls(
            context_window=limits.context_window,
            output_reserve=limits.output_reserve,
            trigger=trigger,
            target=target,
            model=model,
            prepare=prepare,
        )
