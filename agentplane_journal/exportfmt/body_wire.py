"""Whether an export line's readable ``body`` is its wire bytes, decided without a second parse.

agentplane 0.22's verify holds every record line's ``body`` (parsed with the line) equal to
its wire bytes parsed on their own, as serde_json ``Value`` s. Done literally, that is a
second parse of every record (:func:`~.body.serde_value`, with a Python call per number)
and a walk over both values (:func:`~.body.same_value`): more than half of what
``verify-export`` spent on a record. :func:`body_is_wire` answers the same question for the
common record from the body alone: the wire bytes are canonical JSON (sorted members, no
whitespace), so when ``json``'s C encoder, sorting members, writes the body back as exactly
those bytes, parsing them gives the body again, value for value and type for type:

* a string, ``true``/``false``/``null`` and an integer in ``i64``/``u64`` read back as what
  was written; a finite float is written as ``repr``, which reads back as the same float
  (``-0.0`` too);
* what serde_json reads otherwise is kept off this path: an integer beyond ``u64`` (20
  digits or more) or below ``i64`` (a ``-`` and 19 digits or more), which serde_json holds
  as an ``f64`` (checked over the bytes: any such run of digits, in a string too, sends the
  record the slow way, where ``core.record.may_hold_long_digits`` looks only after a
  separator),
  ``NaN``/``Infinity`` (the encoder refuses them: ``allow_nan=False``), a body that is not an
  object;
* members' order is not compared by serde_json (its ``Map`` with ``preserve_order`` compares
  as a map), and a body whose members the encoder sorts into the wire's bytes holds the
  same members.

It only ever says yes: a ``False`` (a float in another layout, an escape the encoder writes
otherwise, a body in any doubt) means "not shown here", and the caller compares the slow way,
whose verdict and message are the only ones. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentplane_journal.core.canon import sorted_chunks

__all__ = ["body_is_wire", "sorted_text"]

_SORTED = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
)
"""The canonical writer's layout: compact, members sorted, no ``NaN``/``Infinity``."""


_write: Callable[[object, int], Any] = sorted_chunks
""":data:`_SORTED`'s writing as pieces: canonical JSON's C encoder, built once in
:mod:`~agentplane_journal.core.canon` (``JSONEncoder.encode`` builds it again on every call,
a third of the cost of writing a small body)."""
_join = "".join


def sorted_text(value: object) -> str:
    """``_SORTED.encode(value)``, through the encoder built once
    (``tests/test_verify_body_wire.py`` holds them to the same text)."""
    return _join(_write(value, 0))


_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_BEYOND_U64 = b"0" * 20
_BELOW_I64 = b"-" + b"0" * 19


def body_is_wire(body: object, raw: str, raw_bytes: bytes) -> bool:
    """``True`` only when ``serde_value(raw)`` is ``body`` exactly (equal, with the same
    types throughout), so the body-vs-wire check holds and ``body`` can be read as the
    wire's value; ``False`` when that is not shown here (compare the slow way).

    ``body``: the line's ``body`` as ``json.loads`` read it; ``raw``: the line's ``raw``;
    ``raw_bytes``: ``raw`` encoded as it is hashed (UTF-8, surrogates passed)."""
    if type(body) is not dict:
        return False
    # An integer serde_json does not keep as u64/i64 is 20 digits, or a `-` and 19: any such
    # run (in a string too) sends the record the slow way.
    marked = raw_bytes.translate(_DIGITS)
    if _BEYOND_U64 in marked or _BELOW_I64 in marked:
        return False
    try:
        return _join(_write(body, 0)) == raw
    except (ValueError, TypeError, RecursionError):  # NaN/Infinity; nested past the C stack
        return False
