"""Coding-agent runs in the style of OpenHands on SWE-Gym, written from a seed.

Each record has the shape of the SWE-Gym OpenHands trajectories (``instance_id``,
``messages`` in OpenAI format with every optional key present and ``null``, ``tools``): the
agent lists the repository, reads a module (a long numbered listing), writes a script that
reproduces the reported bug, runs it (a traceback), edits the function, runs the script and
the test suite (a long pytest log), and calls ``finish``. Like the real trajectories, a run
ends on that call, whose result was never recorded.
"""

from __future__ import annotations

import json
import random
from typing import Any

__all__ = ["TOOLS", "coding_records"]

_SYSTEM = (
    "You are a helpful assistant that can interact with a computer to solve tasks.\n"
    "<IMPORTANT>\n* If user provides a path, you should NOT assume it's relative to the "
    "current working directory. Instead, you should explore the file system to find the "
    "file before working on it.\n</IMPORTANT>\n"
)

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "execute_bash",
        "description": "Execute a bash command in the terminal. Long-running commands should "
                       "run in the background with their output redirected to a file.",
        "parameters": {"type": "object", "required": ["command"], "properties": {
            "command": {"type": "string", "description": "The bash command to execute."}}}}},
    {"type": "function", "function": {
        "name": "str_replace_editor",
        "description": "Custom editing tool for viewing, creating and editing files. `view` "
                       "shows a file with line numbers (`cat -n`) or lists a directory two "
                       "levels deep; `create` writes a new file; `str_replace` replaces one "
                       "exact, unique occurrence of `old_str` with `new_str`.",
        "parameters": {"type": "object", "required": ["command", "path"], "properties": {
            "command": {"type": "string", "enum": ["view", "create", "str_replace"]},
            "path": {"type": "string", "description": "Absolute path to a file or directory."},
            "file_text": {"type": "string"}, "old_str": {"type": "string"},
            "new_str": {"type": "string"},
            "view_range": {"type": "array", "items": {"type": "integer"}}}}}},
    {"type": "function", "function": {
        "name": "finish",
        "description": "Finish the interaction when the task is complete or cannot go on.",
        "parameters": {"type": "object", "properties": {}}}},
]
"""The tool definitions every coding record carries."""

_PROJECTS = (
    ("acme__ledger__2.3", "ledger", ("accounts", "journal", "currency", "reports", "importers",
                                     "rounding", "periods", "tax")),
    ("orbit__tilemap__0.9", "tilemap", ("grid", "layers", "render", "loader", "palette",
                                        "viewport", "pathing", "tiles")),
)
_VERBS = ("parse", "apply", "merge", "resolve", "normalize", "validate", "render", "collect",
          "split", "convert", "compute", "load", "flush", "reconcile", "index", "format")
_NOUNS = ("entry", "entries", "balance", "period", "rate", "amount", "line", "layer", "tile",
          "offset", "header", "record", "bucket", "total", "window", "span")
_NULLS = {"function_call": None, "name": None, "tool_call_id": None, "tool_calls": None}


class _Run:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.messages: list[dict[str, Any]] = [dict(_NULLS, role="system", content=_SYSTEM)]

    def user(self, text: str) -> None:
        self.messages.append(dict(_NULLS, role="user", content=text))

    def call(self, name: str, arguments: dict[str, Any], result: str | None,
             thought: str = "") -> None:
        call_id = "call_" + "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
                                                    "OPQRSTUVWXYZ0123456789") for _ in range(24))
        self.messages.append(dict(_NULLS, role="assistant", content=thought, tool_calls=[{
            "function": {"arguments": json.dumps(arguments), "name": name},
            "id": call_id, "index": None, "type": "function"}]))
        if result is not None:
            self.messages.append(dict(_NULLS, role="tool", name=name, tool_call_id=call_id,
                                      content=f"OBSERVATION:\n{result}"))


def _functions(rng: random.Random, count: int) -> list[str]:
    names: list[str] = []
    while len(names) < count:
        name = f"{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}"
        if name not in names:
            names.append(name)
    return names


