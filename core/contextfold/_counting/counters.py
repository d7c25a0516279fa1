"""Token counting: one protocol, an exact tiktoken counter and an estimating one.

Per-message overhead follows OpenAI's published recipe for chat models: 3 tokens per
message, 1 more when a ``name`` is set, and 3 to prime the reply. Tool calls count their
name and JSON arguments; images count by OpenAI's tile formula when their size is known.

Counts are cached on each (immutable) message per counter, and each counter remembers
running sums of the last sequences it counted: recounting an unchanged long history, or
one that only grew at the end, is an identity check of the known prefix plus the count
of the new messages.

Bounds that decide without tokenizing are `contextfold._counting.bounds`.
"""

from __future__ import annotations

import json
import logging
import math
import operator
import os
import re
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import accumulate, compress
from itertools import count as count_from
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .._messages.model import ImagePart, Message, OpaquePart, TextPart
from ..errors import ConfigurationError
from .encodings import load_encoding

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "APPROXIMATIONS",
    "FAMILY_PREFIXES",
    "IMAGE_FLAT_TOKENS",
    "TOKENIZERS",
    "TOOL_USE_PROMPTS",
    "ApproximateCounter",
    "EstimatingCounter",
    "TiktokenCounter",
    "TokenCounter",
    "counter_for_model",
    "encoding_for_model",
]

logger = logging.getLogger("contextfold")

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
TOKENS_PER_TOOL_CALL = 7  # wrapper tokens around each call's name and arguments
_LABELS_KEPT = 4096  # distinct roles/names/tool names whose counts a counter remembers
IMAGE_FLAT_TOKENS = 765
"""Tokens charged for an image whose size is unknown: a 1024x1024 image at high detail."""

