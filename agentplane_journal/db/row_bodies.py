"""A stored row checked for an export without building its record: ``export --all``'s pass.

An export writes each record's line from its stored bytes, its two hashes, its attestation
and the parse of its body (:func:`~agentplane_journal.exportfmt.lines.stored_line`); the
:class:`~agentplane_journal.core.record.Record` and the two
:class:`~agentplane_journal.core.ids.Digest` objects ``record_from_row`` builds per row were
thrown away at once, and the line then decoded the bytes and looked for long integers again.
:func:`plain_body` makes every check of ``row_records._plain_record`` (the same function,
``row_records.checked_body``) and hands back what the line needs.

Like ``_plain_record`` (and ``row_chain.chain_rows``), it only ever says yes: any doubt (a
type, a length, a mismatch, an exception) answers ``None``, and the caller reads the row
through :func:`~agentplane_journal.db.statements.record_from_row` for the verdict and the
message it always had. A row it accepts is one ``record_from_row`` accepts, with the same
body, bytes, hashes and attestation (tests/test_export_rows.py holds it to that).
"""

from __future__ import annotations

from typing import Any

from agentplane_journal.core.record import Attestation
from agentplane_journal.db.row_records import checked_body
from agentplane_journal.exportfmt.lines import stored_line

__all__ = ["plain_body", "plain_line"]

_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_TWENTY_ZEROS = b"0" * 20


def plain_body(row: Any) -> tuple[dict[str, Any] | None, str, Attestation | None] | None:
    """``(parsed, text, attestation)`` of a :data:`~agentplane_journal.db.statements.
    RECORD_COLUMNS` row that every check of ``record_from_row`` accepts: its body as
    ``json`` parses it where the bytes hold no 20 digits in a row (else ``None``: the line
    parses them itself), its bytes as text, its attestation; ``None`` when
    ``record_from_row`` must decide (see the module)."""
    checked = checked_body(row)  # every check of the read path's, but its long integers
    if checked is None:
        return None
    # 20 digits in a row anywhere (whitespace or not before them; a hex digest may hold
    # them): serde_json may hold a double where json holds an integer, so the line parses
    # the bytes itself, as ``record_line`` does for a record's body.
    body, text, attestation = checked
    return (None if _TWENTY_ZEROS in row[3].translate(_ZEROS) else body), text, attestation


def plain_line(row: Any) -> str | None:
    """The export's line of a row :func:`plain_body` accepts (``stored_line`` of its parts,
    without the tuple between them: this is every exported record's), or ``None`` when
    ``record_from_row`` must decide. ``ValueError`` as ``stored_line``'s."""
    checked = checked_body(row)
    if checked is None:
        return None
    body, text, attestation = checked
    long_digits = _TWENTY_ZEROS in row[3].translate(_ZEROS)  # see plain_body
    return stored_line(row[0], row[1], row[2], text, None if long_digits else body, attestation)
