"""A stored row checked for an export without building its record: ``export --all``'s pass.

An export writes each record's line from its stored bytes, its two hashes, its attestation
and the parse of its body (:func:`~agentplane_journal.exportfmt.lines.stored_line`); the
:class:`~agentplane_journal.core.record.Record` and the two
:class:`~agentplane_journal.core.ids.Digest` objects ``record_from_row`` builds per row were
thrown away at once, and the line then decoded the bytes and looked for long integers again.
:func:`plain_body` makes every check of ``row_records._plain_record`` in one pass over the
row and hands back what the line needs.

Like ``_plain_record`` (and ``row_chain.chain_rows``), it only ever says yes: any doubt (a
type, a length, a mismatch, an exception) answers ``None``, and the caller reads the row
through :func:`~agentplane_journal.db.statements.record_from_row` for the verdict and the
message it always had. A row it accepts is one ``record_from_row`` accepts, with the same
body, bytes, hashes and attestation (tests/test_export_rows.py holds it to that).
"""

from __future__ import annotations

from typing import Any

from agentplane_journal.core.canon import MAX_DEPTH
from agentplane_journal.core.checks import MAX_I64, MAX_U16
from agentplane_journal.core.record import Attestation, is_canonical_ulid, stored_attestation
from agentplane_journal.db.row_records import (
    _DEEP_BYTES,
    _optional_members,
    _scan,
    _sha256,
)

__all__ = ["plain_body"]

_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_TWENTY_ZEROS = b"0" * 20

_NONE: Any = object()  # equal to no member a body holds
_known_run: tuple[Any, Any] = (_NONE, _NONE)
"""The last ``(run_id column, body run member)`` pair found canonical and equal."""


def plain_body(row: Any) -> tuple[dict[str, Any] | None, str, Attestation | None] | None:
    """``(parsed, text, attestation)`` of a :data:`~agentplane_journal.db.statements.
    RECORD_COLUMNS` row that every check of ``record_from_row`` accepts: its body as
    ``json`` parses it where the bytes hold no 20 digits in a row (else ``None``: the line
    parses them itself), its bytes as text, its attestation; ``None`` when
    ``record_from_row`` must decide (see the module)."""
    global _known_run
    seq, prev_b, hash_b, raw, key_id, signature, run_id, epoch, kind, effect_key, case_id = row
    if (
        type(raw) is not bytes
        or type(prev_b) is not bytes
        or type(hash_b) is not bytes
        or len(hash_b) != 32
        or len(prev_b) != 32
        or type(seq) is not int
        or type(epoch) is not int
        or _sha256(prev_b + raw).digest() != hash_b
    ):
        return None
    if key_id is None:
        if signature is not None:
            return None
        attestation = None
    elif type(key_id) is str and type(signature) is bytes:
        attestation = stored_attestation(key_id, signature)
    else:
        return None
    try:
        text = raw.decode("utf-8")
        body, end = _scan(text, 0)
    except Exception:  # StopIteration, JSONDecodeError, UnicodeDecodeError, RecursionError
        return None
    if end != len(text) or type(body) is not dict:
        return None
    # (No look for ``_plain_record``'s integers of 20 digits, which ``record_from_row``
    # reads as doubles: every one is 20 digits in a row, so the line below parses the bytes
    # itself; and each envelope member's verdict is the same either way, every such integer
    # being beyond the member's range, int or double.)
    get = body.get
    member = get("seq")
    if type(member) is not int or member != seq or not 1 <= seq <= MAX_I64:
        return None
    member = get("run")
    if member != _known_run[1] or run_id != _known_run[0]:
        if type(member) is not str or run_id != "run_" + member or not is_canonical_ulid(member):
            return None
        _known_run = (run_id, member)  # a run's records all repeat it: check it once
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
        pass  # none of the optional members, and neither column names one: nothing to check
    elif not _optional_members(raw, body, case_id, effect_key):
        return None
    # Nesting deeper than MAX_DEPTH + 1 takes that many opening and closing brackets.
    if len(raw) >= _DEEP_BYTES and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        return None
    # 20 digits in a row anywhere (whitespace or not before them; a hex digest may hold
    # them): serde_json may hold a double where json holds an integer, so the line parses
    # the bytes itself, as ``record_line`` does for a record's body.
    return (None if _TWENTY_ZEROS in raw.translate(_ZEROS) else body), text, attestation
