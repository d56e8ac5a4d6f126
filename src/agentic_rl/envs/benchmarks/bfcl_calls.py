"""A function call written as the source text BFCL's decoders read back: the expert's replies.

BFCL's possible answers list, for each parameter, every acceptable value (`[{func: {param:
[choices]}}]`); the expert's reply takes the first acceptable value of each and writes the call
in the category's language: Python (`[area(base=10, height=5)]`), Java or JavaScript (each
value in that language's syntax for the parameter's declared type, as BFCL's type converters
read it back). Multi-turn ground truth is a list of Python calls that may pass arguments by
position; BFCL's decoder keeps keyword arguments only, so `keyword_call` names them.

Pure text: no BFCL import (the data and the checkers are bfcl_data.py's), so every writer is
tested on hand-written values.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from typing import Any

_OMIT = object()


def _first_choice(options: list[Any]) -> Any:
    """The first acceptable value of a parameter ("" means "may be omitted": skipped, and
    `_OMIT` when it is the only choice)."""
    for option in options:
        if not (isinstance(option, str) and option == ""):
            return option
    return _OMIT


def _resolve(value: Any) -> Any:
    """A concrete parameter value from one choice. As BFCL's `dict_checker` reads them, a
    dict choice maps each key to its own list of choices (one level deep, values literal),
    and a list choice may hold such dicts; anything else is literal."""
    if isinstance(value, dict):
        picked = {k: _first_choice(v) for k, v in value.items()}
        return {k: v for k, v in picked.items() if v is not _OMIT}
    if isinstance(value, list):
        return [_resolve(v) if isinstance(v, dict) else v for v in value]
    return value


# A string that Java's grammar reads as one expression whose text is the string itself (an
# identifier, a dotted name, a number, `-flag` or `--a-b`).
_JAVA_BARE = re.compile(r"-{0,2}[\w$.]+(-[\w$.]+)*")


def _java_value(value: Any, kind: str, item_kind: str | None, element: bool = False) -> str:
    """Java source for a possible answer's value of the declared Java type `kind` (`item_kind`
    for a collection's elements), written so that BFCL's Java decoder and type converter read
    it back as that value. A top-level string is a string literal (the decoder strips its
    quotes) unless it holds quotes itself, in which case it is Java source (`new
    InetSocketAddress("1.2.3.4", 80)`) and written as such; a string inside an array is
    written bare where Java reads it as one expression, since the decoder keeps an element's
    quotes and BFCL compares the quoted text (except in an `ArrayList<String>`, whose reader
    strips them); `long` takes an L, `float` an f; `ArrayList` is
    `new ArrayList<>(Arrays.asList(...))` and an array `new T[]{...}`. BFCL's decoder drops a
    `new HashMap<>() {{ put(...); }}` initializer, so a non-empty map cannot pass its checker;
    it is written that way all the same."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if not element and kind in ("String", "any", "char"):
            return value if '"' in value else json.dumps(value)
        bare = _JAVA_BARE.fullmatch(value) or value.startswith("new ")
        return value if bare else json.dumps(value)
    if isinstance(value, int | float):
        return f"{value}L" if kind == "long" else f"{value}f" if kind == "float" else str(value)
    if isinstance(value, list):
        # BFCL's `ArrayList<String>` reader strips each element's quotes; its array reader and
        # its `ArrayList` reader of other types keep them
        quoted = kind == "ArrayList" and item_kind in ("String", "char")
        items = ", ".join(
            _java_value(v, item_kind or "any", None, element=not quoted) for v in value
        )
        if kind == "Array":
            return f"new {item_kind or 'Object'}[]{{{items}}}"
        return f"new ArrayList<>(Arrays.asList({items}))" if items else "new ArrayList<>()"
    if isinstance(value, dict):
        pairs = [
            (json.dumps(k), json.dumps(v) if isinstance(v, str) else _java_value(v, "", None))
            for k, v in value.items()
        ]
        puts = " ".join(f"put({k}, {v});" for k, v in pairs)
        return f"new HashMap<>() {{{{ {puts} }}}}"
    return repr(value)


def _javascript_value(value: Any, kind: str) -> str:
    """JavaScript source for a possible answer's value of the declared type `kind`, written as
    BFCL's JavaScript type converter reads it back: strings quoted, booleans `true`/`false`,
    a `Bigint` with an n, arrays `[...]` and dicts `{key: value}`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if kind in ("array", "dict") and value else json.dumps(value)
    if isinstance(value, int | float):
        return f"{value}n" if kind == "Bigint" else str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_javascript_value(v, "any") for v in value) + "]"
    if isinstance(value, dict):
        pairs = ", ".join(f"{k}: {_javascript_value(v, 'any')}" for k, v in value.items())
        return "{" + pairs + "}"
    return repr(value)


def _source_value(value: Any, spec: dict[str, Any], language: str) -> str:
    """A parameter value as the reply writes it in `language` (`spec`: the parameter's doc)."""
    if language == "java":
        return _java_value(value, spec.get("type", "any"), spec.get("items", {}).get("type"))
    if language == "javascript":
        return _javascript_value(value, spec.get("type", "any"))
    return repr(value)


def expert_calls(
    ground_truth: list[dict[str, dict[str, list[Any]]]],
    functions: Sequence[dict[str, Any]] = (),
    language: str = "python",
) -> str:
    """A reply in BFCL's prompting format that the possible answer accepts: each function with
    the first acceptable value of each parameter, e.g. `[area(base=10, height=5)]`.
    `ground_truth` is BFCL's `[{func: {param: [choices]}}]`; for Java and JavaScript each value
    is written in that language's syntax for the parameter's type in `functions` (the docs as
    BFCL's checker reads them: `checker_functions`)."""
    specs = {f["name"]: f["parameters"]["properties"] for f in functions}
    calls = []
    for call in ground_truth:
        for name, params in call.items():
            args = {k: _first_choice(v) for k, v in params.items()}
            text = ", ".join(
                f"{k}={_source_value(_resolve(v), specs.get(name, {}).get(k, {}), language)}"
                for k, v in args.items()
                if v is not _OMIT
            )
            calls.append(f"{name}({text})")
    return "[" + ", ".join(calls) + "]"


def keyword_call(call: str, parameters: dict[str, tuple[str, ...]]) -> str:
    """A ground-truth call with its positional arguments named (`sort('a.txt')` ->
    `sort(file_name='a.txt')`): BFCL's decoder keeps keyword arguments only, so the expert
    names them from the method's signature."""
    node = ast.parse(call, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {call!r}")
    names = parameters[node.func.id]
    args = [f"{names[i]}={ast.unparse(a)}" for i, a in enumerate(node.args)]
    args += [f"{k.arg}={ast.unparse(k.value)}" for k in node.keywords]
    return f"{node.func.id}({', '.join(args)})"
