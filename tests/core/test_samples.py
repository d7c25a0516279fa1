"""The shipped sample transcripts: exactly what their generator writes, readable by every
tool that reads transcripts, and with the shapes and defects their README states."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import contextfold as cf
from contextfold.cli.transcripts import load_transcripts
from contextfold.errors import ConfigurationError
from contextfold.samples import SAMPLES, sample_path
from contextfold.samples._generate import sample_texts
from trace_sets import SHARED


def test_the_shipped_files_are_what_the_generator_writes() -> None:
    texts = sample_texts()
    assert sorted(texts) == sorted(f"{name}.json" for name in SAMPLES)
    for name in SAMPLES:
        shipped = sample_path(name).read_text(encoding="utf-8")
        assert shipped == texts[f"{name}.json"], (
            f"{name}.json differs from its generator: run python -m contextfold.samples")


def test_the_generator_writes_the_same_bytes_every_time() -> None:
    assert sample_texts() == sample_texts()


def test_the_check_command_agrees() -> None:
    done = subprocess.run([sys.executable, "-m", "contextfold.samples", "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_an_unknown_sample_names_the_ones_there_are() -> None:
    with pytest.raises(ConfigurationError, match="airline, coding, assistant_first"):
        sample_path("tau")


def test_the_samples_have_the_shapes_and_defects_their_readme_states(
        counter: cf.TokenCounter) -> None:
    airline = load_transcripts(sample_path("airline"))
    assert len(airline) == 6
    for number, t in enumerate(airline):
        codes = {p.code for p in cf.validate(t.messages)}
        assert codes == ({"duplicate_call_id"} if number >= 3 else set()), t.name
        conversation = json.dumps(cf.to_openai(t.messages[1:]))
        assert t.gold_values and all(v in conversation for v in t.gold_values), t.name
        assert 29 <= len(t.messages) <= 41
    coding = load_transcripts(sample_path("coding"))
    assert len(coding) == 2
    for t in coding:
        last = len(t.messages) - 1
        assert [(p.code, p.index) for p in cf.validate(t.messages)] == [("unanswered_call", last)]
        assert t.messages[last].tool_calls[0].name == "finish"
        assert max(len(m.text) for m in t.messages if m.role == "tool") > 20_000
        assert t.tools
    [greeting] = load_transcripts(sample_path("assistant_first"))
    assert greeting.messages[1].role == "assistant"
    assert [p.code for p in cf.validate(greeting.messages)] == ["assistant_before_user"]
    assert counter.count_messages(greeting.messages) > 2_000


def test_continuous_integration_also_runs_on_the_real_traces() -> None:
    """A clone runs on the samples alone; CI has ``shared/`` beside the checkout and must
    run every trace test on the real traces as well."""
    if os.environ.get("CI"):
        assert SHARED.is_dir(), f"CI must have the shared traces at {SHARED}"
