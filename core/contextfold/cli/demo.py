"""``contextfold demo``: an offline agent run through the LangChain adapter.

The threshold design's briefing task: read every unread e-mail of two accounts (43 long e-mails by
default) and write a briefing with every reference number. A scripted tool-calling model
plays the agent, the extractive summarizer writes the summaries, the full history goes to
a SQLite file under the data directory. It prints progress while it runs, then a per-step
table, and writes an HTML report and a JSON file of the run.

With ``--real`` and ``OPENAI_API_KEY`` set, the same loop runs against a real OpenAI model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TextIO

from .._contract.policy import Target
from .._counting.budget import Budget
from .._counting.counters import TokenCounter, counter_for_model
from .replay import Replay, StepRecord, inserted_texts

__all__ = ["DEMO_BUDGET", "run_demo"]

DEMO_BUDGET = Budget(context_window=40_000, output_reserve=4_000)
"""A small window, so the 43 e-mails (about 55k tokens) must be compacted to fit."""

TASK = ("Read all unread e-mails in both of my accounts and write a briefing that lists every "
        "reference number. Do not stop before every e-mail is read.")


class _EventCollector:
    """Collects, during one model call, contextfold's custom LangChain events and the
    messages each chat model was started with (the last start is the wrapped model's call,
    made with the compacted messages)."""

    def __init__(self) -> None:
        from langchain_core.callbacks import BaseCallbackHandler

        collector = self

        class Handler(BaseCallbackHandler):
            def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
                if name == "contextfold_compaction":
                    collector.reports.append(data)

            def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
                collector.requests.append(list(messages[0]))

        self.handler = Handler()
        self.reports: list[dict[str, Any]] = []
        self.requests: list[list[Any]] = []


def _targets(report: dict[str, Any]) -> tuple[Target, ...]:
    out = []
    for t in report.get("targets", []):
        out.append(Target(index=t.get("index", -1), role=t.get("role", ""),
                          method=t.get("method", ""), original_tokens=t.get("original_tokens", 0),
                          new_tokens=t.get("new_tokens", 0), tool_name=t.get("tool_name"),
                          handle=t.get("handle")))
    return tuple(out)


def _model(real: bool, model: str | None) -> Any:
    if not real:
        from .demo_model import ScriptedBriefingModel

        return ScriptedBriefingModel()
    if not os.environ.get("OPENAI_API_KEY"):
        raise SystemExit("--real needs OPENAI_API_KEY in the environment")
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=model or "gpt-4o-mini", temperature=0)


def _run_loop(data_dir: Path, emails: int, real: bool, model_name: str | None,
              counter: TokenCounter, out: TextIO) -> tuple[Replay, Any, list[Any]]:
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

    from langchain_contextfold import to_core, with_compaction

    from .._policies.threshold import ThresholdPolicy
    from .._summaries.extractive import ExtractiveSummarizer
    from ..stores import SQLiteStore
    from .demo_mailbox import Mailbox

    mailbox = Mailbox(emails)
    store = SQLiteStore(data_dir / "history.db")
    store.clear("briefing")
    # The extractive summarizer keeps the demo offline; with --real the model summarizes.
    summarizer = None if real else ExtractiveSummarizer()
    model = with_compaction(_model(real, model_name), policy=ThresholdPolicy(),
                            budget=DEMO_BUDGET, store=store, summarizer=summarizer)
    model = model.bind_tools(list(Mailbox.TOOLS))
    history: list[Any] = [SystemMessage("You are an e-mail assistant. Batch 10-15 tool calls "
                                        "per response."), HumanMessage(TASK)]
    run = Replay(title=f"demo: {emails}-e-mail briefing", budget=DEMO_BUDGET, policy="threshold",
                 conversation_id="briefing",
                 originals=f"the SQLite store {data_dir / 'history.db'}")
    reply = None
    for step in range(1, 4 * emails):
        events = _EventCollector()
        config = {"configurable": {"thread_id": "briefing"}, "callbacks": [events.handler]}
        reply = model.invoke(history, config=config)
        history_tokens = counter.count_messages(to_core(history))
        last = events.reports[-1] if events.reports else None
        sent = to_core(events.requests[-1]) if events.requests else to_core(history)
        sent_tokens = counter.count_messages(sent)
        compacted = last is not None and last["method"] != "none"
        record = StepRecord(
            step=step, history_messages=len(history), history_tokens=history_tokens,
            sent_messages=len(sent), sent_tokens=sent_tokens,
            compacted=compacted,
            llm_calls=sum(r.get("llm_calls", 0) for r in events.reports),
            method=last["method"] if last else "none",
            targets=_targets(last) if last else (), duration=last["duration"] if last else 0.0,
            inserted=inserted_texts(sent) if compacted else (),
            tokens_before=last["tokens_before"] if last else history_tokens,
            forced=bool(last and last["forced"]),
        )
        run.steps.append(record)
        note = f", compacted ({record.method})" if record.compacted else ""
        out.write(f"  step {step}: {len(reply.tool_calls)} tool call(s){note}\n")
        out.flush()
        history.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            history.append(ToolMessage(mailbox.call(call["name"], call["args"]),
                                       tool_call_id=call["id"], name=call["name"]))
    # The adapter stored every message the model was called with; the final answer is the
    # one message no call saw.
    store.append("briefing", to_core(history[-1:]))
    return run, mailbox, history


def run_demo(*, data_dir: Path, emails: int = 43, real: bool = False, model: str | None = None,
             out: TextIO) -> int:
    """Run the demo; returns the exit status (0 when every e-mail was read and every
    reference number made it into the briefing)."""
    from .report import text_table, write_html

    data_dir.mkdir(parents=True, exist_ok=True)
    counter = counter_for_model("gpt-4o")
    out.write(f"contextfold demo: {emails} unread e-mails, budget "
              f"{DEMO_BUDGET.input_budget:,} input tokens (trigger "
              f"{DEMO_BUDGET.trigger_tokens:,}, target {DEMO_BUDGET.target_tokens:,}), "
              f"counter {counter.name}\n")
    out.write(f"model: {model or 'gpt-4o-mini'} over the OpenAI API\n" if real else
              "model: scripted (offline, no API key; it calls the tools as an agent would), "
              "summaries by the extractive summarizer\n")
    run, mailbox, history = _run_loop(data_dir, emails, real, model, counter, out)
    final = history[-1].content if history else ""
    refs = {e.reference for e in mailbox.emails.values()}
    found = {r for r in refs if r in str(final)}
    unique_reads = len(set(mailbox.reads))
    rows = [(s.step, s.history_messages, f"{s.history_tokens:,}", s.sent_messages,
             f"{s.sent_tokens:,}", s.method if s.compacted else "", s.llm_calls)
            for s in run.steps]
    out.write("\n" + text_table(rows, ["step", "history msgs", "history tokens", "sent msgs",
                                        "sent tokens", "compaction", "llm calls"]))
    out.write(f"\nmodel calls {len(run.steps)}, compactions {run.compactions}, LLM summary calls "
              f"{sum(s.llm_calls for s in run.steps)}\n")
    out.write(f"e-mails read {unique_reads}/{emails} (re-reads: "
              f"{len(mailbox.reads) - unique_reads}); reference numbers in the briefing "
              f"{len(found)}/{len(refs)}\n")
    peak = max(s.sent_tokens for s in run.steps)
    out.write(f"peak input sent to the model {peak:,} tokens (budget "
              f"{DEMO_BUDGET.input_budget:,}); full history at the end "
              f"{run.steps[-1].history_tokens:,} tokens\n")
    report = write_html(run, data_dir / "report.html")
    (data_dir / "report.json").write_text(json.dumps(run.to_dict(), indent=2))
    out.write(f"report: {report}\nrun as JSON: {data_dir / 'report.json'}\n"
              f"full history: {data_dir / 'history.db'}\n")
    ok = unique_reads == emails and len(found) == len(refs) and peak <= DEMO_BUDGET.input_budget
    return 0 if ok or real else 1
