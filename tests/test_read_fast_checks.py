"""The read path's cheap pre-checks decide nothing the full checks would decide otherwise.

Two shortcuts of ``statements._plain_record`` (issue 32, read + verify speed): a body holding
none of ``case``, ``effect_key``, ``step`` and ``phase`` under columns naming neither skips
those four checks, and the regex that sends a body with an integer of 20 digits or more to
:data:`~agentplane_journal.core.record.WIRE_DECODER` is only run where the cheaper
``may_hold_long_digits`` says it might match. Here: hostile rows of a body without the
optional members get the reference's verdict (``_checked_record``), and the cheap test says
yes wherever the regex matches a number.

And ``store.verify``'s pass over a page's rows (``db/row_chain.py``'s ``chain_rows``, no
records built): on good pages, hostile pages and every hostile row of test_read_rows.py's
battery it accepts only what building the records and feeding them to ``RunCheck`` accepts,
leaving the same head, last seq and started effects.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_read_rows import PREV as PREV_BATTERY
from test_read_rows import _rows as _hostile_rows

from agentplane_journal.core.chain import RunCheck
from agentplane_journal.core.ids import CaseId, Digest, EffectKey, RunId
from agentplane_journal.core.record import LONG_DIGITS, Record, decode_wire, may_hold_long_digits
from agentplane_journal.db.row_chain import chain_rows
from agentplane_journal.db.statements import (
    _checked_record,
    _plain_record,
    record_from_row,
    records_from_rows,
)
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
    # Below i64::MIN with 19 digits: a double to serde_json; i64::MIN itself an integer.
    for read in (record_from_row, _checked_record):
        record = read(_row(_canon({**PLAIN, "x": -(2**63) - 1})))
        assert record.body["x"] == float(-(2**63) - 1) and type(record.body["x"]) is float
        record = read(_row(_canon({**PLAIN, "x": -(2**63)})))
        assert record.body["x"] == -(2**63) and type(record.body["x"]) is int


def test_an_integer_beyond_64_bits_after_whitespace_is_a_double_too() -> None:
    """A hash-valid row need not be canonical: with whitespace before the token, serde_json
    still holds the double (the fast path and the full check both read it so)."""
    for gap in (" ", "\n ", "\t", "\r\n"):
        text = json.dumps({**PLAIN, "x": 0}, sort_keys=True, separators=(",", ":"))
        raw = text.replace('"x":0', f'"x":{gap}-{2**64}').encode()
        row = _row(raw)
        for read in (record_from_row, _checked_record):
            record = read(row)
            assert record.body["x"] == -float(2**64) and type(record.body["x"]) is float


_JSONISH = st.text(alphabet='0123456789-:[,{}"ax .e\n\t\r', max_size=80)


@given(_JSONISH)
def test_the_cheap_test_says_yes_wherever_the_regex_matches(text: str) -> None:
    if LONG_DIGITS.search(text) is not None:
        assert may_hold_long_digits(text.encode())


def test_the_cheap_test_finds_each_form_and_passes_short_numbers() -> None:
    for prefix in (":", "[", ",", ": ", ",\n\t"):
        for sign in ("", "-"):
            assert may_hold_long_digits(f'{{"x"{prefix}{sign}{"1" * 20}}}'.encode())
            assert not may_hold_long_digits(f'{{"x"{prefix}{"1" * 19}}}'.encode())
            assert may_hold_long_digits(f'{{"x"{prefix}-{"1" * 19}}}'.encode())
            assert not may_hold_long_digits(f'{{"x"{prefix}-{"1" * 18}}}'.encode())
    assert not may_hold_long_digits(b'{"x":"' + b"1" * 30 + b'"}')
    assert not may_hold_long_digits(_canon(PLAIN))


# -- store.verify's pass over a page's rows (db/row_chain.py) ----------------------------


def _chain(*bodies: dict[str, Any], start: Digest = Digest.ZERO) -> list[tuple[Any, ...]]:
    """Rows of a chain of ``bodies`` from ``start``, columns from each body."""
    rows, prev = [], start
    for body in bodies:
        record = Record.seal(body, prev)
        rows.append(_columns(record))
        prev = record.hash
    return rows


def _columns(record: Record, **changes: Any) -> tuple[Any, ...]:
    body = record.body
    values = {
        "seq": body["seq"],
        "prev": bytes(record.prev_hash),
        "hash": bytes(record.hash),
        "raw": record.raw,
        "key_id": None,
        "signature": None,
        "run_id": "run_" + body["run"],
        "epoch": body["epoch"],
        "kind": body["kind"],
        "effect_key": body.get("effect_key"),
        "case_id": None if body.get("case") is None else "case_" + body["case"],
    }
    values.update(changes)
    return tuple(values.values())


def _note(seq: int, **members: Any) -> dict[str, Any]:
    return {"epoch": 1, "kind": "Note", "run": RUN.ulid, "seq": seq, "v": 4, **members}


def _start(seq: int, key: EffectKey = KEY) -> dict[str, Any]:
    return {**_note(seq, effect_key=key.hex(), step=seq), "kind": "EffectStarted"}


def _fed(pages: list[list[tuple[Any, ...]]]) -> tuple[str, Any]:
    """The reference: every page's records built and fed to an unsigned RunCheck."""
    check = RunCheck()
    try:
        for rows in pages:
            check.feed(records_from_rows(rows))
    except CorruptRecordError as error:
        return ("refused", (error.seq, str(error)))
    return ("ok", (check.head, check.last, dict(check.started)))


