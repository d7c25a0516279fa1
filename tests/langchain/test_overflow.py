"""Recognising context-overflow errors as the providers and LangChain raise them."""

from __future__ import annotations

import httpx
import openai
import pytest
from langchain_core.exceptions import ContextOverflowError, ModelInvalidRequestError
from langchain_openai.chat_models.base import _handle_openai_bad_request

from langchain_contextfold import is_context_overflow, overflow_figures

OPENAI_BODY = {
    "message": "This model's maximum context length is 128000 tokens. However, your messages "
               "resulted in 130512 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
}


def openai_error(body: dict[str, object]) -> openai.BadRequestError:
    request = httpx.Request("POST", "https://api.openai.com/v1/chat/completions")
    response = httpx.Response(400, request=request, json={"error": body})
    return openai.BadRequestError(f"Error code: 400 - {{'error': {body}}}", response=response,
                                  body=body)


class AnthropicBadRequest(Exception):
    """Shaped like ``anthropic.BadRequestError`` (the SDK is not a dependency)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.status_code = 400
        self.body = {"type": "error",
                     "error": {"type": "invalid_request_error", "message": message}}


def test_langchain_context_overflow_error() -> None:
    assert is_context_overflow(ContextOverflowError("too long"))


def test_openai_code_on_the_sdk_error() -> None:
    assert is_context_overflow(openai_error(OPENAI_BODY))
    assert overflow_figures(openai_error(OPENAI_BODY)) == (130512, 128000)


def test_openai_error_as_langchain_openai_raises_it() -> None:
    with pytest.raises(Exception) as info:
        _handle_openai_bad_request(openai_error(OPENAI_BODY))
    assert isinstance(info.value, ContextOverflowError)
    assert is_context_overflow(info.value)


def test_openai_code_alone_without_wording() -> None:
    body = {**OPENAI_BODY, "message": "Input is too large."}
    error = openai_error(body)
    assert error.code == "context_length_exceeded"
    assert is_context_overflow(error)


def test_anthropic_prompt_is_too_long() -> None:
    error = AnthropicBadRequest("prompt is too long: 208310 tokens > 200000 maximum")
    assert is_context_overflow(error)
    assert overflow_figures(error) == (208310, 200000)


def test_wrapped_errors_are_found_through_the_chain() -> None:
    try:
        try:
            raise AnthropicBadRequest("prompt is too long: 5 tokens > 4 maximum")
        except AnthropicBadRequest as inner:
            raise RuntimeError("model call failed") from inner
    except RuntimeError as outer:
        assert is_context_overflow(outer)


@pytest.mark.parametrize("error", [
    ModelInvalidRequestError("Invalid 'messages[3].tool_call_id'"),
    openai_error({"message": "Rate limit reached for requests", "type": "requests",
                  "code": "rate_limit_exceeded"}),
    ValueError("maximum retries"),
    TimeoutError(),
])
def test_other_errors_are_not_overflows(error: Exception) -> None:
    assert not is_context_overflow(error)
    assert overflow_figures(error) == (None, None)
