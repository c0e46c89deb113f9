"""Integer tokens wider than 64 bits in stored bytes (core/record.py's wire decoder): read as
the doubles their writer meant, the 64-bit edges read as integers.

Written against the mutants of ``_wire_int``, ``decode_wire`` and ``Record.from_stored``'s
long-digit branch that survived tools/mutation.py record (its store-level tests, on both
dialects, are in tests/test_wire_numbers.py and tests/test_interop22.py). Pure.
"""

from __future__ import annotations

import pytest

from agentplane_journal.core.append import Append
from agentplane_journal.core.canon_v1 import canonical_bytes_v1
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record, decode_wire

RUN = RunId.parse("01ARZ3NDEKTSV4RRFFQ69G5FAV")
U64 = 2**64 - 1
I64_MIN = -(2**63)


def _read(payload: dict[str, object]) -> Record:
    body = Append(RUN, "Note", payload).body(1, 1)
    raw = canonical_bytes_v1(body, path="body")
    return Record.from_stored(raw, Digest.ZERO, Digest.chain(Digest.ZERO, raw))


@pytest.mark.parametrize("token", [str(U64), str(I64_MIN), "0", "-1", str(2**63)])
def test_a_64_bit_integer_token_reads_as_that_integer(token: str) -> None:
    value = decode_wire(token)
    assert type(value) is int and value == int(token)
    assert decode_wire(f"[{token}]") == [int(token)]


@pytest.mark.parametrize("token", [str(U64 + 1), str(I64_MIN - 1), "100000000000000000000"])
def test_a_wider_integer_token_reads_as_the_double_it_was(token: str) -> None:
    value = decode_wire(token)
    assert type(value) is float and value == float(token)


def test_a_stored_body_with_a_wider_integer_reads_it_as_a_double() -> None:
    record = _read({"x": 1e20, "n": 3})
    assert b'"x":100000000000000000000' in record.raw
    x, n = record.body["x"], record.body["n"]
    assert type(x) is float and x == 1e20 and type(n) is int and n == 3
    assert record.seq == 1 and type(record.seq) is int


def test_a_stored_body_with_u64_max_keeps_it_an_integer() -> None:
    record = _read({"x": U64})
    assert type(record.body["x"]) is int and record.body["x"] == U64