def _fast(pages: list[list[tuple[Any, ...]]]) -> tuple[str, Any] | None:
    """chain_rows over the pages, as store.verify takes them; None once it has a doubt."""
    head, last, started = Digest.ZERO, 0, dict[str, int]()
    for rows in pages:
        done = chain_rows(rows, head, last, started)
        if done is None:
            return None
        head, last, fresh = done
        started = {**started, **fresh}
    return ("ok", (head, last, started))


GOOD_CHAIN = _chain(_note(1), _start(2), _note(3, case=CASE.ulid), _start(4, EffectKey(bytes(32))))
SECOND_START = _chain(_note(1), _start(2), _start(3))
ROW_PAGES: list[list[list[tuple[Any, ...]]]] = [
    [GOOD_CHAIN],
    [GOOD_CHAIN[:2], GOOD_CHAIN[2:]],
    [[], GOOD_CHAIN],
    [SECOND_START],
    [SECOND_START[:2], SECOND_START[2:]],
    [GOOD_CHAIN[1:]],  # starts at seq 2
    [GOOD_CHAIN[:1] + GOOD_CHAIN[2:]],  # a gap
    [GOOD_CHAIN[:1], GOOD_CHAIN[2:]],  # a gap between pages
    [[GOOD_CHAIN[1], GOOD_CHAIN[0], *GOOD_CHAIN[2:]]],  # reordered
    [GOOD_CHAIN[:2] + GOOD_CHAIN[1:]],  # a duplicate row
    [GOOD_CHAIN[:1] + _chain(_note(2), start=Digest.of(b"elsewhere"))],  # a broken link
    [_chain(_note(1), _note(2, run=CASE.ulid))],  # a second run's record in the page
    [[GOOD_CHAIN[0], (*GOOD_CHAIN[1][:6], "run_" + CASE.ulid, *GOOD_CHAIN[1][7:])]],
    [[GOOD_CHAIN[0], (*GOOD_CHAIN[1][:4], "k", b"s", *GOOD_CHAIN[1][6:])]],  # signed, unchecked
    [[GOOD_CHAIN[0], (*GOOD_CHAIN[1][:4], "k", None, *GOOD_CHAIN[1][6:])]],  # half an attestation
    [[GOOD_CHAIN[0], (*GOOD_CHAIN[1][:4], None, b"s", *GOOD_CHAIN[1][6:])]],
    [[GOOD_CHAIN[0], (*GOOD_CHAIN[1][:9], None, *GOOD_CHAIN[1][10:])]],  # effect_key column cleared
    [[GOOD_CHAIN[0], (*GOOD_CHAIN[1][:8], "Note", *GOOD_CHAIN[1][9:])]],  # kind column edited
    [[(*GOOD_CHAIN[0][:3], GOOD_CHAIN[0][3] + b" ", *GOOD_CHAIN[0][4:])]],  # bytes edited
    [_chain(_note(1, x=1e20))],  # stored as 21 digits: read as a double, by the full checks
    [_chain({**_note(1), "epoch": 1e20})],
    [_chain(_note(1, step=2**64 - 1))],
    [_chain(_note(2))],  # a first page that starts at seq 2, linked to nothing before
    [_chain(_note(1), _note(3))],  # linked, but a seq skipped
    [_chain(_note(1), _note(1))],  # linked, but a seq repeated
]


