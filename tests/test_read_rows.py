"""The read path's one-pass row check agrees with the check-by-check reference on every row.

``statements.record_from_row`` first tries ``_plain_record`` (all checks fused into one pass,
answering only "yes, this record" or "not sure"), and falls back to ``_checked_record``
(each check on its own, with its own error). The promise: the fused pass never accepts a row
the reference refuses, builds the same record when it accepts, and so every hostile row gets
the verdict and message it always had. Here both run on a battery of hostile rows, each with
a valid hash (whoever can write the table can compute one) unless the hash is the point.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from typing import Any

import pytest

from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import CaseId, Digest, EffectKey, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.db.statements import (
    _checked_record,
    _plain_record,
    record_from_row,
    records_from_rows,
)
from agentplane_journal.errors import CorruptRecordError

RUN = RunId.parse("01ARZ3NDEKTSV4RRFFQ69G5FAV")
OTHER = RunId.parse("01BX5ZZKBKACTAV9WEVGEMMVRZ")
CASE = CaseId.parse("01BX5ZZKBKACTAV9WEVGEMMVRZ")
KEY = EffectKey(bytes(range(32)))
PREV = Digest.of(b"the record before")


def _body(**changes: Any) -> dict[str, Any]:
    body = Append(RUN, "EffectStarted", {"text": "hello"}, case=CASE, step=3, effect_key=KEY).body(
        7, 2
    )
    for name, value in changes.items():
        if value is _DROP:
            body.pop(name, None)
        else:
            body[name] = value
    return body


_DROP: Any = object()


def _row(raw: bytes, /, **columns: Any) -> tuple[Any, ...]:
    """A RECORD_COLUMNS row of ``raw`` chained to PREV with a valid hash, columns from its body."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        body = {}
    body = body if isinstance(body, dict) else {}
    case = body.get("case")
    values = {
        "seq": body.get("seq", 7),
        "prev": bytes(PREV),
        "hash": bytes(Digest.chain(PREV, raw)),
        "raw": raw,
        "key_id": None,
        "signature": None,
        "run_id": "run_" + str(body.get("run", RUN.ulid)),
        "epoch": body.get("epoch", 2),
        "kind": body.get("kind", "EffectStarted"),
        "effect_key": body.get("effect_key"),
        "case_id": None if case is None else f"case_{case}",
    }
    values.update(columns)
    return tuple(values.values())


