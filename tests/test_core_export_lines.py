"""The export's line spellings, pure: what a header, run block and trailer read back as, and
what a reader refuses to take for a checkpoint, a digest or a run id (restore and
verify-export read them through these functions, so a value taken here is acted on).

``tools/mutation.py export_lines`` runs these (with tests/test_export_bytes.py's golden
lines) against every mutant of :mod:`agentplane_journal.exportfmt.lines`.
"""

from __future__ import annotations

import json

import pytest

from agentplane_journal import AGENTPLANE_0_22, RunId
from agentplane_journal.core.ids import Digest
from agentplane_journal.core.record import Attestation, Record, stored_record
from agentplane_journal.exportfmt.lines import (
    CANON_BY_PROFILE,
    IMPLEMENTED_CANONS,
    PROFILE_BY_CANON,
    Trailer,
    attestation_json,
    canon_for_profile,
    checkpoint_json,
    digests,
    header_line,
    parse_checkpoint,
    parse_digest,
    parse_ulid_run,
    record_line,
    run_block_json,
    run_line,
    trailer_line,
)
from agentplane_journal.tlog.checkpoint import Checkpoint

ULID = "01HZY5V7Q3T8R2M6K4N9P0W1XA"
RUN = RunId.parse(ULID)
D = Digest.from_hex("ab" * 32)


def test_the_canon_of_each_wire_profile() -> None:
    assert canon_for_profile(None) == 0
    assert canon_for_profile("agentplane-0.4") == 0
    assert canon_for_profile("agentplane-0.22") == 1
    assert canon_for_profile(AGENTPLANE_0_22.name) == 1
    with pytest.raises(ValueError, match="unknown wire profile 'x'; expected one of "):
        canon_for_profile("x")
    assert CANON_BY_PROFILE == {"agentplane-0.4": 0, "agentplane-0.22": 1}
    assert PROFILE_BY_CANON == {0: "agentplane-0.4", 1: "agentplane-0.22"}
    assert IMPLEMENTED_CANONS == frozenset({0, 1})


def test_a_header_reads_back_as_its_checkpoint() -> None:
    cp = Checkpoint("example.com/log", 3, D)
    assert checkpoint_json(cp) == {"origin": "example.com/log", "size": 3, "root": "ab" * 32}
    line = header_line(cp, 1)
    assert line == (
        '{"kind":"agentplane.export","version":1,"checkpoint":{"origin":"example.com/log",'
        f'"size":3,"root":"{"ab" * 32}"}},"canon":1}}'
    )
    assert parse_checkpoint(json.loads(line)["checkpoint"]) == cp
    assert parse_checkpoint({"origin": "é", "size": 0, "root": "00" * 32}) == Checkpoint(
        "é", 0, Digest.ZERO
    )


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        "x",
        {"size": 1, "root": "ab" * 32},
        {"origin": 1, "size": 1, "root": "ab" * 32},
        {"origin": "o", "root": "ab" * 32},
        {"origin": "o", "size": "1", "root": "ab" * 32},
        {"origin": "o", "size": True, "root": "ab" * 32},
        {"origin": "o", "size": 1.0, "root": "ab" * 32},
        {"origin": "o", "size": 1},
        {"origin": "o", "size": 1, "root": "ab" * 31},
        {"origin": "", "size": 1, "root": "ab" * 32},
        {"origin": "a\nb", "size": 1, "root": "ab" * 32},
        {"origin": "o", "size": -1, "root": "ab" * 32},
        {"origin": "o", "size": 1 << 64, "root": "ab" * 32},
    ],
)
def test_anything_else_is_no_checkpoint(value: object) -> None:
    assert parse_checkpoint(value) is None


def test_run_blocks_name_their_leaf_only_with_a_position() -> None:
    assert run_line(RUN, 4, D) == (
        f'{{"kind":"agentplane.export.run","run":"{ULID}","index":4,"seal":"{"ab" * 32}"}}'
    )
    assert run_line(RUN, 0, D).endswith('"index":0,"seal":"' + "ab" * 32 + '"}')
    open_ = f'{{"kind":"agentplane.export.run","run":"{ULID}"}}'
    assert run_line(RUN, None, None) == open_
    assert run_line(RUN, 4, None) == open_
    assert run_line(RUN, None, D) == open_