@pytest.mark.parametrize("index", range(len(ROW_PAGES)))
def test_verifys_row_pass_agrees_with_feeding_the_built_records(index: int) -> None:
    pages = ROW_PAGES[index]
    reference = _fed(pages)
    fast = _fast(pages)
    assert fast is None or fast == reference
    if index <= 2:  # the good chain, however paged, takes the row pass
        assert fast == reference and reference[0] == "ok"


@pytest.mark.parametrize("index", range(len(_hostile_rows())))
def test_verifys_row_pass_accepts_no_hostile_row_the_full_checks_refuse(index: int) -> None:
    row = _hostile_rows()[index]
    check = RunCheck()
    check.head, check.last = PREV_BATTERY, row[0] - 1 if type(row[0]) is int else 0
    done = chain_rows([row], check.head, check.last, {})
    if done is not None:
        record = record_from_row(row)  # accepted: the full checks accept it too, same head
        check.feed([record])
        assert (done[0], done[1]) == (check.head, check.last)


def test_a_signed_check_takes_no_row_pass() -> None:
    class Nobody:
        def verify(self, key_id: str, message: bytes, signature: bytes) -> bool:
            return False

    check = RunCheck(Nobody())
    assert check.signed
    with pytest.raises(ValueError, match="needs the records"):
        check.advance(Digest.ZERO, 0, {})


def test_an_advanced_check_carries_the_pages_head_seq_and_starts_on() -> None:
    rows = _chain(_note(1), _start(2))
    check = RunCheck()
    assert not check.signed
    done = chain_rows(rows, check.head, check.last, check.started)
    assert done is not None
    check.advance(*done)
    reference = RunCheck()
    reference.feed(records_from_rows(rows))
    assert (check.head, check.last, check.started) == (
        reference.head,
        reference.last,
        reference.started,
    )
    assert check.started == {KEY.hex(): 2}
    again = records_from_rows(_chain(_start(3), start=check.head))
    with pytest.raises(CorruptRecordError, match="the first is seq 2"):
        check.feed(again)  # the start the row pass saw is remembered
    assert check.finish() == reference.finish()


def test_the_wire_decoder_keeps_every_64_bit_integer_and_reads_wider_ones_as_doubles() -> None:
    body = decode_wire(f"[{-(2**63)}, {2**64 - 1}, {2**64}, {-(2**63) - 1}, 1]")
    assert body == [-(2**63), 2**64 - 1, float(2**64), float(-(2**63) - 1), 1]
    assert [type(x) for x in body] == [int, int, float, float, int]
    raw = _canon({**PLAIN, "a": -(2**63), "b": 1e20})  # the 21-digit b sends it to the wire decoder
    record = record_from_row(_row(raw))
    assert type(record.body["a"]) is int and type(record.body["b"]) is float
