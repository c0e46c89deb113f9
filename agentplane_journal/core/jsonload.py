"""JSON read from outside (a file, a socket, a request) with a bound on its nesting. Pure.

``json.loads`` of a value nested 100,000 deep raises ``RecursionError``, which no caller
expects: a hostile export, restore file or receipt ended the command with a traceback.
:func:`loads` turns any nesting beyond :data:`MAX_JSON_DEPTH` into :class:`JsonTooDeep`, a
``ValueError``, so every ``except ValueError`` that already makes a malformed input a
verdict makes this one a verdict too. The bound is far above what any value the journal
writes can reach (a record body is at most :data:`~agentplane_journal.core.canon.MAX_DEPTH`
deep, serde_json's limit, and a line wraps it in two or three more) and far below Python's
recursion limit, so whatever passes can be walked recursively by the code after it.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "JsonTooDeep", "decode", "depth", "loads"]

MAX_JSON_DEPTH = 256
"""Deepest container nesting read from outside (the root container counts as 1)."""


class JsonTooDeep(ValueError):
    """The JSON nests deeper than :data:`MAX_JSON_DEPTH`: refused, never parsed on."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"JSON nested more than {limit} levels deep (no value this journal writes is): refused"
        )


def depth(value: object) -> int:
    """How deep ``value``'s containers nest (0 for a scalar), without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def loads(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, **kwargs: Any) -> Any:
    """``json.loads(text, **kwargs)``, but nesting beyond ``max_depth`` is :class:`JsonTooDeep`.

    Cheap for ordinary input: the parsed value is only walked when the text holds more
    opening brackets than ``max_depth`` (counted in C, inside strings too, so never fewer).
    """
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise JsonTooDeep(max_depth) from None
    opened = (
        text.count(b"[") + text.count(b"{")
        if isinstance(text, bytes)
        else text.count("[") + text.count("{")
    )
    if opened > max_depth and depth(value) > max_depth:
        raise JsonTooDeep(max_depth)
    return value


def decode(decoder: json.JSONDecoder, text: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """:func:`loads` through a decoder built once (``json.loads`` with arguments builds one
    per call, a measurable share of parsing a small value on a per-record path)."""
    try:
        # The C scanner straight from the first character: ``decode`` would also match
        # whitespace at both ends in Python. Any text that does not start with a value or
        # has something after it takes ``decode`` itself, for its exact verdict.
        try:
            value, end = decoder.scan_once(text, 0)  # type: ignore[attr-defined]
        except StopIteration:
            value, end = decoder.decode(text), len(text)
        if end != len(text):
            value = decoder.decode(text)
    except RecursionError:
        raise JsonTooDeep(max_depth) from None
    # Nesting past max_depth takes as many brackets opened and closed: a shorter text cannot.
    if (
        len(text) > 2 * max_depth
        and text.count("[") + text.count("{") > max_depth
        and depth(value) > max_depth
    ):
        raise JsonTooDeep(max_depth)
    return value