_ENCODING_BY_PREFIX: tuple[tuple[str, str], ...] = (
    ("gpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("text-embedding", "cl100k_base"),
)


def encoding_for_model(model: str) -> str | None:
    """The tiktoken encoding of an OpenAI model, or ``None`` for other providers' models."""
    key = model.lower().rsplit("/", 1)[-1]
    for prefix, encoding in _ENCODING_BY_PREFIX:
        if key == prefix or (key.startswith(prefix) and not key[len(prefix)].isalnum()):
            return encoding
    return None


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text, messages and tool definitions."""

    name: str
    """Identifies the counter; message counts are cached per name."""

    def count_text(self, text: str) -> int:
        """Tokens of plain text."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens of one message, overhead included."""
        ...

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Tokens of a request's messages, reply priming included."""
        ...

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of tool definitions (OpenAI ``tools`` entries or JSON schemas)."""
        ...


def image_tokens(part: ImagePart) -> int:
    """OpenAI's tile formula: 85 base + 170 per 512px tile after scaling; 85 at low detail."""
    if part.detail == "low":
        return 85
    if not part.width or not part.height:
        return IMAGE_FLAT_TOKENS
    w, h = float(part.width), float(part.height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return 85 + 170 * tiles


def content_texts(message: Message) -> tuple[list[str], int]:
    """What a message holds besides its labels (role, name, tool names): the texts a
    counter counts (text parts, opaque parts as JSON, reasoning, call arguments, the
    result's call id) and the tokens of its images by the tile formula."""
    images = 0
    if isinstance(message.content, str):
        texts = [message.content]
    else:
        texts = []
        for part in message.content:
            if isinstance(part, TextPart):
                texts.append(part.text)
            elif isinstance(part, ImagePart):
                images += image_tokens(part)
            elif isinstance(part, OpaquePart):
                texts.append(json.dumps(dict(part.data), default=str))
    if message.reasoning:
        texts.append(message.reasoning)
    texts.extend(call.arguments for call in message.tool_calls)
    if message.tool_call_id:
        texts.append(message.tool_call_id)
    return texts, images


class _BaseCounter:
    """Shared message arithmetic; subclasses implement ``count_text``."""

    name: str = "base"
    additive: bool = True
    """``count_messages`` is the reply priming plus the sum of ``count_message``: a policy
    may add message counts instead of counting a list (a subclass that counts a request
    otherwise says ``False``)."""

    def count_text(self, text: str) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _count_label(self, text: str) -> int:
        """``count_text`` of a short, often repeated string (role, name, tool name)."""
        labels: dict[str, int] | None = self.__dict__.get("_labels")
        if labels is None:
            labels = self.__dict__["_labels"] = {}
        n = labels.get(text)
        if n is None:
            n = self.count_text(text)
            if len(labels) < _LABELS_KEPT:
                labels[text] = n
        return n

    def _count_uncached(self, message: Message) -> int:
        return self._count_with(message, self.count_text)

    def _count_with(self, message: Message, text: Callable[[str], int]) -> int:
        """The message arithmetic with ``text`` counting each content text (the exact
        ``count_text``, or a bound of it)."""
        texts, images = content_texts(message)
        n = TOKENS_PER_MESSAGE + self._count_label(message.role) + images
        n += sum(map(text, texts))
        if message.name:
            n += TOKENS_PER_NAME + self._count_label(message.name)
        for call in message.tool_calls:
            n += TOKENS_PER_TOOL_CALL + self._count_label(call.name)
        return n

    def count_message(self, message: Message) -> int:
        """Tokens of one message, overhead included; cached on the message per counter."""
        return message.derived("tokens:" + self.name, self._count_uncached)

    def count_each(self, messages: Sequence[Message]) -> list[int]:
        """`count_message` of each message. The messages no count is cached on yet
        are counted together, on parallel threads when a counter can (see
        `TiktokenCounter._count_uncounted`), and their counts cached as one by one."""
        key = "tokens:" + self.name
        fresh = [m for m in messages if not m.has_derived(key)]
        if fresh:
            self._count_uncounted(fresh)
        count = self.count_message
        return [count(m) for m in messages]

    def _count_uncounted(self, messages: list[Message]) -> None:
        """Count and cache ``messages`` (none counted yet) together, for a counter that can
        do it faster than one by one; here nothing is done, and `count_message`
        counts each (a counter that caches no count, as an endpoint's fallback, is then
        never asked twice)."""

    def _text_bound(self) -> Callable[[str], int] | None:
        """A cheap upper bound of `count_text`, or ``None`` when none is known (the
        counter is then asked for the count itself)."""
        return None

    def count_messages(self, messages: Sequence[Message]) -> int:
        """Tokens of a request: each message (cached) plus the reply priming.

        Recounting a sequence that starts with the same message objects as one counted
        recently costs an identity check of that prefix plus the count of the rest.
        """
        seq = messages if isinstance(messages, (list, tuple)) else list(messages)
        if not seq:
            return REPLY_PRIMING
        return REPLY_PRIMING + self._memo().total(seq, self.count_message, self.count_each)

    def running_totals(self, messages: Sequence[Message]) -> list[int]:
        """``len(messages) + 1`` running sums: element ``i`` is the tokens of ``messages[:i]``
        without the reply priming. Shares the prefix memo with `count_messages`, so
        right after counting a history this costs a copy of its sums."""
        seq = messages if isinstance(messages, (list, tuple)) else list(messages)
        if not seq:
            return [0]
        return self._memo().totals(seq, self.count_message, self.count_each)[: len(seq) + 1]

    def _memo(self) -> _PrefixMemo:
        memo: _PrefixMemo | None = self.__dict__.get("_prefix_memo")
        if memo is None:
            memo = self.__dict__["_prefix_memo"] = _PrefixMemo()
        return memo

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of tool definitions: the JSON text of each plus 12. An upper estimate:
        OpenAI renders definitions more compactly (its cookbook's ``num_tokens_for_tools``
        gives fewer tokens), so a budget that holds this count holds the real one."""
        if not tools:
            return 0
        return sum(self.count_text(json.dumps(t, sort_keys=True, default=str)) for t in tools) + 12


_Entry = tuple[tuple[Message, ...], list[int]]


_EMPTY_ENTRY: _Entry = ((), [0])


class _PrefixMemo:
    """Running token sums of the last few sequences a counter counted.

    A later sequence that starts with the same message *objects* (checked with ``is``, so
    an equal-looking but different message never matches) reuses the sum of that prefix
    and counts only what follows. Entries hold strong references to their messages, which
    makes the identity check sound (an id cannot be reused while the object is alive) and
    keeps the last ``SLOTS`` counted histories in memory.
    """

    SLOTS = 4

    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        self._lock = threading.Lock()

    def total(self, seq: Sequence[Message], count: Callable[[Message], int],
              count_each: Callable[[Sequence[Message]], list[int]] | None = None) -> int:
        """The summed counts of ``seq`` (non-empty), reusing and updating the memo."""
        return self.totals(seq, count, count_each)[len(seq)]

    def totals(self, seq: Sequence[Message], count: Callable[[Message], int],
               count_each: Callable[[Sequence[Message]], list[int]] | None = None) -> list[int]:
        """Running sums whose element ``i`` is the count of ``seq[:i]`` (``seq`` non-empty).
        What the memo does not know is counted with ``count_each`` when given (all of it at
        once: in parallel where the counter can), else with ``count`` one by one.

        The list is the memo's own and may run past ``len(seq) + 1``: read, never modify.
        """
        with self._lock:
            candidates = [e for e in self._entries if e[0][0] is seq[0]]
        best: _Entry = _EMPTY_ENTRY
        k = 0
        for entry in candidates:  # most recent first
            shared = _shared_prefix(entry[0], seq)
            if shared > k:
                best, k = entry, shared
            if shared == len(seq) or shared == len(entry[0]):
                break
        prev, cum = best
        if k == len(seq):
            self._remember(best, best)
            return cum  # the same sequence, or a prefix of a longer one we keep
        rest = count_each(seq[k:]) if count_each is not None and len(seq) - k > 1 else \
            list(map(count, seq[k:]))
        more = list(accumulate(rest[1:], initial=cum[k] + rest[0]))
        extends = k == len(prev)
        with self._lock:
            # A sequence that extends the old one takes over its sums (appending keeps
            # every value a reader holds valid), unless another extension got there first;
            # one that diverges gets a copy and is kept beside.
            if extends and best is not _EMPTY_ENTRY and len(cum) == k + 1:
                cum.extend(more)
                new_cum = cum
            else:
                new_cum = cum[: k + 1] + more
        self._remember((tuple(seq), new_cum), best if extends else None)
        return new_cum

    def _remember(self, entry: _Entry, replaces: _Entry | None) -> None:
        with self._lock:
            rest = [e for e in self._entries if e is not replaces and e is not entry]
            self._entries = [entry, *rest][: self.SLOTS]


def _shared_prefix(prev: Sequence[Message], seq: Sequence[Message]) -> int:
    """How many leading elements of ``prev`` and ``seq`` are the same objects."""
    return next(compress(count_from(), map(operator.is_not, prev, seq)), min(len(prev), len(seq)))


_PARALLEL_CHARS = 1_000_000
_WORKERS = max(1, min(8, os.cpu_count() or 1))
# A space after a non-space and before an ASCII letter: in every tiktoken encoding's
# pre-tokenization the space starts the next word's piece (" bar") and no piece spans it,
# so the counts of a text cut there add up to the count of the whole.
_SAFE_CUT = re.compile(r"(?<=\S) (?=[A-Za-z])")
_PARALLEL_BATCH_CHARS = 200_000
"""Characters of uncounted messages from which counting them together uses the threads:
below it, handing the work over costs more than the second core saves."""
_TEXTS_KEPT_CHARS = 32_000_000
"""Characters of counted texts a tiktoken counter remembers the counts of (the memory
they take is mostly the messages' own: a key is the message's string itself)."""
_TEXT_KEPT_MAX = 1_000_000
"""Texts this long or longer are counted in pieces on the threads and not remembered."""
_POOL_NAME = "contextfold-count"
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _char_size(message: Message) -> int:
    """About how much text a message gives a counter to encode (to share the work out)."""
    content = message.content
    if content.__class__ is str and not message.tool_calls:
        return len(content) + 16  # type: ignore[arg-type]
    return message.char_count + 16


def _pieces(text: str, size: int) -> list[str]:
    """``text`` cut at safe places about every ``size`` characters (whole when it has none)."""
    pieces, start = [], 0
    while len(text) - start > size:
        cut = _SAFE_CUT.search(text, start + size)
        if cut is None:
            break
        pieces.append(text[start:cut.start()])
        start = cut.start()
    pieces.append(text[start:])
    return pieces


def _count_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix=_POOL_NAME)
        return _pool


class TiktokenCounter(_BaseCounter):
    """Exact counts with a tiktoken encoding (``o200k_base``, ``cl100k_base``...).

    Raises:
        ConfigurationError: the encoding cannot be loaded from any local copy or download.
            ``counter_for_model`` falls back to the estimator instead of raising.
    """

    def __init__(self, encoding: str | tiktoken.Encoding = "o200k_base") -> None:
        if isinstance(encoding, str):
            loaded = load_encoding(encoding)
            if loaded is None:
                raise ConfigurationError(
                    f"tiktoken encoding {encoding!r} could not be loaded (no local copy, "
                    "download failed or disabled); use EstimatingCounter or counter_for_model"
                )
            encoding = loaded
        self.encoding = encoding
        self.name = f"tiktoken:{encoding.name}"

    def count_text(self, text: str) -> int:
        """Exact tokens of ``text``; special-token strings count as ordinary text.

        A text of a million characters or more (a dumped log, a whole file) is cut where no
        token can span the cut and the pieces are counted on parallel threads (tiktoken
        releases the GIL): the same count in about half the time on two cores. Many short
        texts are not worth it: handing the GIL back and forth costs more than it saves.
        """
        if not text:
            return 0
        if len(text) < _PARALLEL_CHARS or _WORKERS == 1:
            return self._scaled(self._tokens(text))
        pieces = _pieces(text, len(text) // _WORKERS + 1)
        return self._scaled(sum(_count_pool().map(self._tokens, pieces)))

    def _count_uncounted(self, messages: list[Message]) -> None:
        """Count and cache ``messages`` (none counted yet). Many of them together (a
        history nobody counted: a resumed thread, a first call) are cut into one run of
        messages per worker and counted on parallel threads: tiktoken releases the GIL
        while it encodes, so the threads' Python work overlaps the others' encoding. The
        counts are the ones `count_message` gives, cached on each message the same
        way; a subclass that counts otherwise is counted one by one."""
        cls = type(self)
        if (_WORKERS == 1 or cls.count_text is not TiktokenCounter.count_text
                or cls.count_message is not _BaseCounter.count_message
                or cls._count_uncached is not _BaseCounter._count_uncached
                or cls._count_with is not _BaseCounter._count_with
                or threading.current_thread().name.startswith(_POOL_NAME)):
            return None
        unique = list({id(m): m for m in messages}.values())
        sizes = [_char_size(m) for m in unique]
        total = sum(sizes)
        if total < _PARALLEL_BATCH_CHARS:
            return None  # one by one, by ``count_message``
        key, each = "tokens:" + self.name, total // _WORKERS + 1
        runs: list[list[Message]] = [[]]
        filled = 0
        for m, size in zip(unique, sizes, strict=True):
            if filled >= each:
                runs.append([])
                filled = 0
            runs[-1].append(m)
            filled += size

        def whole(text: str) -> int:  # ``count_text`` without handing pieces to the pool
            return self._scaled(self._tokens(text)) if text else 0

        def one(m: Message) -> int:
            return self._count_with(m, whole)

        def run(ms: list[Message]) -> None:
            for m in ms:
                m.derived(key, one)

        list(_count_pool().map(run, runs))
        return None

    def _tokens(self, text: str) -> int:
        """tiktoken's tokens of ``text``, remembered by text: the same content in another
        message object (a result cut the same way at each level of a plan, a message
        rebuilt with a new id or new metadata) is not encoded again. Texts of
        ``_TEXTS_KEPT_CHARS`` characters in all are kept, then the memo starts over."""
        texts: dict[str, int] | None = self.__dict__.get("_texts")
        if texts is None:
            texts = self.__dict__["_texts"] = {}
        n = texts.get(text)
        if n is None:
            # Ordinary encoding counts "<|endoftext|>" in user text as text instead of
            # raising (as ``encode(text, disallowed_special=())`` does, without its checks).
            n = len(self.encoding.encode_ordinary(text))
            if len(text) < _TEXT_KEPT_MAX:
                kept = self.__dict__.get("_texts_chars", 0) + len(text)
                if kept > _TEXTS_KEPT_CHARS:
                    texts = self.__dict__["_texts"] = {}
                    kept = len(text)
                texts[text] = n
                self.__dict__["_texts_chars"] = kept
        return n

    def _scaled(self, tokens: int) -> int:
        """The count of a text from its tiktoken tokens (an approximation scales them)."""
        return tokens

    def _text_bound(self) -> Callable[[str], int] | None:
        """``_scaled`` of the text's UTF-8 length: every token of a tiktoken encoding covers
        at least one byte, and ``_scaled`` never decreases. Only while counting is this
        class's own (a subclass that counts otherwise gets no bound)."""
        cls = type(self)
        if (cls._tokens is not TiktokenCounter._tokens
                or cls.count_text is not TiktokenCounter.count_text
                or cls._scaled not in _MONOTONE_SCALES):
            return None
        if cls._scaled is TiktokenCounter._scaled:
            return _utf8_length
        scaled = self._scaled
        return lambda text: scaled(_utf8_length(text))


class EstimatingCounter(_BaseCounter):
    """Estimates tokens from characters. Conservative by default (the threshold design: 1.5
    chars/token), so it overcounts rather than letting a request overflow."""

    def __init__(self, chars_per_token: float = 1.5) -> None:
        if not chars_per_token > 0:
            raise ConfigurationError(f"chars_per_token must be > 0, got {chars_per_token}")
        self.chars_per_token = chars_per_token
        self.name = f"estimate:{chars_per_token}"

    def count_text(self, text: str) -> int:
        """``ceil(len(text) / chars_per_token)``."""
        return math.ceil(len(text) / self.chars_per_token) if text else 0


class ApproximateCounter(TiktokenCounter):
    """A model family without a local tokenizer, counted as a tiktoken encoding times a
    stated factor (see `APPROXIMATIONS`). The name says so (it is in every report),
    and the Compactor corrects the decision from the usage the provider reports."""

    def __init__(
        self, family: str, encoding: str | tiktoken.Encoding, factor: float, source: str,
        tool_prompt: int = 0,
    ) -> None:
        if not factor > 0:
            raise ConfigurationError(f"factor must be > 0, got {factor}")
        if tool_prompt < 0:
            raise ConfigurationError(f"tool_prompt must be >= 0, got {tool_prompt}")
        super().__init__(encoding)
        self.family, self.factor, self.source = family, factor, source
        self.tool_prompt = tool_prompt
        self.name = f"approx:{family}={self.encoding.name}*{factor}"

    def count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of tool definitions, plus the tool-use system prompt the provider adds
        whenever a request has tools (``tool_prompt``, see `TOOL_USE_PROMPTS`)."""
        if not tools:
            return 0
        return super().count_tools(tools) + self.tool_prompt

    def _scaled(self, tokens: int) -> int:
        """``ceil(factor * tiktoken count)``."""
        return math.ceil(tokens * self.factor)


_MONOTONE_SCALES = (TiktokenCounter._scaled, ApproximateCounter._scaled)
"""``_scaled`` implementations known never to decrease (so a bound of the tokens, scaled,
bounds the count)."""


def _utf8_length(text: str) -> int:
    """Bytes of ``text`` in UTF-8, a lone surrogate as the 3 bytes of the U+FFFD that
    tiktoken encodes in its place (a surrogate pair, which tiktoken joins into one 4-byte
    character, counts 6: still an upper bound)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


_TRACES = "on the tau-bench airline and SWE-Gym OpenHands traces (3.5 MB of text)"
_DIGITS = (f"Tekken, which also splits numbers into single digits, measured 1.12-1.15x {_TRACES}")
_BPE_SPREAD = (f"the tokenizers measured {_TRACES} ranged 0.99-1.15x cl100k_base "
               "(Llama 3 and 4, Tekken, o200k_base)")

APPROXIMATIONS: dict[str, tuple[str, float, str]] = {
    "claude": (
        "cl100k_base", 1.3,
        "Anthropic publishes no tokenizer for Claude 3 and later; tiktoken undercounts Claude "
        "4.x's count_tokens by 20-50% (R. Gupta, 'Reverse Engineering Claude's Token Counter', "
        "2026), so cl100k_base counts are scaled by 1.3, inside that range",
    ),
    "gemini": (
        "cl100k_base", 1.0,
        "Google documents about 4 characters per token for Gemini models ('Understand and "
        f"count tokens', ai.google.dev); cl100k_base gives 3.5-3.7 characters per token {_TRACES}, "
        "so 1.0 errs on the side of counting more",
    ),
    "gemma": (
        "cl100k_base", 1.0,
        "Gemma shares Gemini's tokenizer; see the gemini entry",
    ),
    "llama": (
        "cl100k_base", 1.0,
        f"Meta's Llama 3 tokenizer counted 1.000x and Llama 4's 0.995x cl100k_base {_TRACES}; "
        "install contextfold[tokenizers] to count with Meta's own files",
    ),
    "mistral": (
        "cl100k_base", 1.15,
        f"Mistral's Tekken tokenizer counted 1.12-1.15x cl100k_base {_TRACES}; install "
        "contextfold[tokenizers] to count with Tekken itself",
    ),
    "qwen": (
        "cl100k_base", 1.15,
        "Qwen's BPE vocabulary starts from cl100k_base and splits numbers into single digits "
        f"(Qwen Technical Report, 2023); {_DIGITS}",
    ),
    "deepseek": (
        "cl100k_base", 1.1,
        "DeepSeek documents about 0.3 tokens per English character ('Token & Token Usage', "
        f"api-docs.deepseek.com), 3.3 characters per token against cl100k_base's 3.5-3.7 {_TRACES}",
    ),
    "grok": ("cl100k_base", 1.2, f"xAI publishes no tokenizer; {_BPE_SPREAD}; 1.2 is above it"),
    "kimi": ("cl100k_base", 1.2,
             f"Moonshot's tokenizer is not packaged; {_BPE_SPREAD}; 1.2 is above it"),
}
"""Family -> (encoding, factor, source) for model families counted by approximation."""

TOOL_USE_PROMPTS: dict[str, tuple[int, str]] = {
    "claude": (
        346,
        "Anthropic adds a tool-use system prompt to every request with tools: 346 tokens with "
        "tool_choice auto or none, 313 with any or tool, for its Claude 4 models and Sonnet "
        "3.7 (Anthropic, 'Pricing', Tool use pricing); the larger figure is counted",
    ),
}
"""Family -> (tokens, source) of the system prompt a provider adds when tools are present."""

FAMILY_PREFIXES: dict[str, tuple[str, ...]] = {
    "claude": ("claude",),
    "gemini": ("gemini",),
    "gemma": ("gemma",),
    "llama": ("llama", "meta-llama"),
    "mistral": ("mistral", "open-mistral", "ministral", "codestral", "devstral", "magistral",
                "pixtral"),
    "qwen": ("qwen", "qwq"),
    "deepseek": ("deepseek",),
    "grok": ("grok",),
    "kimi": ("kimi",),
}
"""Family -> the model-name prefixes that belong to it (matched after any ``provider/``)."""

TOKENIZERS: dict[str, tuple[tuple[str, str], ...]] = {
    "llama": (("llama-4", "llama4"), ("llama4", "llama4"), ("", "llama3")),
    "mistral": (("", "tekken"),),
}
"""Family -> (model prefix, packaged encoding) pairs, first match wins: the family's own
tokenizer, used instead of the approximation when its package is installed."""

_warned: set[str] = set()


def counter_for_model(model: str | None = None, *, chars_per_token: float = 1.5) -> TokenCounter:
    """The best counter for ``model``: tiktoken with the model's encoding when it loads,
    else an [`EstimatingCounter`][contextfold.EstimatingCounter] (with one warning per encoding per
    process).

    Other families (see `FAMILY_PREFIXES`) count with their own tokenizer when a
    package ships it (Llama from ``llama-models``, Mistral's Tekken from ``mistral-common``:
    the ``tokenizers`` extra), else with their `ApproximateCounter`; a model of no
    known family gets the conservative estimator without a warning.
    """
    encoding = encoding_for_model(model) if model else "o200k_base"
    if encoding is None:
        key = (model or "").lower().rsplit("/", 1)[-1]
        family = _family(key)
        if family is not None:
            own = _own_tokenizer(family, key)
            if own is not None:
                return own
            base, factor, source = APPROXIMATIONS[family]
            approximated = load_encoding(base)
            if approximated is not None:
                prompt = TOOL_USE_PROMPTS.get(family, (0, ""))[0]
                return ApproximateCounter(family, approximated, factor, source, prompt)
        return EstimatingCounter(chars_per_token)
    loaded = load_encoding(encoding)
    if loaded is None:
        if encoding not in _warned:
            _warned.add(encoding)
            warnings.warn(
                f"contextfold: tiktoken encoding {encoding!r} is not available offline and "
                "could not be downloaded; counting tokens with a conservative estimate "
                f"({chars_per_token} chars/token) instead",
                RuntimeWarning,
                stacklevel=2,
            )
        return EstimatingCounter(chars_per_token)
    return TiktokenCounter(loaded)


def _family(key: str) -> str | None:
    return next((family for family, prefixes in FAMILY_PREFIXES.items()
                 if key.startswith(prefixes)), None)


def _own_tokenizer(family: str, key: str) -> TokenCounter | None:
    for prefix, name in TOKENIZERS.get(family, ()):
        if key.startswith(prefix):
            loaded = load_encoding(name)
            return TiktokenCounter(loaded) if loaded is not None else None
    return None
