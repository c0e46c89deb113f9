"""The journal's rows read back as records: every row leaves the database through
:func:`record_from_row`, which re-hashes it and refuses any row that lies (a column that says
other than the hashed body, a value of the wrong type), and the typed readers of single
columns (:func:`digest`, :func:`stored_int`, :func:`stored_text`, :func:`stored_run`).

The rows are :data:`agentplane_journal.db.statements.RECORD_COLUMNS`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any, Literal, overload

from agentplane_journal.core.canon import MAX_DEPTH
from agentplane_journal.core.checks import MAX_I64 as _I64_MAX
from agentplane_journal.core.checks import MAX_U16 as _U16_MAX
from agentplane_journal.core.checks import MAX_U32 as _U32_MAX
from agentplane_journal.core.ids import PHASES, Digest, RunId
from agentplane_journal.core.record import (
    JSON_DECODER,
    LONG_DIGITS_DROP,
    LONG_DIGITS_MARK,
    LONG_DIGITS_TABLE,
    LONG_NEGATIVE_MARK,
    LOWER_HEX64,
    Attestation,
    Record,
    is_canonical_ulid,
    stored_attestation,
)
from agentplane_journal.errors import CorruptRecordError

__all__ = [
    "digest",
    "record_from_row",
    "records_from_rows",
    "stored_int",
    "stored_run",
    "stored_text",
]


_trusted_digest = Digest._trusted


def digest(value: object, seq: int) -> Digest:
    """A hash column as a :class:`Digest`; a column that is not 32 bytes is corrupt."""
    if type(value) is not bytes:
        if not isinstance(value, bytearray | memoryview):
            raise CorruptRecordError(seq, f"a hash column holds {_what(value)}, not 32 bytes")
        value = bytes(value)
    if len(value) != 32:
        raise CorruptRecordError(seq, f"a hash column holds {len(value)} bytes, not 32 bytes")
    return Digest._trusted(value)  # length checked just above; this is the read path


def _what(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "text"
    return type(value).__name__


def stored_int(value: object, seq: int, column: str) -> int:
    """An integer column's value; on SQLite a column can hold text, which is corrupt."""
    if type(value) is not int:
        raise CorruptRecordError(seq, f"the {column} column holds {_what(value)}, not an integer")
    return value


@overload
def stored_text(
    value: object, seq: int, column: str, *, nullable: Literal[False] = False
) -> str: ...
@overload
def stored_text(value: object, seq: int, column: str, *, nullable: bool) -> str | None: ...
def stored_text(value: object, seq: int, column: str, *, nullable: bool = False) -> str | None:
    """A text column's value; on SQLite a column can hold a BLOB or a number, which is corrupt."""
    if value is None and nullable:
        return None
    if type(value) is not str:
        raise CorruptRecordError(seq, f"the {column} column holds {_what(value)}, not text")
    return value


def stored_run(value: object, column: str = "run_id") -> RunId:
    """A stored run id column as a :class:`RunId`; anything but its canonical text is corrupt."""
    if type(value) is str:
        try:
            run = RunId.parse(value)
        except ValueError:
            pass
        else:
            if str(run) == value:
                return run
    raise CorruptRecordError(0, f"the {column} column holds {_short(value)}, not a run id")


def _stored_bytes(value: object, seq: int, column: str) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise CorruptRecordError(seq, f"the {column} column holds {_what(value)}, not bytes")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _mismatch(seq: int, column: str, stored: object, body: object) -> CorruptRecordError:
    return CorruptRecordError(
        seq,
        f"the {column} column says {_short(stored)}, the hashed body says {_short(body)}: "
        "the row was edited after it was written",
    )


def record_from_row(row: Any, prev: Digest | None = None) -> Record:
    """A :data:`RECORD_COLUMNS` row as a :class:`Record`, refusing any row that lies.

    The hash must cover the bytes, the body must be a well-formed record, and every
    column that repeats a body member (``seq``, ``run_id``, ``epoch``, ``kind``,
    ``effect_key``, ``case_id``) must say what the body says: the store acts on those
    columns (the exactly-once index, ``case_history``), and no hash covers them. Anything
    else is :class:`CorruptRecordError` naming the seq and the column, never a driver's or
    Python's own exception.

    ``prev``, the preceding record's hash, is only reused as this record's ``prev_hash``
    object when the bytes are equal (a chain's links are its predecessors' hashes), which
    saves building a second :class:`Digest`; it vouches for nothing.
    """
    return _plain_record(row, prev) or _checked_record(row)


