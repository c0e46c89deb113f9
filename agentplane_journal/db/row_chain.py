"""A page of stored rows chain-checked without building its records: ``store.verify``'s pass.

``store.verify`` without a verifier needs each row's checks (``statements.record_from_row``)
and the chain's (``RunCheck.feed``: contiguity, links, exactly-once), but none of the
records: it keeps only the head. Building a :class:`~agentplane_journal.core.record.Record`
and two :class:`~agentplane_journal.core.ids.Digest` objects per row, then walking the page
twice more, was about half of verifying a run (and the collector's work on those objects
more). :func:`chain_rows` makes every one of those checks in one pass over the rows (each
row's by ``row_records.checked_body``, the read's own) and builds nothing but the page's
head.

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
from agentplane_journal.core.ids import Digest
from agentplane_journal.db.row_records import checked_body

__all__ = ["chain_rows"]


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
    fresh: dict[str, int] = {}
    for row in rows:
        seq, prev_b, hash_b = row[0], row[1], row[2]
        # The row's own checks are the read's (checked_body: hash, parse, every column
        # against its body); the chain's are these: contiguity, the link, exactly-once.
        if type(seq) is not int or seq != last + 1 or prev_b != head_b:
            return None
        if checked_body(row) is None:
            return None
        # (No look for integers of 20 digits and more, which the full checks read as
        # doubles: this pass keeps no body, and each envelope member's verdict is the same
        # either way, every such integer being beyond the member's range, int or double.)
        effect_key = row[9]
        if effect_key is not None and row[8] == EFFECT_STARTED:
            if effect_key in started or effect_key in fresh:
                return None  # a second start (the full check names the first)
            fresh[effect_key] = seq
        head_b, last = hash_b, seq
    return Digest(head_b), last, fresh