def _module_source(rng: random.Random, package: str, module: str, names: list[str],
                   buggy: str) -> str:
    """A plausible module: imports, a constant, one function per name; ``buggy`` indexes a
    mapping without a default."""
    lines = [f'"""{module.title()} helpers of {package}."""', "",
             "from __future__ import annotations", "", "import logging",
             "from collections.abc import Iterable, Mapping", "",
             f"from {package}.errors import {module.title()}Error",
             f"from {package}.types import Record", "", "logger = logging.getLogger(__name__)",
             f"DEFAULT_LIMIT = {rng.randrange(10, 500)}", ""]
    for name in names:
        lines += ["", f"def {name}(records: Iterable[Record], options: Mapping[str, int]) -> "
                  "list[Record]:",
                  f'    """{name.replace("_", " ").capitalize()} of every record, in order."""',
                  "    out: list[Record] = []",
                  "    for record in records:"]
        if name == buggy:
            lines += ["        limit = options[record.kind]  # KeyError for a kind not listed",
                      "        if record.size > limit:",
                      f"            raise {module.title()}Error(record.key, limit)"]
        else:
            lines += ["        if record.size > options.get(record.kind, DEFAULT_LIMIT):",
                      f"            logger.debug('{name}: %s over its limit', record.key)",
                      "            continue"]
        lines += ["        out.append(record)", "    return out", ""]
    return "\n".join(lines)


def _numbered(text: str) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(text.splitlines(), start=1))


def _listing(root: str, package: str, modules: tuple[str, ...]) -> str:
    paths = [root, f"{root}/README.md", f"{root}/pyproject.toml", f"{root}/{package}"]
    for module in modules:
        paths.append(f"{root}/{package}/{module}.py")
    paths += [f"{root}/{package}/__init__.py", f"{root}/{package}/errors.py",
              f"{root}/{package}/types.py", f"{root}/tests"]
    paths += [f"{root}/tests/test_{module}.py" for module in modules]
    return (f"Here's the files and directories up to 2 levels deep in {root}, excluding "
            "hidden items:\n" + "\n".join(paths))


def _pytest_log(rng: random.Random, root: str, modules: tuple[str, ...],
                names: dict[str, list[str]]) -> str:
    lines = ["============================= test session starts ==============================",
             "platform linux -- Python 3.11.9, pytest-8.2.2, pluggy-1.5.0 -- /usr/bin/python",
             f"rootdir: {root}", "configfile: pyproject.toml", "collecting ... collected"]
    count = 0
    for module in modules:
        for name in names[module]:
            for case in ("empty", "single", "many", "over_limit", "unknown_kind", "unicode"):
                count += 1
                lines.append(f"tests/test_{module}.py::test_{name}_{case} PASSED"
                             f"{' ' * rng.randrange(1, 8)}[{count * 100 // 400:3d}%]")
    lines[4] += f" {count} items"
    seconds = f"{rng.randrange(3, 19)}.{rng.randrange(10, 99)}"
    lines.append(f"======================= {count} passed in {seconds}s =======================")
    return "\n".join(lines)