def records_from_rows(rows: Iterable[Any]) -> list[Record]:
    """:func:`record_from_row` of each row, in order: a page of a run.

    The cyclic garbage collector is left alone: pausing it for the loop saved up to a third
    of decoding a long run, but ``gc`` is process-wide, so a host's other threads would feel
    the pause. The records hold no reference cycles; a collection only costs time.
    """
    out: list[Record] = []
    append = out.append
    prev = None
    for row in rows:
        record = _plain_record(row, prev) or _checked_record(row)
        append(record)
        prev = record.hash
    return out


_ABSENT: Any = object()
#: The shortest body that can nest deeper than ``Record.from_stored`` allows.
_DEEP_BYTES = 2 * (MAX_DEPTH + 2)
#: The last ``(run_id column, body run member)`` pair found canonical and equal.
_known_run: tuple[Any, Any] = (_ABSENT, _ABSENT)
_sha256 = hashlib.sha256
# What raw_decode calls, without its Python frame. JSONDecoder.__init__ sets scan_once;
# typeshed's JSONDecoder does not declare it.
_scan: Callable[[str, int], tuple[Any, int]] = JSON_DECODER.scan_once  # type: ignore[attr-defined]
_as_zeros = LONG_DIGITS_TABLE  # may_hold_long_digits, inlined
_long_zeros = LONG_DIGITS_MARK
_long_drop = LONG_DIGITS_DROP
_long_negative = LONG_NEGATIVE_MARK
_new_digest = object.__new__
_set_digest = Digest.__mro__[1].__dict__["_bytes"].__set__  # the slot Digest._trusted sets
# Record's slots, set as core/record.py's stored_record sets them (inlined below).
_new_record = object.__new__
_set_body = Record.__dict__["body"].__set__
_set_raw = Record.__dict__["raw"].__set__
_set_prev = Record.__dict__["prev_hash"].__set__
_set_hash = Record.__dict__["hash"].__set__
_set_attestation = Record.__dict__["attestation"].__set__


def checked_body(row: Any) -> tuple[dict[str, Any], str, Attestation | None] | None:
    """``(body, text, attestation)`` of a :data:`RECORD_COLUMNS` row every check accepts but
    one, or ``None`` when :func:`_checked_record` must decide (and name what is wrong).

    Every read's inner loop, and export's (``db/row_bodies.py``): the same checks as
    :func:`_checked_record` and :meth:`Record.from_stored` with
    :func:`~agentplane_journal.core.record.check_envelope` (hash over ``prev || raw``, UTF-8,
    one JSON object of the whole text, the envelope members' types, ranges and canonical
    forms, the ``case`` member written out, the nesting bound, every column against its body
    member), fused into one pass with one dict lookup per member. It only ever says yes to a
    row those accept; any doubt (a type, a length, a mismatch, an exception) returns
    ``None``, so a hostile row gets exactly the verdict and message it always had.

    The one check left to the caller: integers of 20 digits and more, which
    ``Record.from_stored`` reads as doubles where ``body`` holds ints (each envelope member's
    verdict is the same either way, every such integer being beyond its range). A read
    sends such a row to the full check (:func:`_plain_record`); an export parses its bytes
    again under serde_json's rules.
    """
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
    get = body.get
    member = get("seq")
    if type(member) is not int or member != seq or not 1 <= seq <= _I64_MAX:
        return None
    member = get("run")
    known = _known_run  # read once: the pair another thread may replace is checked whole
    if member != known[1] or run_id != known[0]:
        if type(member) is not str or run_id != "run_" + member or not is_canonical_ulid(member):
            return None
        _known_run = (run_id, member)  # a run's records all repeat it: check it once
    member = get("kind")
    if type(member) is not str or not member or member != kind:
        return None
    member = get("epoch")
    if type(member) is not int or member != epoch or not 0 <= epoch <= _I64_MAX:
        return None
    member = get("v")
    if type(member) is not int or not 0 <= member <= _U16_MAX:
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
    # Nesting deeper than MAX_DEPTH + 1 takes that many opening and closing brackets, so
    # a shorter body cannot be too deep; a longer one with many brackets is measured there.
    if len(raw) >= _DEEP_BYTES and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        return None
    return body, text, attestation


