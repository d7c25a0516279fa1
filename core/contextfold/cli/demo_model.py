"""The demo's scripted tool-calling chat model (LangChain).

It acts only on what it can *see*: it learns the accounts and e-mail ids from the visible
context (tool results, or a compaction summary's DATA), counts an e-mail as read when it
sees its own ``read_email`` call, reads unread ones in batches of 15 (the threshold design's
batching instruction) and finally writes a briefing with every reference number it can see. When
compaction loses track of something, the demo shows it: re-reads, or missing references.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

__all__ = ["ScriptedBriefingModel"]

_ACCOUNT = re.compile(r"[\w.+-]+@example\.com")
_EMAIL_ID = re.compile(r"\bEM-\d{3}\b")
_REFERENCE = re.compile(r"\b[A-Z]{2}-\d{4}\b")
BATCH = 15


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(
        part.get("text", "") if isinstance(part, dict) else str(part) for part in content
    )


def _calls(messages: Sequence[BaseMessage], name: str, key: str) -> set[str]:
    seen: set[str] = set()
    for m in messages:
        if isinstance(m, AIMessage):
            for call in m.tool_calls:
                if call["name"] == name and key in call["args"]:
                    seen.add(str(call["args"][key]))
    return seen


class ScriptedBriefingModel(BaseChatModel):
    """A deterministic agent model for the e-mail briefing demo."""

    calls: int = 0
    """Model calls so far."""

    @property
    def _llm_type(self) -> str:
        return "contextfold-scripted-briefing"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedBriefingModel:  # type: ignore[override]
        """Tools are known to the script; binding returns the model itself."""
        return self

    def _decide(self, messages: Sequence[BaseMessage]) -> AIMessage:
        visible = "\n".join(_text(m) for m in messages if not isinstance(m, AIMessage))
        visible += "\n" + "\n".join(json.dumps(m.tool_calls) for m in messages
                                    if isinstance(m, AIMessage))
        step = self.calls
        accounts = sorted(set(_ACCOUNT.findall(visible)))
        if not accounts:
            return self._call(step, [("list_accounts", {})])
        searched = _calls(messages, "search_unread", "account")
        results_seen = any(isinstance(m, ToolMessage) and '"emails"' in _text(m) for m in messages)
        ids = sorted(set(_EMAIL_ID.findall(visible)))
        if not ids and not results_seen:
            todo = [a for a in accounts if a not in searched] or accounts
            return self._call(step, [("search_unread", {"account": a}) for a in todo])
        read = _calls(messages, "read_email", "email_id")
        unread = [i for i in ids if i not in read]
        if unread:
            return self._call(step, [("read_email", {"email_id": i}) for i in unread[:BATCH]])
        references = sorted(set(_REFERENCE.findall(visible)))
        lines = [f"Briefing: {len(ids)} unread e-mails read across {len(accounts)} accounts.",
                 "Reference numbers: " + ", ".join(references)]
        return AIMessage(content="\n".join(lines))

    @staticmethod
    def _call(step: int, calls: list[tuple[str, dict[str, Any]]]) -> AIMessage:
        return AIMessage(
            content="",
            tool_calls=[
                {"id": f"call_{step}_{k}", "name": name, "args": args, "type": "tool_call"}
                for k, (name, args) in enumerate(calls)
            ],
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls += 1
        message = self._decide(messages)
        return ChatResult(generations=[ChatGeneration(message=message)])
