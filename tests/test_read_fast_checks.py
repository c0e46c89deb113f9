"""The read path's cheap pre-checks decide nothing the full checks would decide otherwise.

Two shortcuts of ``statements._plain_record`` (issue 32, read + verify speed): a body holding
none of ``case``, ``effect_key``, ``step`` and ``phase`` under columns naming neither skips
those four checks, and the regex that sends a body with an integer of 20 digits or more to
:data:`~agentplane_journal.core.record.WIRE_DECODER` is only run where the cheaper
``may_hold_long_digits`` says it might match. Here: hostile rows of a body without the
optional members get the reference's verdict (``_checked_record``), and the cheap test says
yes wherever the regex matches a number.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentplane_journal.core.ids import CaseId, Digest, EffectKey, RunId
from agentplane_journal.core.record import LONG_DIGITS, Record, may_hold_long_digits
from agentplane_journal.db.statements import _checked_record, _plain_record, record_from_row
from agentplane_journal.errors import CorruptRecordError

RUN = RunId.parse("01ARZ3NDEKTSV4RRFFQ69G5FAV")
CASE = CaseId.parse("01BX5ZZKBKACTAV9WEVGEMMVRZ")
KEY = EffectKey(bytes(range(32, 64)))
PREV = Digest.of(b"the record before")
PLAIN = {"epoch": 2, "kind": "Note", "run": RUN.ulid, "seq": 7, "text": "hello", "v": 4}


def _canon(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _row(raw: bytes, case_id: Any = None, effect_key: Any = None) -> tuple[Any, ...]:
    hash_ = bytes(Digest.chain(PREV, raw))
    return (7, bytes(PREV), hash_, raw, None, None, str(RUN), 2, "Note", effect_key, case_id)


def _verdict(row: Any, fn: Any) -> tuple[str, Any]:
    try:
        record: Record = fn(row)
    except CorruptRecordError as error:
        return ("refused", (error.seq, str(error)))
    return ("read", (record, record.body, record.prev_hash, record.hash))


ROWS = [
    _row(_canon(PLAIN)),
    _row(_canon(PLAIN), case_id=str(CASE)),
    _row(_canon(PLAIN), effect_key=KEY.hex()),
    _row(_canon(PLAIN), case_id=""),
    _row(_canon(PLAIN), effect_key=b""),
    _row(_canon({**PLAIN, "case": CASE.ulid})),
    _row(_canon({**PLAIN, "case": CASE.ulid}), case_id=str(CASE)),
    _row(_canon({**PLAIN, "case": None})),
    _row(_canon({**PLAIN, "effect_key": KEY.hex()})),
    _row(_canon({**PLAIN, "effect_key": KEY.hex()}), effect_key=KEY.hex()),
    _row(_canon({**PLAIN, "effect_key": None})),
    _row(_canon({**PLAIN, "step": -1})),
    _row(_canon({**PLAIN, "step": 3})),
    _row(_canon({**PLAIN, "step": None})),
    _row(_canon({**PLAIN, "phase": "sideways"})),
    _row(_canon({**PLAIN, "phase": "compensating"})),
    _row(_canon({**PLAIN, "phase": None})),
    # integers of 20 digits and more, read as the doubles their writer held
    _row(_canon({**PLAIN, "x": 2**64})),
    _row(_canon({**PLAIN, "x": -(2**64)})),
    _row(_canon({**PLAIN, "x": [2**70]})),
    _row(_canon({**PLAIN, "x": 2**64 - 1})),
    _row(_canon({**PLAIN, "x": "12345678901234567890"})),
    _row(_canon({**PLAIN, "x": ":12345678901234567890"})),
]


def test_plain_bodies_get_the_references_verdict_on_every_row() -> None:
    for row in ROWS:
        reference = _verdict(row, _checked_record)
        assert _verdict(row, record_from_row) == reference, row[3]
        plain = _plain_record(row, None)
        if plain is not None:
            assert reference[0] == "read" and _verdict(plain, lambda record: record) == reference


def test_a_plain_body_takes_the_fused_path_and_columns_it_does_not_name_are_refused() -> None:
    assert _plain_record(ROWS[0], None) is not None
    for row in ROWS[1:5]:
        assert _plain_record(row, None) is None
        assert _verdict(row, record_from_row)[0] == "refused"


def test_an_integer_beyond_64_bits_is_read_as_the_double_its_writer_held() -> None:
    record = record_from_row(_row(_canon({**PLAIN, "x": 2**64})))
    assert record.body["x"] == float(2**64) and type(record.body["x"]) is float
    record = record_from_row(_row(_canon({**PLAIN, "x": -(2**64)})))
    assert type(record.body["x"]) is float
    record = record_from_row(_row(_canon({**PLAIN, "x": 2**64 - 1})))
    assert record.body["x"] == 2**64 - 1 and type(record.body["x"]) is int


_JSONISH = st.text(alphabet='0123456789-:[,{}"ax .e', max_size=80)


@given(_JSONISH)
def test_the_cheap_test_says_yes_wherever_the_regex_matches(text: str) -> None:
    if LONG_DIGITS.search(text) is not None:
        assert may_hold_long_digits(text.encode())


def test_the_cheap_test_finds_each_form_and_passes_short_numbers() -> None:
    for prefix in (":", "[", ","):
        for sign in ("", "-"):
            assert may_hold_long_digits(f'{{"x"{prefix}{sign}{"1" * 20}}}'.encode())
            assert not may_hold_long_digits(f'{{"x"{prefix}{sign}{"1" * 19}}}'.encode())
    assert not may_hold_long_digits(b'{"x":"' + b"1" * 30 + b'"}')
    assert not may_hold_long_digits(_canon(PLAIN))
