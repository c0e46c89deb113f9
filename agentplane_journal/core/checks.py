"""What both databases can store and index: the bounds every argument is checked against.

One layer for both dialects. SQLite stores nearly anything (NUL in TEXT, any length, an
integer past 2^63 as a float); PostgreSQL refuses NUL in ``text``, lone surrogates, a value
too long for a btree index row (about 2700 bytes) and ``bigint`` overflow, but only inside
the transaction, as a driver error. A value one database stores and the other refuses is a
validation bug: so every argument is bounded here by what *both* accept, and refused with
``ValueError``/``TypeError`` before any statement runs. Pure code, no I/O.
"""

from __future__ import annotations

import math
import unicodedata
from datetime import timedelta
from typing import TypeGuard

from agentplane_journal.core.ids import RunId

__all__ = [
    "MAX_I64",
    "MAX_KEY_ID_BYTES",
    "MAX_LABEL_BYTES",
    "MAX_U16",
    "MAX_U32",
    "check_int",
    "check_key_id",
    "check_label",
    "check_run",
    "check_text",
    "check_ttl",
    "is_int",
    "lease_expiry",
]

MAX_I64 = 2**63 - 1
"""Every integer column is a signed 64-bit ``BIGINT`` (and so is ``now + ttl``)."""

MAX_U16 = 0xFFFF
MAX_U32 = 0xFFFF_FFFF
"""A record's schema version ``v`` is an unsigned 16-bit integer, as in agentplane."""

MAX_LABEL_BYTES = 1024
"""Longest ``kind``, outcome, lease owner and cancelling actor, in UTF-8 bytes.

An outcome is a key of the ``run_outcome_by_outcome`` btree index with the tenant (at most
64 bytes) and an 8-byte ordinal; PostgreSQL refuses an index row over about 2700 bytes. A
kilobyte leaves room for both and for any label a runtime means."""

MAX_KEY_ID_BYTES = 256
"""Longest signer key id, in UTF-8 bytes: it is stored in every signed row."""


def is_int(value: object) -> TypeGuard[int]:
    """An ``int`` that is not a ``bool`` (``True`` is an ``int`` to Python, never a seq)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_label(value: object, name: str, *, max_bytes: int = MAX_LABEL_BYTES) -> str:
    """A one-line, non-empty, bounded string: no control characters, no lone surrogates.

    Labels are stored in ``text`` columns (PostgreSQL refuses NUL and lone surrogates), shown
    on one line by the command line and in error messages (a newline or an escape sequence
    there forges output), and compared byte for byte; an outcome is also indexed.
    """
    if type(value) is str and value.isascii() and value.isprintable():
        # The common label (``Note``, ``EffectStarted``, an outcome word): printable ASCII
        # has no control character and no surrogate, and is as many bytes as characters,
        # so the per-character walk below would accept it. Same checks, same order.
        if not value.strip():
            raise ValueError(f"{name} must not be empty")
        if len(value) > max_bytes:
            raise ValueError(f"{name} is {len(value)} bytes in UTF-8; the limit is {max_bytes}")
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must not be empty")
    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cc":
            raise ValueError(
                f"{name} contains the control character U+{ord(ch):04X}; "
                "it must be one line of printable text"
            )
        if category == "Cs":
            raise ValueError(f"{name} is not valid Unicode (it contains a lone surrogate)")
    size = len(value.encode("utf-8"))
    if size > max_bytes:
        raise ValueError(f"{name} is {size} bytes in UTF-8; the limit is {max_bytes}")
    return value


def check_key_id(value: object) -> str:
    """A signer's key id: a label of at most :data:`MAX_KEY_ID_BYTES` bytes."""
    return check_label(value, "key_id", max_bytes=MAX_KEY_ID_BYTES)


def check_int(value: object, name: str, *, minimum: int = 0, maximum: int = MAX_I64) -> int:
    """An integer in ``[minimum, maximum]`` (bools refused), or a clear error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def check_text(
    value: object, name: str, *, allow_empty: bool = False, max_len: int | None = None
) -> str:
    """A string without NUL (empty only if allowed), or a clear error naming ``name``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not valid Unicode (it contains a lone surrogate)") from None
    if max_len is not None and len(value) > max_len:
        raise ValueError(f"{name} is {len(value)} characters long; the limit is {max_len}")
    return value


def check_run(value: object, name: str = "run") -> RunId:
    """A :class:`RunId` from a ``RunId`` or its text form."""
    if isinstance(value, RunId):
        return value
    if isinstance(value, str):
        return RunId.parse(value)
    raise TypeError(f"{name} must be a RunId or its text form, not {type(value).__name__}")


def check_ttl(value: object) -> int:
    """A lease TTL in whole seconds, at least 1: an ``int``, or a ``timedelta`` or ``float``
    truncated to whole seconds.

    Lease timing has whole-second granularity (``expires_at`` is an integer), so 1.5 s is a
    1-second lease; a TTL that truncates to zero (500 ms, 0, anything negative) is refused,
    never clamped up to a second: a caller who asked for "half a second" would otherwise
    hold the run for twice as long as it said, a contract nobody stated (agentplane 0.22.0
    refuses it in its stores for the same reason). :func:`lease_expiry` checks the other end.
    """
    second = timedelta(seconds=1)
    if isinstance(value, timedelta):  # truncated toward zero, like the float
        value = value // second if value >= timedelta(0) else -(-value // second)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"ttl must be a finite number of seconds, got {value}")
        value = math.trunc(value)
    if is_int(value) and value < 1:
        raise ValueError(
            f"ttl must be at least 1 second, got {value} in whole seconds: lease timing has "
            "whole-second granularity and a sub-second ttl is refused, not rounded up to one"
        )
    return check_int(value, "ttl (whole seconds)", minimum=1)


def lease_expiry(now: int, ttl: int) -> int:
    """``now + ttl`` as a lease's ``expires_at``, refused if it would overflow a ``BIGINT``.

    Checked, not assumed: PostgreSQL refuses the overflow only inside the transaction, and a
    value that wrapped would be a lease born expired, free for anyone while its owner
    believes it holds the run.
    """
    if now + ttl > MAX_I64:
        raise ValueError(
            f"ttl {ttl} is too long: now + ttl must fit a signed 64-bit integer "
            f"(at most {MAX_I64 - now} seconds from now)"
        )
    return now + ttl
