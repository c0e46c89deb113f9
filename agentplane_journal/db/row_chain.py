"""A page of stored rows chain-checked without building its records: ``store.verify``'s pass.

``store.verify`` without a verifier needs each row's checks (``statements.record_from_row``)
and the chain's (``RunCheck.feed``: contiguity, links, exactly-once), but none of the
records: it keeps only the head. Building a :class:`~agentplane_journal.core.record.Record`
and two :class:`~agentplane_journal.core.ids.Digest` objects per row, then walking the page
twice more, was about half of verifying a run (and the collector's work on those objects
more). :func:`chain_rows` makes every one of those checks in one pass over the rows and
builds nothing but the page's head.

Like ``statements._plain_record``, it only ever says yes: any doubt (a type, a mismatch, a
gap, a second start, a row with an attestation's columns half set) answers ``None``, and
the caller runs the full checks on the page (``RunCheck.feed(records_from_rows(rows))``) for
the verdict and the message it always had. A page it accepts is one those accept, leaving
the same head, last seq and started effects behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentplane_journal.core.append import EFFECT_STARTED
from agentplane_journal.core.canon import MAX_DEPTH
from agentplane_journal.core.checks import MAX_I64, MAX_U16
from agentplane_journal.core.ids import Digest
from agentplane_journal.core.record import is_canonical_ulid
from agentplane_journal.db.row_records import (
    _DEEP_BYTES,
    _optional_members,
    _scan,
    _sha256,
)

__all__ = ["chain_rows"]

_NONE: Any = object()  # equal to no member a body holds


def chain_rows(
    rows: Sequence[Any], head: Digest, last: int, started: dict[str, int]
) -> tuple[Digest, int, dict[str, int]] | None:
    """The new head, last seq and newly started effect keys (key -> seq) after ``rows``
    (:data:`~agentplane_journal.db.statements.RECORD_COLUMNS`, by seq), when every row
    passes every check of ``records_from_rows`` and the page every check of an unsigned
    ``RunCheck.feed`` after ``head`` and ``last`` (with ``started``, which is not changed);
    ``None`` when the caller must run those checks itself (see the module)."""
    if not rows:
        return head, last, {}
    head_b = bytes(head)
    known_run: Any = _NONE  # the page's run member and run_id column, once found canonical
    known_column: Any = _NONE
    fresh: dict[str, int] = {}
    for row in rows:
        seq, prev_b, hash_b, raw, key_id, signature, run_id, epoch, kind, effect_key, case_id = row
        if (
            type(seq) is not int
            or seq != last + 1
            or type(raw) is not bytes
            or type(hash_b) is not bytes
            or len(hash_b) != 32
            or prev_b != head_b
            or type(prev_b) is not bytes
            or type(epoch) is not int
            or _sha256(prev_b + raw).digest() != hash_b
        ):
            return None
        if key_id is None:
            if signature is not None:
                return None
        elif type(key_id) is not str or type(signature) is not bytes:
            return None
        try:
            text = raw.decode("utf-8")
            body, end = _scan(text, 0)
        except Exception:  # StopIteration, JSONDecodeError, UnicodeDecodeError, RecursionError
            return None
        if end != len(text) or type(body) is not dict:
            return None
        # No look for integers of 20 digits and more, which the full checks read as doubles
        # (WIRE_DECODER): this pass keeps no body, and each envelope member's verdict is the
        # same either way (every such integer is beyond the member's range, int or double).
        get = body.get
        member = get("seq")
        if type(member) is not int or member != seq or not 1 <= seq <= MAX_I64:
            return None
        member = get("run")
        if member != known_run:
            if (
                type(member) is not str
                or run_id != "run_" + member
                or not is_canonical_ulid(member)
            ):
                return None
            known_run = member
            known_column = run_id
        elif run_id != known_column:
            return None
        member = get("kind")
        if type(member) is not str or not member or member != kind:
            return None
        member = get("epoch")
        if type(member) is not int or member != epoch or not 0 <= epoch <= MAX_I64:
            return None
        member = get("v")
        if type(member) is not int or not 0 <= member <= MAX_U16:
            return None
        if (
            case_id is None
            and effect_key is None
            and "case" not in body
            and "effect_key" not in body
            and "step" not in body
            and "phase" not in body
        ):
            pass  # none of the optional members, and neither column names one
        elif not _optional_members(raw, body, case_id, effect_key):
            return None
        elif effect_key is not None and kind == EFFECT_STARTED:
            if effect_key in started or effect_key in fresh:
                return None  # a second start (the full check names the first)
            fresh[effect_key] = seq
        if len(raw) >= _DEEP_BYTES and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
            return None
        head_b, last = hash_b, seq
    return Digest(head_b), last, fresh
