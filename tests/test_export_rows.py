"""``export --all`` writes a record's line from its checked row without building the record
(``db/row_bodies.py``'s ``plain_body``, ``exportfmt/lines.py``'s ``stored_line``): it accepts
only rows ``record_from_row`` accepts, and for those writes the very line ``record_line``
writes for the record ``record_from_row`` builds. Held to it on test_read_rows.py's battery
of hostile rows and, by hypothesis, on odd bodies under honest and edited columns.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_read_rows import GOOD
from test_read_rows import _row as _battery_row
from test_read_rows import _rows as _hostile_rows

from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.db.row_bodies import plain_body, plain_line
from agentplane_journal.db.statements import record_from_row
from agentplane_journal.errors import CorruptRecordError
from agentplane_journal.exportfmt.lines import (
    record_line,
    run_block_json,
    run_line,
    stored_line,
)
from agentplane_journal.journal import export as export_mod

RUN = RunId.parse("01ARZ3NDEKTSV4RRFFQ69G5FAV")
PREV = Digest.of(b"the record before")


def _slow(row: Any) -> tuple[str, str]:
    """The reference: ``record_from_row``, then ``record_line`` of its record."""
    try:
        record = record_from_row(row)
    except CorruptRecordError as exc:
        return "refused", str(exc)
    try:
        return "line", record_line(record, read=True)
    except ValueError as exc:
        return "unparsed", str(exc)


def _fast(row: Any) -> tuple[str, str] | None:
    """``plain_body`` then ``stored_line``; ``None`` where ``plain_body`` has a doubt. And
    ``plain_line`` (the export's own pass, the two fused) says exactly the same."""
    try:
        fused: tuple[str, str] | None = None
        line = plain_line(row)
        if line is not None:
            fused = ("line", line)
    except ValueError as exc:
        fused = ("unparsed", str(exc))
    plain = plain_body(row)
    if plain is None:
        assert fused is None
        return None
    body, text, attestation = plain
    try:
        out = "line", stored_line(row[0], row[1], row[2], text, body, attestation)
    except ValueError as exc:
        out = "unparsed", str(exc)
    assert fused == out
    return out


def _agrees(row: Any) -> bool:
    """Whether the fast path took ``row`` (it must then agree with the reference)."""
    fast = _fast(row)
    if fast is not None:
        assert fast == _slow(row), row[3]
    return fast is not None


@pytest.mark.parametrize("index", range(len(_hostile_rows())))
def test_the_export_row_pass_accepts_no_hostile_row_and_writes_the_reference_line(
    index: int,
) -> None:
    row = _hostile_rows()[index]
    took = _agrees(row)
    if took:
        assert _slow(row)[0] != "refused"


def test_good_rows_take_the_export_row_pass() -> None:
    assert _agrees(_battery_row(GOOD))  # the battery's good row (a case, a step, a key)
    row = _honest({"text": "hello", "n": 1.5, "deep": {"b": [1, 2], "a": None}})
    assert _agrees(row)
    signed = (*row[:4], "key-1", b"\x01\x02", *row[6:])
    assert _agrees(signed) and '"attestation":{"key_id":"key-1"' in (_fast(signed) or ("", ""))[1]


@pytest.mark.parametrize("value", [2**64 - 1, 2**64, 10**19, 10**20, -(2**64), [2**70], 1e20])
def test_a_body_with_a_long_integer_gets_the_reference_line(value: Any) -> None:
    """An integer of 20 digits is a double to the read (its writer held one): the pass must
    not write it as the integer ``json`` parsed."""
    _agrees(_honest({"a": value}))


def _honest(members: dict[str, Any], spaced: bool = False, **columns: Any) -> tuple[Any, ...]:
    """A row whose hash covers its bytes and whose columns say what its body says, unless
    ``columns`` edit them; ``spaced``: bytes as ``json.dumps`` spaces them (a hostile row's)."""
    body = {**members, "seq": 3, "run": RUN.ulid, "kind": "Note", "epoch": 1, "v": 4}
    if spaced:
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    else:
        raw = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8", "surrogatepass"
        )
    raw = columns.pop("raw", raw)
    prev = bytes(PREV)
    hash_ = hashlib.sha256(prev + raw).digest()
    row = {
        "seq": 3,
        "prev": prev,
        "hash": hash_,
        "raw": raw,
        "key_id": None,
        "signature": None,
        "run_id": str(RUN),
        "epoch": 1,
        "kind": "Note",
        "effect_key": None,
        "case_id": None,
    }
    row.update(columns)
    return tuple(row.values())


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.integers(min_value=2**63, max_value=2**70)  # 19 to 22 digits: where readers differ
    | st.floats(allow_nan=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)

_EDITS = st.sampled_from(
    [
        {},
        {},
        {"seq": 4},
        {"seq": "3"},
        {"epoch": 2},
        {"kind": "Other"},
        {"run_id": "run_" + RunId.parse("01BX5ZZKBKACTAV9WEVGEMMVRZ").ulid},
        {"key_id": "k"},
        {"signature": b"s"},
        {"key_id": "k", "signature": bytearray(b"s")},
        {"prev": bytes(31)},
        {"hash": bytes(32)},
        {"effect_key": "00" * 32},
        {"case_id": "case_" + RUN.ulid},
        {"raw": b'{"seq":3}'},
        {"raw": b"\xff"},
    ]
)


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["text", "a", "step", "phase", "case", "effect_key", "input"]), _json
    ),
    st.booleans(),
    _EDITS,
)
def test_any_row_the_export_pass_takes_gets_the_reference_line(
    members: dict[str, Any], spaced: bool, edit: dict[str, Any]
) -> None:
    raw = json.dumps(members, allow_nan=True)
    if "Infinity" in raw:
        return  # not JSON: no store holds it
    _agrees(_honest(members, spaced, **edit))


def _parsed_run(value: object) -> RunId | None:
    """The reference: the stored text is a run id's when parsing it gives it back."""
    if not isinstance(value, str):
        return None
    try:
        run = RunId.parse(value)
    except ValueError:
        return None
    return run if str(run) == value else None


_ULID_CHARS = "0123456789ABCDEFGHJKMNPQRSTVWXYZabcdefghjkmnpqrstvwxyzILOU_-"


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(
        st.builds(
            lambda head, ulid: head + ulid,
            st.sampled_from(["run_", "RUN_", "Run_", "", "run", "run__", "case_"]),
            st.text(alphabet=_ULID_CHARS, min_size=24, max_size=28)
            | st.from_regex(r"[0-9][0-9A-HJKMNP-TV-Z]{25}", fullmatch=True)
            | st.from_regex(r"[0-7][0-9A-Za-z]{25}", fullmatch=True),
        ),
        st.text(max_size=40),
        st.sampled_from([None, 1, b"run_01ARZ3NDEKTSV4RRFFQ69G5FAV", str(RUN), RUN.ulid]),
    )
)
def test_a_stored_run_id_is_named_as_parsing_it_would(value: Any) -> None:
    got = export_mod._canonical(value)
    want = _parsed_run(value)
    assert got == want and (got is None or str(got) == value)


@pytest.mark.parametrize(
    ("index", "seal"), [(None, None), (0, Digest.ZERO), (12345, PREV), (7, None), (None, PREV)]
)
def test_a_run_block_is_its_json_as_serde_writes_it(index: Any, seal: Any) -> None:
    line = run_line(RUN, index, seal)
    block = run_block_json(RUN, index, seal)
    assert line == json.dumps(block, separators=(",", ":"), ensure_ascii=False)
    assert list(json.loads(line)) == list(block)
