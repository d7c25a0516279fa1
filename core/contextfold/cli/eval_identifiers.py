"""The evaluation's own identifier rule: what a probe is.

The rule is separate from, and deliberately not shared with, the extractor our summaries
and ledger copy from (``contextfold._identifiers``): a contender must not score
by copying exactly what the grader looks for. It must still see what real agent runs use,
in code and in customer service alike:

* tokens holding a digit (``ORD-1042``, ``HAT001``, ``2024-05-10``), an ``@`` or a slash;
  a token of digits only needs four or more of them (``9725``, a card's last four);
* snake_case and ``_private`` names (``get_user_details``, ``_trim_end``);
* CamelCase with two humps or more (``ReviewTokenStore``, ``getUserDetails``);
* dotted names (``os.path.join``, ``views.py``), and the parts of a dotted name that are
  names by this rule themselves (``self._trim_end`` also gives ``_trim_end``);
* function and method names written as a call or a definition (``compact(``), when not a
  common builtin;
* quoted values that are one token and not a plain word (``"JFK"``, ``'v2'``), the form of
  a tool call's arguments. A quoted key (``"user_id":``) is never an identifier: it names a
  field of a tool's schema, which the model writes from the tool definitions, not from
  memory.

A string escape (``\\n``, ``\\t``, ``\\r``, ``\\"``) separates tokens like the character
it stands for: a tool call's JSON arguments write a file's lines as
``"import DataLoader\\nfrom x"``, whose identifiers are the lines' (``DataLoader``),
never ``DataLoader\\nfrom``.

Plain English words (lowercase or Capitalized letters only) never count, nor a short stop
list of code noise (``self``, ``print``, ``true``...). The scan is one regular expression
without nested quantifiers, then constant work per character of each token: linear time.
"""

from __future__ import annotations

import re

__all__ = ["eval_identifiers"]

_TOKEN = re.compile(r"[^\s\"'`<>()\[\]{},;=|]+")
_ESCAPE = re.compile(r'(?<!\\)\\[nrt"]')
"""A string escape standing for a separator (an escaped backslash before it is a path's)."""
_EDGES = ".:!?*#-+~^$%&"
_NOISE = frozenset({
    "self", "cls", "args", "kwargs", "print", "len", "str", "int", "dict", "list", "range",
    "true", "false", "null", "none", "json", "http", "https", "www", "e.g", "i.e", "etc",
    "open", "type", "super", "isinstance", "format", "append", "get", "set", "tuple", "bool",
    "float", "min", "max", "sum", "sorted", "enumerate", "zip", "map", "filter", "return",
    "lambda", "import", "from", "def", "class", "async", "await", "yield", "not", "and", "or",
    "if", "for", "while", "with", "else", "elif", "try", "except", "raise", "assert",
})
_MAX_TOKEN = 120
"""Longer tokens are blobs (base64, minified code), not something a model writes back."""


def _is_plain_word(token: str) -> bool:
    """Letters only, all lowercase or one leading capital: an English word."""
    return token.isalpha() and (token.islower() or (token[0].isupper() and token[1:].islower()))


def _humps(token: str) -> int:
    """Capitals that start a lowercase run after a lowercase letter or a digit (or at the
    start): ``ReviewTokenStore`` has three, ``getUserDetails`` two, ``iPhone`` one."""
    count = 0
    for i, c in enumerate(token[:-1]):
        if c.isupper() and token[i + 1].islower() and (i == 0 or not token[i - 1].isupper()):
            count += 1
    return count


def _is_name(token: str) -> bool:
    """A snake_case, ``_private`` or CamelCase name."""
    if not token.replace("_", "").isalnum():
        return False
    if "_" in token.strip("_") or (token.startswith("_") and len(token) > 1):
        return any(c.isalpha() for c in token)
    return _humps(token) >= 2


def _is_reference(token: str) -> bool:
    """A token of the kinds that need no context: digits, ``@``, slashes, names, dots."""
    if len(token) < 3 or token.lower() in _NOISE:
        return False
    digits = sum(c.isdigit() for c in token)
    if digits:
        if all(c.isdigit() or c in ".,:-/" for c in token):
            return digits >= 4  # a bare number: four digits or more
        return len(token) >= 4
    if "@" in token and len(token) >= 4:
        return True
    if "/" in token or "\\" in token:
        parts = re.split(r"[/\\]", token)
        # ``and/or``: two plain words are prose, not a path
        return not (len(parts) == 2 and all(_is_plain_word(p) for p in parts))
    if _is_name(token):
        return True
    if "." in token:
        parts = token.split(".")
        return (all(p and p.replace("_", "").isalnum() for p in parts)
                and any(len(p) >= 2 for p in parts) and len(token) >= 4)
    return False


def eval_identifiers(text: str) -> list[str]:
    """The identifiers of ``text`` by the evaluation's rule, in order, once each."""
    found: dict[str, None] = {}
    text = _ESCAPE.sub("  ", text)  # the same length: each escape becomes two spaces
    end = len(text)
    for match in _TOKEN.finditer(text):
        raw = match.group()
        if len(raw) > _MAX_TOKEN:
            continue
        token = raw.strip(_EDGES)
        if not token:
            continue
        start, stop = match.start(), match.end()
        before = text[start - 1] if start else ""
        after = text[stop] if stop < end else ""
        quoted = before in "\"'" and before != "" and after == before and raw == token
        if quoted and _next_visible(text, stop + 1) == ":":
            continue  # a quoted key names a field of a schema, not a value to remember
        if _is_reference(token):
            found.setdefault(token, None)
            if "." in token:
                # the names inside a dotted name: ``self._trim_end`` gives ``_trim_end``
                for part in token.split("."):
                    if _is_name(part) and part.lower() not in _NOISE:
                        found.setdefault(part, None)
            last = token.rsplit(".", 1)[-1]
            if after == "(" and _is_call_name(last):
                found.setdefault(last, None)
        elif after == "(" and raw == token and _is_call_name(token) and (
                text[stop:stop + 3] != "(s)"):
            found.setdefault(token, None)  # a call or a definition: ``compact(``
        elif quoted and not _is_plain_word(token) and len(token) >= 3:
            found.setdefault(token, None)  # a quoted value
    return list(found)


def _is_call_name(token: str) -> bool:
    return (len(token) >= 3 and token.replace("_", "").isalnum() and not token[0].isdigit()
            and token.lower() not in _NOISE)


def _next_visible(text: str, index: int) -> str:
    """The first character at or after ``index`` that is not a space (bounded look)."""
    for c in text[index:index + 8]:
        if not c.isspace():
            return c
    return ""
