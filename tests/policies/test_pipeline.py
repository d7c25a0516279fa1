"""Pipeline: passes run in order, each on the previous output; requests pass through."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.policy import CompactionContext, PolicyOutcome, SimplePolicy, Target
from contextfold.testing import ScriptedSummarizer, assert_valid_within, histories, run_policy

SHOT = cf.ImagePart(url="data:image/png;base64,AAAA", width=2048, height=2048)


class Recorder(SimplePolicy):
    """A pass that records what it saw and changes nothing."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[Sequence[cf.Message]] = []
        self.known: list[int | None] = []

    def apply(self, messages: Sequence[cf.Message], context: CompactionContext
              ) -> PolicyOutcome:
        self.seen.append(messages)
        self.known.append(context.known_tokens)
        return PolicyOutcome(messages=messages)


class Shout(SimplePolicy):
    """A pass that upper-cases the last message."""

    name = "shout"

    def apply(self, messages: Sequence[cf.Message], context: CompactionContext
              ) -> PolicyOutcome:
        last = messages[-1]
        out = [*messages[:-1], replace(last, content=last.text.upper())]
        target = Target(len(messages) - 1, last.role, "shouted", 1, 1)
        return PolicyOutcome(messages=out, method="shout", targets=(target,))


def screenshot_history(steps: int = 12, image: cf.ImagePart = SHOT) -> list[cf.Message]:
    history = [cf.Message(role="user", content="Fill in the form on every page.")]
    for k in range(steps):
        history += [
            cf.Message(role="assistant", content=f"step {k} " + "thinking " * 80,
                       tool_calls=(cf.ToolCall(f"s{k}", "screenshot"),)),
            cf.Message(role="tool", tool_call_id=f"s{k}", name="screenshot",
                       content=(cf.TextPart("page html " * 150), image)),
        ]
    history.append(cf.Message(role="assistant", content="Next page."))
    return history


def test_each_pass_sees_the_previous_output(counter: cf.TokenCounter) -> None:
    first, last = Recorder("first"), Recorder("last")
    history = [cf.Message(role="user", content="hello")]
    context = CompactionContext(budget=cf.Budget(context_window=1_000), counter=counter)
    result = cf.compact(history, policy=cf.Pipeline(first, Shout(), last),
                        budget=context.budget, counter=counter)
    assert first.seen[0] == history
    assert last.seen[0][-1].text == "HELLO"
    assert result.report.method == "pipeline(shout)"
    assert [t.index for t in result.report.targets] == [0]


def test_nothing_changed_gives_back_the_input(counter: cf.TokenCounter) -> None:
    history = [cf.Message(role="user", content="hello")]
    context = CompactionContext(budget=cf.Budget(context_window=1_000), counter=counter)
    outcome, requests = run_policy(cf.Pipeline(Recorder("a"), cf.ThresholdPolicy()), history,
                                   context)
    assert requests == [] and outcome.messages is history
    assert outcome.method == "none"


@pytest.mark.parametrize(("detail", "expected"), [
    ("high", "pipeline(strip_images)"),  # 12 x 765 tokens of images: stripping is enough
    ("low", "pipeline(strip_images+threshold)"),  # 12 x 85 tokens: threshold must run too
])
def test_strip_then_threshold(counter: cf.TokenCounter, detail: str, expected: str) -> None:
    history = screenshot_history(image=replace(SHOT, detail=detail))
    size = counter.count_messages(history)
    budget = cf.Budget(context_window=int(size / 0.9))
    summarizer = ScriptedSummarizer(default="TASK: fill forms\nPROGRESS: 12 pages")
    pipeline = cf.Pipeline(cf.StripImagesPass(), cf.ThresholdPolicy())
    assert pipeline.name == "pipeline(strip_images+threshold)"
    result = cf.compact(history, policy=pipeline, budget=budget, counter=counter,
                        summarizer=summarizer)
    assert_valid_within(result.messages, budget, counter)
    assert result.report.method == expected
    assert summarizer.calls == (1 if "threshold" in expected else 0)
    methods = [t.method for t in result.report.targets]
    assert methods.count("image_stripped") == 12
    for t in result.report.targets:  # indices point into the pipeline's input
        assert t.index == -1 or history[t.index].role == t.role
    truncated = [t.index for t in result.report.targets if t.method == "truncated"]
    assert all(history[i].images for i in truncated if history[i].role == "tool")


def test_known_tokens_are_lowered_by_what_earlier_passes_saved(counter: cf.TokenCounter) -> None:
    history = screenshot_history(4)
    size = counter.count_messages(history)
    after = Recorder("after")
    cf.compact(history, policy=cf.Pipeline(cf.StripImagesPass(), after),
               budget=cf.Budget(context_window=size * 4), counter=counter, known_tokens=size * 2)
    stripped = counter.count_messages(after.seen[0])
    assert stripped < size
    assert after.known[0] == size * 2 - (size - stripped)


def test_pipeline_needs_policies() -> None:
    with pytest.raises(ConfigurationError, match="at least one pass"):
        cf.Pipeline()
    with pytest.raises(ConfigurationError, match="must be policies"):
        cf.Pipeline(object())  # type: ignore[arg-type]


@given(history=histories(max_turns=8), share=st.floats(0.6, 2.0))
def test_pipeline_output_is_valid_within_budget(
    counter: cf.TokenCounter, history: list[cf.Message], share: float
) -> None:
    size = counter.count_messages(history)
    budget = cf.Budget(context_window=max(50, int(size * share)))
    pipeline = cf.Pipeline(cf.StripImagesPass(), cf.ThresholdPolicy())
    try:
        result = cf.compact(history, policy=pipeline, budget=budget, counter=counter,
                            summarizer=ScriptedSummarizer(default="TASK: t"))
    except cf.BudgetExceededError as exc:
        assert exc.needed > exc.available
        return
    assert_valid_within(result.messages, budget, counter)


class Always(Recorder):
    """A pass that must see every call, as LoopSlicePolicy and TurnAwarePolicy do."""

    always_run = True


def test_always_run_of_any_pass_makes_the_pipeline_run_every_call(
    counter: cf.TokenCounter,
) -> None:
    history = [cf.Message(role="system", content="sys"), cf.Message(role="user", content="hi")]
    first, second = Recorder("plain"), Always("always")
    assert not getattr(cf.Pipeline(first), "always_run", False)
    pipeline = cf.Pipeline(first, second)
    assert pipeline.always_run
    compactor = cf.Compactor(policy=pipeline, budget=cf.Budget(context_window=100_000),
                             counter=counter)
    for k in range(3):  # far below the trigger: only always_run makes the policy run
        history = [*history, cf.Message(role="assistant", content=f"answer {k}"),
                   cf.Message(role="user", content=f"question {k}")]
        compactor.compact(history)
    assert len(second.seen) == 3
    assert [len(seen) for seen in second.seen] == [4, 6, 8]