def test_run_block_json_is_what_run_line_writes() -> None:
    """``run_block_json`` is the block as JSON (what a reader gets back from ``run_line``):
    ``index`` and ``seal`` only when both are known."""
    seal = "ab" * 32
    assert run_block_json(RUN, 4, D) == {
        "kind": "agentplane.export.run",
        "run": ULID,
        "index": 4,
        "seal": seal,
    }
    for index, digest in ((None, None), (4, None), (None, D)):
        assert run_block_json(RUN, index, digest) == {"kind": "agentplane.export.run", "run": ULID}
    for index, digest in ((4, D), (0, D), (None, None), (4, None), (None, D)):
        assert json.loads(run_line(RUN, index, digest)) == run_block_json(RUN, index, digest)


def test_a_position_that_is_no_int_is_written_by_the_encoder() -> None:
    """``run_line`` spells only an ``int``'s digits itself; anything else (here a bool, which
    an f-string would write as ``True``) goes through the JSON encoder, so the line stays
    JSON and says what it was given."""
    line = run_line(RUN, True, D)  # type: ignore[arg-type]
    assert line == (
        f'{{"kind":"agentplane.export.run","run":"{ULID}","index":true,"seal":"{"ab" * 32}"}}'
    )


def test_a_read_record_with_twenty_digits_is_written_the_exact_way() -> None:
    """A record the store read carries ``json``'s parse of its bytes, which ``record_line``
    may reuse, except where its bytes hold 20 digits in a row: an integer past ``u64`` is an
    ``f64`` to serde_json (``1e+20``) but an exact int to ``json``. Such a line is the one the
    exact path writes, whatever the 20 digits are."""
    for digits in ("99999999999999999999", "18446744073709551616", "12345678901234567890"):
        raw = f'{{"seq":7,"n":[1,{digits}]}}'.encode()
        rec = stored_record(json.loads(raw), raw, Digest.ZERO, D, None)
        line = record_line(rec, read=True)
        assert line == record_line(rec)
        written = json.loads(line)["body"]["n"][1]
        if int(digits) > 2**64 - 1:  # past u64: serde_json's f64
            assert type(written) is float and written == float(digits)
        else:
            assert type(written) is int and written == int(digits)
    big = b'{"seq":7,"n":99999999999999999999}'
    rec = stored_record(json.loads(big), big, Digest.ZERO, D, None)
    assert '"body":{"seq":7,"n":1e+20}' in record_line(rec, read=True)


def test_attestations_are_hex_and_none_stays_null() -> None:
    assert attestation_json(None) is None
    assert attestation_json(Attestation("k", b"\x00\xff")) == {"key_id": "k", "signature": "00ff"}


def test_a_record_line_refuses_bytes_serde_json_cannot_hold() -> None:
    raw = b'{"seq":7,"x":1e400}'
    rec = stored_record({"seq": 7}, raw, Digest.ZERO, D, None)
    with pytest.raises(ValueError, match=r"^record 7: the number 1e400 is out of range"):
        record_line(rec)
    bad = stored_record({"seq": 7}, b'{"seq":7,"x":"\xff"}', Digest.ZERO, D, None)
    with pytest.raises(ValueError):
        record_line(bad)
    good = Record.seal({"seq": 1, "run": ULID, "kind": "Note", "text": "ü"}, Digest.ZERO)
    line = json.loads(record_line(good))
    assert list(line) == ["seq", "body", "prev_hash", "hash", "attestation", "raw"]
    assert line["attestation"] is None and line["raw"] == bytes(good.raw).decode()


def test_the_trailer_spells_every_count() -> None:
    t = Trailer(1, 2, 3, 4)
    assert json.loads(trailer_line(t)) == {
        "kind": "agentplane.export.end",
        "runs_requested": 1,
        "runs_exported": 2,
        "records": 3,
        "cases": 4,
        "unreadable": [],
    }
    assert Trailer() == Trailer(0, 0, 0, 0, [])


def test_run_ids_digests_and_lists_of_them() -> None:
    assert parse_ulid_run(ULID) == RUN
    assert parse_ulid_run(f"run_{ULID}") == RUN
    for bad in (None, 1, "", "run_", ULID[:-1], [ULID]):
        assert parse_ulid_run(bad) is None
    assert parse_digest("ab" * 32) == D
    assert parse_digest("AB" * 32) == D
    for bad in (None, 1, b"ab" * 32, "ab" * 31, "ab" * 33, "zz" * 32, " " + "ab" * 31 + "a"):
        assert parse_digest(bad) is None
    assert digests(["ab" * 32, "00" * 32]) == [D, Digest.ZERO]
    assert digests([]) == []
    assert digests(["ab" * 32, "x"]) is None
    assert digests(["x", "ab" * 32]) is None