def _canon(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


GOOD = _canon(_body())

HOSTILE_BODIES: list[bytes] = [
    _canon(_body(seq=True)),
    _canon(_body(seq=7.0)),
    _canon(_body(seq=0)),
    _canon(_body(seq=2**63)),
    _canon(_body(seq="7")),
    _canon(_body(seq=_DROP)),
    _canon(_body(run=RUN.ulid.lower())),
    _canon(_body(run="run_" + RUN.ulid)),
    _canon(_body(run=None)),
    _canon(_body(run=7)),
    _canon(_body(run=_DROP)),
    _canon(_body(kind="")),
    _canon(_body(kind=None)),
    _canon(_body(kind=["EffectStarted"])),
    _canon(_body(epoch=True)),
    _canon(_body(epoch=-1)),
    _canon(_body(epoch=2.0)),
    _canon(_body(epoch=_DROP)),
    _canon(_body(v=65536)),
    _canon(_body(v=False)),
    _canon(_body(v=_DROP)),
    _canon(_body(case=None)),
    _canon(_body(case=CASE.ulid.lower())),
    _canon(_body(case=7)),
    _canon(_body(case=_DROP)),
    _canon(_body(effect_key=KEY.hex().upper())),
    _canon(_body(effect_key=None)),
    _canon(_body(effect_key=KEY.hex()[:-1])),
    _canon(_body(effect_key=_DROP)),
    _canon(_body(step=True)),
    _canon(_body(step=-1)),
    _canon(_body(step=2**32)),
    _canon(_body(step=3.0)),
    _canon(_body(step=None)),
    _canon(_body(step=_DROP)),
    _canon(_body(phase="sideways")),
    _canon(_body(phase=["forward"])),
    _canon(_body(phase=None)),
    _canon(_body(phase="compensating")),
    _canon(_body(phase="forward")),
    # the case member escaped (hidden from case_history's byte scan), the body otherwise good
    GOOD.replace(
        CASE.ulid.encode(),
        CASE.ulid[:-1].encode() + b"\\u00" + CASE.ulid[-1].encode().hex().encode(),
    ),
    # nesting: at the bound, one past it, far past it (the decoder's own limit)
    _canon(_body(deep=json.loads("[" * 127 + "]" * 127))),
    _canon(_body(deep=json.loads("[" * 128 + "]" * 128))),
    _canon(_body(deep=json.loads("[" * 200 + "]" * 200))),
    GOOD[:-1] + b',"deep":' + b"[" * 5000 + b"]" * 5000 + b"}",
    _canon(_body(brackets="[" * 300)),
    # not one canonical JSON object
    b" " + GOOD,
    GOOD + b" ",
    GOOD + b"{}",
    GOOD[:-1],
    b"[" + GOOD + b"]",
    b"7",
    b"",
    b"null",
    GOOD[:-1] + b',"x":NaN}',
    GOOD[:-1] + b',"x":Infinity}',
    GOOD[:-1] + b',"x":"\\ud800"}',
    GOOD[:-1] + b',"x":"\xff"}',
    GOOD[:-1] + b',"seq":8}',  # a duplicate member: the last one wins, in both
    GOOD[:-1] + b',"x":1e400}',
    GOOD[:-1] + b',"x":' + b"9" * 5000 + b"}",
]

ALT = Digest.of(b"another").__bytes__()

HOSTILE_COLUMNS: list[dict[str, Any]] = [
    {"seq": 8},
    {"seq": True},
    {"seq": 7.0},
    {"seq": "7"},
    {"seq": None},
    {"prev": ALT},
    {"prev": bytes(PREV)[:31]},
    {"prev": bytearray(bytes(PREV))},
    {"prev": memoryview(bytes(PREV))},
    {"prev": bytes(PREV).hex()},
    {"prev": None},
    {"hash": ALT},
    {"hash": None},
    {"hash": bytearray(32)},
    {"hash": b"\x00" * 33},
    {"raw": GOOD.decode()},
    {"raw": bytearray(GOOD)},
    {"raw": memoryview(GOOD)},
    {"raw": None},
    {"key_id": "k"},
    {"signature": b"s"},
    {"key_id": "k", "signature": b"s"},
    {"key_id": "k", "signature": bytearray(b"s")},
    {"key_id": "k", "signature": "s"},
    {"key_id": b"k", "signature": b"s"},
    {"key_id": 7, "signature": b"s"},
    {"run_id": str(OTHER)},
    {"run_id": "run_" + RUN.ulid.lower()},
    {"run_id": RUN.ulid},
    {"run_id": str(RUN).encode()},
    {"run_id": None},
    {"epoch": 3},
    {"epoch": True},
    {"epoch": 2.0},
    {"epoch": "2"},
    {"epoch": None},
    {"kind": "Note"},
    {"kind": b"EffectStarted"},
    {"kind": None},
    {"effect_key": None},
    {"effect_key": KEY.hex().upper()},
    {"effect_key": KEY.hex().encode()},
    {"case_id": None},
    {"case_id": CASE.ulid},
    {"case_id": str(CASE).lower()},
    {"case_id": str(OTHER)},
]


def _verdict(fn: Callable[[], Record]) -> tuple[str, Any]:
    try:
        record = fn()
    except CorruptRecordError as error:
        return ("refused", (error.seq, str(error)))
    return ("read", (record, record.body, record.prev_hash, record.hash, record.attestation))


def _rows() -> list[tuple[Any, ...]]:
    rows = [_row(raw) for raw in HOSTILE_BODIES]
    rows += [_row(GOOD, **columns) for columns in HOSTILE_COLUMNS]
    # the hostile bodies again, under columns that agree with the good body (not their own)
    good = _row(GOOD)
    columns = {"seq": good[0], "run_id": good[6], "epoch": good[7], "kind": good[8]}
    columns |= {"effect_key": good[9], "case_id": good[10]}
    rows += [_row(raw, **columns) for raw in HOSTILE_BODIES]
    return rows


@pytest.mark.parametrize("index", range(len(_rows())))
def test_the_fused_check_accepts_only_what_the_reference_accepts(index: int) -> None:
    row = _rows()[index]
    record_from_row(_row(GOOD))  # a good row of RUN first: the fused check's run memo is warm
    reference = _verdict(lambda: _checked_record(row))
    assert _verdict(lambda: record_from_row(row)) == reference
    assert _verdict(lambda: records_from_rows([_row(GOOD), row])[1]) == reference
    plain = _plain_record(row, None)
    if plain is not None:
        assert reference[0] == "read"
        assert _verdict(lambda: plain) == reference


def test_the_good_rows_take_the_fused_path_and_read_as_written() -> None:
    record = _plain_record(_row(GOOD), None)
    assert record is not None and record == _checked_record(_row(GOOD))
    assert (record.seq, record.run, record.case, record.effect_key) == (7, RUN, CASE, KEY)
    signed = _plain_record(_row(GOOD, key_id="k", signature=b"s"), None)
    assert signed is not None and signed.attestation is not None
    assert signed.attestation.key_id == "k"


def test_a_page_chains_each_prev_hash_to_the_object_before_it_and_restores_the_collector() -> None:
    prev, rows = Digest.ZERO, []
    for seq in range(1, 4):
        record = Record.seal(Append(RUN, "Note", {"n": seq}).body(seq, 1), prev)
        rows.append(
            (
                seq,
                bytes(prev),
                bytes(record.hash),
                record.raw,
                None,
                None,
                str(RUN),
                1,
                "Note",
                None,
                None,
            )
        )
        prev = record.hash
    records = records_from_rows(rows)
    assert [r.seq for r in records] == [1, 2, 3]
    assert records[1].prev_hash is records[0].hash and records[2].prev_hash is records[1].hash
    assert gc.isenabled()
    hostile = [*rows[:2], _row(GOOD, hash=ALT)]
    with pytest.raises(CorruptRecordError):
        records_from_rows(hostile)
    assert gc.isenabled()
    gc.disable()
    try:
        records_from_rows(rows)
        assert not gc.isenabled()  # a caller's choice is left as it was
    finally:
        gc.enable()