def _plain_record(row: Any, prev: Digest | None) -> Record | None:
    """The record of a row every check accepts (:func:`checked_body`, and no integer of 20
    digits or more, which ``Record.from_stored`` reads as a double), or ``None`` when
    :func:`_checked_record` must decide. It builds the record ``Record.from_stored`` would."""
    checked = checked_body(row)
    if checked is None:
        return None
    raw = row[3]
    marked = raw.translate(_as_zeros, _long_drop)  # may_hold_long_digits, inlined
    if _long_zeros in marked or _long_negative in marked:
        return None
    prev_b = row[1]
    if prev is None or prev_b != prev._bytes:
        prev = _new_digest(Digest)
        _set_digest(prev, prev_b)
    hash_ = _new_digest(Digest)
    _set_digest(hash_, row[2])
    record = _new_record(Record)  # stored_record, inlined (every row of every read)
    _set_body(record, checked[0])
    _set_raw(record, raw)
    _set_prev(record, prev)
    _set_hash(record, hash_)
    _set_attestation(record, checked[2])
    return record


def _optional_members(raw: bytes, body: dict[str, Any], case_id: Any, effect_key: Any) -> bool:
    """:func:`_plain_record`'s checks of ``case``, ``effect_key``, ``step`` and ``phase``
    (a body names one of them, or a column does): whether they all pass."""
    get = body.get
    member = get("case", _ABSENT)
    if member is _ABSENT:
        if case_id is not None:
            return False
    elif (
        type(member) is not str
        or case_id != "case_" + member
        or not is_canonical_ulid(member)
        or member.encode() not in raw
    ):
        return False
    member = get("effect_key", _ABSENT)
    if member is _ABSENT:
        if effect_key is not None:
            return False
    elif type(member) is not str or member != effect_key or not LOWER_HEX64.fullmatch(member):
        return False
    member = get("step", _ABSENT)
    if member is not _ABSENT and (type(member) is not int or not 0 <= member <= _U32_MAX):
        return False
    member = get("phase", _ABSENT)
    return member is _ABSENT or member in PHASES


def _checked_record(row: Any) -> Record:
    """Every check of :func:`record_from_row`, one by one, each with its own error.

    The reference: :func:`_plain_record` accepts a subset of what this accepts (and builds
    the same record); everything else comes here for its verdict and its message.
    """
    seq, prev, hash_, raw, key_id, signature, run_id, epoch, kind, effect_key, case_id = row
    if type(seq) is not int:
        raise CorruptRecordError(0, f"the seq column holds {_what(seq)}, not an integer")
    if key_id is not None and type(key_id) is not str:
        raise CorruptRecordError(seq, f"the key_id column holds {_what(key_id)}, not text")
    if (key_id is None) != (signature is None):
        raise CorruptRecordError(
            seq, "only one of key_id and signature is set: a half-written attestation"
        )
    attestation = (
        None if key_id is None else Attestation(key_id, _stored_bytes(signature, seq, "signature"))
    )
    if type(prev) is bytes and type(hash_) is bytes and len(prev) == len(hash_) == 32:
        # The common case, without two calls per row (this is every read's inner loop).
        prev_digest, hash_digest = _trusted_digest(prev), _trusted_digest(hash_)
    else:
        prev_digest, hash_digest = digest(prev, seq), digest(hash_, seq)
    record = Record.from_stored(
        raw if type(raw) is bytes else _stored_bytes(raw, seq, "raw"),
        prev_digest,
        hash_digest,
        attestation,
        seq=seq,
    )
    body = record.body
    if body["seq"] != seq:
        raise _mismatch(seq, "seq", seq, body["seq"])
    if run_id != "run_" + body["run"]:
        raise _mismatch(seq, "run_id", run_id, "run_" + body["run"])
    if epoch != body["epoch"] or type(epoch) is not int:
        raise _mismatch(seq, "epoch", epoch, body["epoch"])
    if kind != body["kind"]:
        raise _mismatch(seq, "kind", kind, body["kind"])
    if effect_key != body.get("effect_key"):
        raise _mismatch(seq, "effect_key", effect_key, body.get("effect_key"))
    case = body.get("case")
    if case_id != (None if case is None else "case_" + case):
        raise _mismatch(seq, "case_id", case_id, None if case is None else "case_" + case)
    return record