def _run(seed: int, root: str, package: str, modules: tuple[str, ...]) -> dict[str, Any]:
    rng = random.Random(seed)
    names = {m: _functions(rng, rng.randrange(6, 10)) for m in modules}
    module = modules[rng.randrange(len(modules))]
    buggy = names[module][rng.randrange(len(names[module]))]
    path = f"/workspace/{root}/{package}/{module}.py"
    kind = rng.choice(("refund", "transfer", "overlay", "marker"))
    run = _Run(rng)
    run.user(
        f"<uploaded_files>\n/workspace/{root}\n</uploaded_files>\nI've uploaded a python code "
        f"repository in the directory {root}. Consider the following PR description:\n\n"
        f"<pr_description>\n`{package}.{module}.{buggy}` raises KeyError for records of a "
        f"kind that `options` does not list\n\nCalling `{buggy}` with a record whose kind is "
        f"`{kind}` fails:\n\n```\nKeyError: '{kind}'\n```\n\nIt should fall back to "
        f"`DEFAULT_LIMIT` like every other function of `{package}/{module}.py`.\n"
        "</pr_description>\n\nCan you help me implement the necessary changes to the "
        "repository so that the requirements specified in the <pr_description> are met? "
        "I've already taken care of all changes to any of the test files described in the "
        "<pr_description>. Your task is to make the minimal changes to non-tests files in "
        f"the /workspace/{root} directory to ensure the <pr_description> is satisfied.")
    root_path = f"/workspace/{root}"
    run.call("str_replace_editor", {"command": "view", "path": root_path},
             _listing(root_path, package, modules))
    source = _module_source(rng, package, module, names[module], buggy)
    run.call("str_replace_editor", {"command": "view", "path": path},
             f"Here's the result of running `cat -n` on {path}:\n{_numbered(source)}",
             thought=f"Let me look at {module}.py, where `{buggy}` lives.")
    other = modules[(modules.index(module) + 1) % len(modules)]
    other_path = f"/workspace/{root}/{package}/{other}.py"
    run.call("str_replace_editor", {"command": "view", "path": other_path},
             f"Here's the result of running `cat -n` on {other_path}:\n"
             f"{_numbered(_module_source(rng, package, other, names[other], ''))}")
    script = (f"from {package}.{module} import {buggy}\nfrom {package}.types import Record\n\n"
              f"print({buggy}([Record(key='r1', kind='{kind}', size=3)], {{}}))\n")
    run.call("str_replace_editor", {"command": "create", "path": f"{root_path}/reproduce.py",
                                    "file_text": script},
             f"File created successfully at: {root_path}/reproduce.py")
    line = source.splitlines().index(
        "        limit = options[record.kind]  # KeyError for a kind not listed") + 1
    run.call("execute_bash", {"command": f"cd {root_path} && python reproduce.py"},
             f"Traceback (most recent call last):\n  File \"{root_path}/reproduce.py\", line 4,"
             f" in <module>\n    print({buggy}([Record(key='r1', kind='{kind}', size=3)], {{}}))"
             f"\n  File \"{path}\", line {line}, in {buggy}\n    limit = options[record.kind]"
             f"\nKeyError: '{kind}'\n[Python Interpreter: /usr/bin/python]\n"
             f"root@openhands-workspace:{root_path} # \n[Command finished with exit code 1]")
    run.call("str_replace_editor", {
        "command": "str_replace", "path": path,
        "old_str": "        limit = options[record.kind]  # KeyError for a kind not listed",
        "new_str": "        limit = options.get(record.kind, DEFAULT_LIMIT)"},
        f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet "
        f"of {path}:\n{line - 1:6}\t    for record in records:\n{line:6}\t        limit = "
        f"options.get(record.kind, DEFAULT_LIMIT)\n{line + 1:6}\t        if record.size > "
        "limit:\nReview the changes and make sure they are as expected.",
        thought=f"`{buggy}` indexes `options` without a default; use `DEFAULT_LIMIT` like the "
                "other functions.")
    run.call("execute_bash", {"command": f"cd {root_path} && python reproduce.py"},
             f"[Record(key='r1', kind='{kind}', size=3)]\n[Python Interpreter: /usr/bin/python]"
             f"\nroot@openhands-workspace:{root_path} # \n[Command finished with exit code 0]")
    run.call("execute_bash", {"command": f"cd {root_path} && python -m pytest -v tests"},
             _pytest_log(rng, root_path, modules, names) + "\n[Command finished with exit "
             "code 0]")
    run.call("finish", {}, None,
             thought=f"`{buggy}` now falls back to `DEFAULT_LIMIT` for kinds `options` does "
                     "not list, the reproduction prints the record, and the suite passes.")
    return {"instance_id": f"{root.rsplit('__', 1)[0]}-{seed}", "resolved": True,
            "messages": run.messages, "tools": TOOLS}


def coding_records(seed: int = 0) -> list[dict[str, Any]]:
    """Two runs, one per made-up project."""
    return [_run(seed * 1_000 + n, root, package, modules)
            for n, (root, package, modules) in enumerate(_PROJECTS)]
