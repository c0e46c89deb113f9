"""Export verification, pure: every tamper the verifier promises to catch, and every honest
shape it must not call tampered, on files built in memory with the package's own writers.

No database: the runs are sealed with :meth:`Record.seal` (the agentplane-0.22 profile), the
lines written with :mod:`agentplane_journal.exportfmt.lines`, the checkpoint rebuilt with
:mod:`agentplane_journal.tlog.merkle`. Only the public entry points are used
(:class:`ExportVerifier`'s ``feed``/``feed_read``/``finish`` and the :class:`VerifyReport`),
and each tamper is held to the finding that names it, so the checks survive a rewrite of
the verifier's internals. ``tools/mutation.py export_verify`` runs these against every
mutant of the verifier (docs/concepts/guarantees.md links each promise here).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pytest

from agentplane_journal import AGENTPLANE_0_22, RunId
from agentplane_journal.core.ids import Digest
from agentplane_journal.core.record import Record, stored_record
from agentplane_journal.core.signing import Ed25519Signer, Ed25519Verifier
from agentplane_journal.exportfmt.lines import (
    IMPLEMENTED_CANONS,
    Trailer,
    Unreadable,
    header_line,
    record_line,
    run_line,
    trailer_line,
)
from agentplane_journal.exportfmt.verify import ExportVerifier, VerifyReport
from agentplane_journal.tlog import merkle
from agentplane_journal.tlog.checkpoint import Checkpoint

P = AGENTPLANE_0_22
SIGNER = Ed25519Signer("w", bytes(range(32)))
VERIFIER = Ed25519Verifier().trust("w", SIGNER.public_key)
ORIGIN = "example.com/log"
A = RunId.parse("01HZY5V7Q3T8R2M6K4N9P0W1XA")
B = RunId.parse("01HZY5V7Q3T8R2M6K4N9P0W1XB")
C = RunId.parse("01HZY5V7Q3T8R2M6K4N9P0W1XC")
SIG_NOT_CHECKED = (
    "signatures — no public key was supplied, so this pass cannot say who wrote anything"
)


def body(run: RunId, seq: int, kind: str = "Note", **members: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": seq, "run": run.ulid, "epoch": 1, "v": P.record_version}
    out["kind"] = kind
    out.update(members or ({"text": f"note {seq}"} if kind == "Note" else {}))
    return out


def chain(
    run: RunId,
    notes: int = 2,
    *,
    sealed: bool = True,
    signed: bool = True,
    unsigned: tuple[int, ...] = (),
    extra: dict[int, dict[str, Any]] | None = None,
) -> list[Record]:
    """``notes`` Note records, then (``sealed``) a RunSealed whose chain_head is its head."""
    records: list[Record] = []
    prev = Digest.ZERO
    for seq in range(1, notes + 1 + sealed):
        if sealed and seq == notes + 1:
            b = body(run, seq, "RunSealed", outcome="completed", chain_head=prev.hex())
        else:
            b = body(run, seq)
        b.update((extra or {}).get(seq, {}))
        signer = SIGNER if signed and seq not in unsigned else None
        rec = Record.seal(b, prev, signer, canon=P.canonicalize)
        records.append(rec)
        prev = rec.hash
    return records


@dataclass
class Block:
    run: RunId
    records: list[Record]
    index: int | None = None  # None: an open run (not in the checkpoint)

    @property
    def seal(self) -> Digest:
        return self.records[-1].hash


def checkpoint(blocks: list[Block], origin: str = ORIGIN) -> Checkpoint:
    seals = sorted((b.index, b.seal) for b in blocks if b.index is not None)
    return Checkpoint(origin, len(seals), merkle.root([merkle.leaf_hash(s) for _, s in seals]))


def write(blocks: list[Block], cp: Checkpoint | None = None, canon: int = 1) -> list[str]:
    """An honest export of ``blocks`` (header, blocks and records, trailer)."""
    lines = [header_line(cp or checkpoint(blocks), canon)]
    for b in blocks:
        lines.append(run_line(b.run, b.index, b.seal if b.index is not None else None))
        lines += [record_line(r) for r in b.records]
    total = sum(len(b.records) for b in blocks)
    lines.append(trailer_line(Trailer(len(blocks), len(blocks), total, 0)))
    return lines


def verify(
    lines: list[str],
    expected: Checkpoint | None,
    verifier: Ed25519Verifier | None = VERIFIER,
    **kw: Any,
) -> VerifyReport:
    check = ExportVerifier(verifier, **kw)
    for line in lines:
        if not check.feed(line):
            break
    return check.finish(expected)


def edit(line: str, **changes: Any) -> str:
    value = json.loads(line)
    for key, new in changes.items():
        if new is DROP:
            del value[key]
        else:
            value[key] = new
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


DROP = object()


def honest() -> tuple[list[Block], Checkpoint, list[str]]:
    """Two sealed runs (log positions 0 and 1) and an open one, every record signed."""
    blocks = [Block(A, chain(A), 0), Block(B, chain(B, 1), 1), Block(C, chain(C, sealed=False))]
    cp = checkpoint(blocks)
    return blocks, cp, write(blocks, cp)


def only(report: VerifyReport, *phrases: str) -> None:
    """Exactly one finding per phrase, each naming it, and no other finding."""
    assert len(report.findings) == len(phrases), report.findings
    for finding, phrase in zip(report.findings, phrases, strict=True):
        assert phrase in finding, (phrase, report.findings)
    assert not report.is_sound


def test_an_honest_export_is_sound_and_says_what_it_checked() -> None:
    _, cp, lines = honest()
    report = verify(lines, cp)
    assert report.findings == []
    assert report.not_checked == []
    assert report.is_sound and report.complete
    assert report.sound == [A, B, C]
    assert report.checkpoint == cp
    assert (report.records, report.cases) == (3 + 2 + 2, 0)
    assert report.to_json() == {
        "sound": True,
        "checkpoint": {"origin": ORIGIN, "size": 2, "root": cp.root.hex()},
        "runs_sound": 3,
        "records": 7,
        "cases": 0,
        "complete": True,
        "findings": [],
        "not_checked": [],
    }


def test_without_a_key_or_a_checkpoint_those_checks_are_listed_as_not_done() -> None:
    _, cp, lines = honest()
    report = verify(lines, None, None)
    assert report.findings == [] and report.is_sound
    assert report.not_checked[0] == SIG_NOT_CHECKED
    assert report.not_checked[1].startswith("deletion — no checkpoint was supplied")
    assert len(report.not_checked) == 2
    assert report.checkpoint == cp
    unsound = VerifyReport(findings=["x"], complete=True)
    assert unsound.to_json()["sound"] is False and unsound.to_json()["checkpoint"] is None
    assert not VerifyReport().is_sound  # nothing read: not whole


def test_blocks_in_any_order_and_blank_and_unknown_lines_are_honest() -> None:
    blocks = [Block(A, chain(A), 1), Block(B, chain(B), 0)]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines.insert(1, "")
    lines.insert(2, '{"kind":"agentplane.export.future","x":1}')
    check = ExportVerifier(VERIFIER)
    assert check.feed_read(None) is True
    for line in lines:
        assert check.feed(line) is True
    report = check.finish(cp)
    assert report.findings == [] and report.sound == [A, B]


def test_the_empty_log_in_either_spelling_is_honest_and_any_other_root_is_not() -> None:
    zero = Checkpoint(ORIGIN, 0, Digest.ZERO)  # agentplane 0.4.0's empty root
    rfc = Checkpoint(ORIGIN, 0, merkle.EMPTY_ROOT)
    for cp in (zero, rfc):
        lines = write([], cp)
        assert verify(lines, cp).findings == []
    other = Checkpoint(ORIGIN, 0, Digest(b"\x01" * 32))
    only(verify(write([], other), other), "the Merkle root rebuilt from this export")
    # An open run beside an empty log: no leaf, still sound.
    lines = write([Block(C, chain(C, sealed=False))], zero)
    assert verify(lines, zero).sound == [C]


# -- the header ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, True, "1", 1.0, None])
def test_a_header_of_another_format_version_is_a_finding(version: object) -> None:
    _, cp, lines = honest()
    # None: the member is absent (read as None).
    lines[0] = edit(lines[0], version=DROP if version is None else version)
    report = verify(lines, cp)
    only(report, f"the export claims format version {version!r} and this build reads 1")


@pytest.mark.parametrize("canon", [7, "1", None, True])
def test_a_foreign_canon_is_not_checked_never_a_finding(canon: object) -> None:
    _, cp, lines = honest()
    lines[0] = edit(lines[0], canon=canon)
    report = verify(lines, cp)
    assert report.findings == [] and report.is_sound
    (note,) = report.not_checked
    assert note.startswith(
        f"derived digests — the export was written under canonicalization rule {canon!r}"
    )
    assert "this build implements [0, 1]" in note


def test_canon_0_is_implemented_and_a_build_may_implement_fewer() -> None:
    blocks = [Block(A, chain(A), 0)]
    cp = checkpoint(blocks)
    assert verify(write(blocks, cp, canon=0), cp).not_checked == []
    assert IMPLEMENTED_CANONS == {0, 1}
    report = verify(write(blocks, cp), cp, canons=frozenset({0}))
    assert report.findings == []
    assert "rule 1 and this build implements [0]" in report.not_checked[0]


@pytest.mark.parametrize(
    "value",
    [None, "x", {"origin": ORIGIN, "size": 1}, {"origin": "", "size": 0, "root": "00" * 32}],
)
def test_a_header_without_a_readable_checkpoint_is_a_finding(value: object) -> None:
    blocks = [Block(A, chain(A), 0)]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[0] = edit(lines[0], checkpoint=value)
    report = verify(lines, cp)
    only(report, "the header carries no readable checkpoint")
    assert report.checkpoint is None


def test_no_header_is_a_finding_and_the_tree_is_still_held_to_the_given_checkpoint() -> None:
    _, cp, lines = honest()
    report = verify(lines[1:], cp)
    only(report, "the export has no header, so nothing says which log it came from")
    assert report.sound == [A, B, C]
    # Without a header and without a checkpoint, nothing to hold the tree to: one finding.
    report = verify(lines[1:], None)
    only(report, "the export has no header")
    # A run dropped as well, with the checkpoint given: the tree still says so.
    blocks, cp, _ = honest()
    lines = write(blocks[1:], cp)[1:]
    only(verify(lines, cp), "the export has no header", "carries 1 sealed run(s)")


def test_a_header_naming_another_history_than_the_given_checkpoint_is_a_finding() -> None:
    blocks, cp, lines = honest()
    other = Checkpoint("elsewhere.example/log", cp.size, cp.root)
    report = verify(lines, other)
    only(report, "the export's header names log 'example.com/log' at size 2")
    assert f"'elsewhere.example/log' at size 2 with root {cp.root.hex()}" in report.findings[0]
    # The tree is settled against the checkpoint given, not the header's.
    grown = checkpoint([*blocks, Block(RunId.parse("01HZY5V7Q3T8R2M6K4N9P0W1XD"), chain(A), 2)])
    report = verify(lines, grown)
    only(
        report,
        "the export's header names",
        "carries 2 sealed run(s) and its checkpoint commits to 3",
    )


# -- record lines --------------------------------------------------------------------------


def test_a_record_before_any_run_block_is_a_finding() -> None:
    blocks = [Block(A, chain(A), 0)]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines.insert(1, lines[2])
    lines[-1] = trailer_line(Trailer(1, 1, 4, 0))
    report = verify(lines, cp)
    only(report, "a record appears before any run block, so nothing says which run it belongs to")
    assert report.records == 4 and report.sound == [A]


@pytest.mark.parametrize(
    "change",
    [
        {"raw": DROP},
        {"raw": 7},
        {"hash": DROP},
        {"hash": "ab" * 31},
        {"hash": "zz" * 32},
    ],
)
def test_a_record_line_without_bytes_or_hash_is_a_finding(change: dict[str, Any]) -> None:
    blocks = [Block(A, chain(A, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[3] = edit(lines[3], **change)
    report = verify(lines, cp)
    only(report, f"run {A}: a record line carries no wire bytes or no hash — nothing ties it")
    assert report.sound == []


@pytest.mark.parametrize("raw", ["not json", "[1]", '{"seq":"1"}', '{"seq":1.0}', "[" * 3000])
def test_wire_bytes_that_are_no_record_are_a_finding(raw: str) -> None:
    blocks = [Block(A, chain(A, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[3] = edit(lines[3], raw=raw)
    report = verify(lines, cp)
    only(report, f"run {A}: a record line is malformed")
    assert report.sound == []


def test_an_edited_readable_body_is_a_finding_though_every_hash_verifies() -> None:
    blocks = [Block(A, chain(A), 0)]
    cp = checkpoint(blocks)
    for change in ({"text": "edited"}, {"extra": 1}, {"seq": 1.0}):
        lines = write(blocks, cp)
        b = json.loads(lines[2])["body"]
        lines[2] = edit(lines[2], body={**b, **change})
        report = verify(lines, cp)
        only(report, f"run {A}: record 1's readable body does not match its wire bytes")
        assert report.sound == []
    lines = write(blocks, cp)
    lines[3] = edit(lines[3], body=DROP)
    only(verify(lines, cp), "record 2's readable body does not match")


def test_body_equals_wire_as_serde_json_holds_numbers() -> None:
    """Integers at the edges of u64/i64 stay integers; beyond them they are the f64 the
    wire parses to (this package's previous writer put the wire text in ``body``); an
    integer no f64 holds equals nothing; a float never equals an integer."""
    big = {"a": [2**64 - 1, -(2**63), 2**64, -(2**63) - 1], "n": {"k": [1, 2]}}
    # No profile writes an integer beyond 64 bits (agentplane's writers refuse it), but a
    # hostile or foreign file may hold one: its wire bytes written by hand.
    plan = json.dumps(big, separators=(",", ":"))
    raw = (
        f'{{"epoch":1,"kind":"PlanFrozen","plan":{plan},"run":"{A.ulid}","seq":1,'
        f'"steps":["s"],"v":{P.record_version}}}'
    ).encode()
    digest = Digest(hashlib.sha256(bytes(Digest.ZERO) + raw).digest())
    record = stored_record(json.loads(raw), raw, Digest.ZERO, digest, None)
    blocks = [Block(A, [record])]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    assert verify(lines, cp, None).findings == []
    raw = json.loads(lines[2])["raw"]
    verbatim = lines[2].replace(
        lines[2][lines[2].index('"body":') : lines[2].index(',"prev_hash"')], f'"body":{raw}'
    )
    assert verbatim != lines[2]
    assert verify([lines[0], lines[1], verbatim, lines[3]], cp, None).findings == []
    for plan in (
        {**big, "a": [2**64 - 2, -(2**63), 2**64, -(2**63) - 1]},
        {**big, "a": [2**64 - 1, -(2**63), 10**400, -(2**63) - 1]},
        {**big, "n": {"k": [1]}},
        {**big, "n": {"k": [1, 2.0]}},
        {**big, "n": [1, 2]},
        {**big, "n": {"j": [1, 2]}},
    ):
        b = json.loads(lines[2])["body"]
        edited = lines[2].replace(
            lines[2][lines[2].index('"body":') : lines[2].index(',"prev_hash"')],
            '"body":' + json.dumps({**b, "plan": plan}),
        )
        report = verify([lines[0], lines[1], edited, lines[3]], cp, None)
        only(report, "record 1's readable body does not match")


def test_a_record_of_another_run_in_this_block_is_a_finding() -> None:
    blocks = [Block(A, chain(B, 1, sealed=False))]
    cp = checkpoint(blocks)
    report = verify(write(blocks, cp), cp)
    only(report, f"run {A}: a record in this block belongs to run '{B.ulid}' — the block was")
    assert report.sound == []


def test_a_record_missing_from_the_middle_or_the_start_is_a_finding() -> None:
    blocks = [Block(A, chain(A, 3), 0)]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[-1] = trailer_line(Trailer(1, 1, 3, 0))
    report = verify([*lines[:3], *lines[4:]], cp)
    assert report.findings[0] == (
        f"run {A}: seq 3 follows 1, so a record is missing from the middle — every chain "
        "link either side of the gap still joins"
    )
    assert "record 3 does not recompute" in report.findings[1]
    report = verify([*lines[:2], *lines[3:]], cp)
    assert f"run {A}: seq 2 follows 0" in report.findings[0]
    # The same record twice: seq 1 follows 1.
    lines = write([Block(A, chain(A, 1, sealed=False))], cp)
    lines.insert(3, lines[2])
    lines[-1] = trailer_line(Trailer(1, 1, 2, 0))
    assert "seq 1 follows 1" in verify(lines, cp).findings[0]


def test_a_seal_claiming_another_chain_head_is_a_finding() -> None:
    records = chain(A, 2)
    wrong = body(A, 3, "RunSealed", outcome="completed", chain_head=records[0].hash.hex())
    records[2] = Record.seal(wrong, records[1].hash, SIGNER, canon=P.canonicalize)
    blocks = [Block(A, records, 0)]
    cp = checkpoint(blocks)
    report = verify(write(blocks, cp), cp)
    only(report, f"run {A}: the sealing record claims a chain head that is not the head it sits on")
    assert report.sound == []
    # A RunSealed without a chain_head (not 0.22's), in a file not read as 0.22's: no claim.
    bare = body(A, 3, "RunSealed", outcome="completed")
    records[2] = Record.seal(bare, records[1].hash, SIGNER, canon=P.canonicalize)
    cp = checkpoint(blocks)
    assert verify(write(blocks, cp), cp, agentplane_typed=False).findings == []


def test_edited_wire_bytes_break_the_chain_from_there_and_the_leaf() -> None:
    """The head walks over the bytes present: an edited record fails, so does the next one
    (its prev is the recomputed hash, never the line's own claim), and so does the leaf."""
    blocks = [Block(A, chain(A, 3, signed=False), 0)]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    value = json.loads(lines[3])
    raw = value["raw"].replace("note 2", "note X")
    lines[3] = edit(lines[3], raw=raw, body=json.loads(raw))
    report = verify(lines, cp, None)
    assert report.findings == [
        f"run {A}: record 2 does not recompute to the hash it carries — it was edited after "
        "it was sealed",
        f"run {A}: record 3 does not recompute to the hash it carries — it was edited after "
        "it was sealed",
        f"run {A}: the sealing record claims a chain head that is not the head it sits on — the "
        "conclusion was drawn over a different history",
        f"run {A}: record 4 does not recompute to the hash it carries — it was edited after "
        "it was sealed",
        f"run {A}: the log's leaf is not this run's terminal hash, so the chain in this file is "
        "not the chain the checkpoint committed to",
    ]


def test_a_claimed_hash_edited_alone_is_a_finding() -> None:
    blocks = [Block(A, chain(A, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[3] = edit(lines[3], hash="ab" * 32)
    only(verify(lines, cp), f"run {A}: record 2 does not recompute to the hash it carries")


# -- signatures ----------------------------------------------------------------------------


def test_an_unsigned_record_inside_a_signed_history_is_a_finding() -> None:
    blocks = [Block(A, chain(A, 3, unsigned=(2,)), 0)]
    cp = checkpoint(blocks)
    report = verify(write(blocks, cp), cp)
    only(report, f"run {A}: record 2 carries no signature inside a signed history")
    assert report.sound == []
    # Without a key, nothing is said about signatures.
    assert verify(write(blocks, cp), cp, None).findings == []


def test_a_forged_signature_after_an_unsigned_record_is_named_once_per_run() -> None:
    blocks = [Block(A, chain(A, 3, unsigned=(3,)), 0), Block(B, chain(B, 2), 1)]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    # Run B's record 2 signed by a stranger under the trusted key id.
    stranger = Ed25519Signer("w", bytes(range(1, 33)))
    forged = Record.seal(body(B, 2), blocks[1].records[0].hash, stranger, canon=P.canonicalize)
    assert forged.hash == blocks[1].records[1].hash
    lines[8] = record_line(forged)
    # And A's record 4 too: one finding per run, the first.
    report = verify(lines, cp)
    assert report.findings == [
        f"run {A}: record 3 carries no signature inside a signed history",
        f"run {B}: record 2 has a signature that 'w' did not make",
    ]
    assert report.sound == []


def test_signatures_as_hex_in_either_case_or_as_byte_arrays_verify() -> None:
    blocks = [Block(A, chain(A), 0)]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    att = json.loads(lines[2])["attestation"]
    lines[2] = edit(lines[2], attestation={**att, "signature": att["signature"].upper()})
    lines[3] = edit(
        lines[3],
        attestation={
            **att,
            "signature": list(bytes.fromhex(json.loads(lines[3])["attestation"]["signature"])),
        },
    )
    assert verify(lines, cp).findings == []


@pytest.mark.parametrize(
    "attestation",
    [
        "w",
        {"signature": "ab"},
        {"key_id": 1, "signature": "ab"},
        {"key_id": "w", "signature": "abc"},
        {"key_id": "w", "signature": "zz"},
        {"key_id": "w", "signature": "0x"},
        {"key_id": "w", "signature": [1, 256]},
        {"key_id": "w", "signature": [1, -1]},
        {"key_id": "w", "signature": [1, True]},
        {"key_id": "w", "signature": 12},
        {"key_id": "w"},
    ],
)
def test_a_malformed_attestation_is_a_finding_when_signatures_are_checked(
    attestation: object,
) -> None:
    blocks = [Block(A, chain(A, 1, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[2] = edit(lines[2], attestation=attestation)
    report = verify(lines, cp)
    only(
        report,
        f"run {A}: record 1's attestation is malformed",
        f"run {A}: record 1 carries no signature inside a signed history",
    )
    assert verify(lines, cp, None).findings == []


def test_a_valid_hex_signature_of_the_wrong_bytes_is_not_malformed() -> None:
    blocks = [Block(A, chain(A, 1, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[2] = edit(lines[2], attestation={"key_id": "w", "signature": "AB" * 64})
    only(verify(lines, cp), f"run {A}: record 1 has a signature that 'w' did not make")


# -- run blocks ----------------------------------------------------------------------------


def test_a_block_naming_no_run_leaves_its_records_to_no_run() -> None:
    blocks = [Block(A, chain(A, 1, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[1] = edit(lines[1], run="nope")
    lines[-1] = trailer_line(Trailer(1, 0, 1, 0))
    report = verify(lines, cp)
    assert report.findings[0].startswith("a run block names 'nope', which is not a run id")
    assert report.findings[1:] == [
        "a record appears before any run block, so nothing says which run it belongs to"
    ]
    assert report.sound == []


def test_a_block_with_a_position_and_no_leaf_is_a_finding() -> None:
    blocks = [Block(A, chain(A), 0)]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[1] = edit(lines[1], seal="x")
    report = verify(lines, cp)
    assert report.findings[0].startswith(f"run {A}: its block carries log position 0 and leaf 'x'")
    assert "carries 0 sealed run(s) and its checkpoint commits to 1" in report.findings[1]
    assert len(report.findings) == 2 and report.sound == []


def test_a_second_block_for_a_run_is_a_finding() -> None:
    blocks = [Block(A, chain(A, sealed=False)), Block(A, chain(A, sealed=False))]
    cp = checkpoint(blocks)
    report = verify(write(blocks, cp), cp)
    only(report, f"run {A}: a second block for this run — an export writes each run once")
    assert report.sound == [A]  # the first block alone verifies


def test_a_sealed_block_whose_leaf_is_not_its_head_is_a_finding() -> None:
    blocks = [Block(A, chain(A), 0), Block(B, chain(B), 1)]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[-1] = trailer_line(Trailer(2, 2, 5, 0))
    lines = [*lines[:4], *lines[5:]]  # A's seal record removed (a tail cut)
    report = verify(lines, cp)
    only(report, f"run {A}: the log's leaf is not this run's terminal hash")
    assert report.sound == [B]


def test_an_emptied_block_is_a_finding_unless_declared_unreadable() -> None:
    blocks = [Block(A, chain(A, sealed=False)), Block(B, chain(B, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    cut = [*lines[:1], *lines[1:2], *lines[4:-1]]
    report = verify([*cut, trailer_line(Trailer(2, 1, 2, 0))], cp)
    only(report, f"run {A}: its block carries no records and the export does not declare it")
    assert report.sound == [B]
    declared = Trailer(2, 1, 2, 0, [Unreadable(A, "bad bytes")])
    report = verify([*cut, trailer_line(declared)], cp)
    assert report.findings == [] and report.is_sound
    assert report.not_checked == [
        f"run {A}: the export declares it unreadable (bad bytes), so its records are not in "
        "this file and nothing about it was verified"
    ]
    # Entries naming no run are skipped; a missing reason says so; another run's
    # declaration does not excuse this one.
    trailer = json.loads(trailer_line(declared))
    trailer["unreadable"] = ["x", {"run": 1}, {"run": B.ulid}, {"run": A.ulid, "reason": 2}]
    report = verify([*cut, json.dumps(trailer)], cp)
    assert report.findings == []
    assert [n.split(":")[0] for n in report.not_checked] == [f"run {B}", f"run {A}"]
    assert "unreadable (no reason recorded)" in report.not_checked[1]
    trailer["unreadable"] = {"run": A.ulid}
    only(verify([*cut, json.dumps(trailer)], cp), f"run {A}: its block carries no records")


# -- the log's tree ------------------------------------------------------------------------


def test_a_sealed_run_removed_whole_is_caught_by_the_outside_checkpoint() -> None:
    blocks, cp, _ = honest()
    lines = write([blocks[0], blocks[2]], cp)
    report = verify(lines, cp)
    only(
        report,
        "the export carries 1 sealed run(s) and its checkpoint commits to 2 — the difference is "
        "runs that were in the log and are not in this file",
    )
    # Against the file's own header (rewritten by the same editor): only "not checked".
    forged = write([blocks[0], blocks[2]])
    report = verify(forged, None)
    assert report.findings == [] and report.not_checked[0].startswith("deletion")


def _positions(indexes: list[int], size: int) -> VerifyReport:
    runs = [RunId.parse(f"01HZY5V7Q3T8R2M6K4N9P0W1X{c}") for c in "DEFGH"[: len(indexes)]]
    blocks = [Block(r, chain(r, 1), i) for r, i in zip(runs, indexes, strict=True)]
    seals = [merkle.leaf_hash(b.seal) for b in blocks]
    cp = Checkpoint(ORIGIN, size, merkle.root(seals[:size]))
    return verify(write(blocks, cp), cp)


def test_duplicated_or_missing_log_positions_are_named() -> None:
    report = _positions([0, 0, 5], 3)
    only(
        report,
        "the run blocks' log positions are not the contiguous 0..3 the checkpoint commits to — "
        "position(s) [0] duplicated, position(s) [1, 2] missing, so this file describes a "
        "different log than the one it names",
    )
    assert report.findings[0].endswith(
        "position(s) [1, 2] missing, so this file describes a different log than the one it names"
    )
    report = _positions([1, 2], 2)
    assert report.findings == [
        "the run blocks' log positions are not the contiguous 0..2 the checkpoint commits to — "
        "position(s) [0] missing, so this file describes a different log than the one it names"
    ]


def test_seals_swapped_between_positions_fail_the_root() -> None:
    blocks = [Block(A, chain(A), 0), Block(B, chain(B), 1)]
    cp = checkpoint(blocks)
    swapped = write([Block(A, blocks[0].records, 1), Block(B, blocks[1].records, 0)], cp)
    only(
        verify(swapped, cp),
        "the Merkle root rebuilt from this export does not match the checkpoint it claims to "
        "be a copy of",
    )


# -- the trailer ---------------------------------------------------------------------------


def test_a_cut_file_is_a_finding_and_its_counts_are_not_judged() -> None:
    _, cp, lines = honest()
    report = verify(lines[:-1], cp)
    assert report.findings == [
        "the export has no trailer, so it was cut short — every line in it is still valid, "
        "which is why the frame is the signal"
    ]
    assert not report.complete and not report.is_sound
    assert report.sound == [A, B, C]


@pytest.mark.parametrize("name", ["runs_requested", "runs_exported", "records"])
@pytest.mark.parametrize("value", [DROP, "3", True, None])
def test_a_trailer_missing_a_count_is_a_finding(name: str, value: object) -> None:
    _, cp, lines = honest()
    lines[-1] = edit(lines[-1], **{name: value})
    only(
        verify(lines, cp),
        "the trailer is missing counts this format always writes (runs_requested, "
        "runs_exported, records) — a reader cannot hold the file to its own accounting",
    )


@pytest.mark.parametrize(
    ("name", "finding"),
    [
        (
            "runs_requested",
            "the trailer says 4 run(s) were requested and this file carries 3 run block(s) — "
            "whole runs were removed or added after the export was taken",
        ),
        (
            "runs_exported",
            "the trailer says 4 run(s) were exported in full and this file carries records for "
            "3 — a run's records were removed after the export was taken",
        ),
        (
            "records",
            "the trailer says 4 record(s) were written and this file carries 7 — record lines "
            "were removed or added after the export was taken",
        ),
        (
            "cases",
            "the trailer says 4 case(s) were exported and this file carries 0 — the case layer "
            "was cut after the export was taken",
        ),
    ],
)
def test_each_trailer_count_is_held_to_the_file(name: str, finding: str) -> None:
    _, cp, lines = honest()
    lines[-1] = edit(lines[-1], **{name: 4})
    assert verify(lines, cp).findings == [finding]


def test_a_case_count_that_is_no_integer_is_not_judged() -> None:
    _, cp, lines = honest()
    lines[-1] = edit(lines[-1], cases="4")
    assert verify(lines, cp).findings == []


# -- cases ---------------------------------------------------------------------------------


CASE = "01HZY5V7Q3T8R2M6K4N9P0W1XK"


def _with_case(case_lines: list[str], stamp: str = CASE) -> tuple[list[str], Checkpoint]:
    blocks = [Block(A, chain(A, sealed=False, extra={1: {"case": stamp}}))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[-1] = edit(lines[-1], cases=len(case_lines))
    return [lines[0], *case_lines, *lines[1:]], cp


def _case(case_id: object, deadlines: object = ()) -> str:
    return json.dumps(
        {
            "kind": "agentplane.export.case",
            "case": {"id": case_id},
            "deadlines": list(deadlines) if isinstance(deadlines, tuple) else deadlines,
        }
    )


def test_a_stamped_case_with_no_case_layer_is_not_checked() -> None:
    lines, cp = _with_case([])
    report = verify(lines, cp, agentplane_typed=False)
    assert report.findings == []
    assert report.not_checked == [
        "the case layer — 1 case(s) are stamped on records and this file carries no case blocks "
        "(this package keeps no case store, so its exports never do)"
    ]


def test_a_carried_case_layer_must_hold_every_stamped_case() -> None:
    contents = (
        "the case layer's contents — blob bytes and sealed case state are questions about a "
        "live agentplane plane, which neither an offline file nor this package answers"
    )
    lines, cp = _with_case([_case(f"case_{CASE}")])
    report = verify(lines, cp, agentplane_typed=False)
    assert report.findings == [] and report.cases == 1
    assert report.not_checked == [contents]
    lines, cp = _with_case([_case(CASE)])
    assert verify(lines, cp, agentplane_typed=False).findings == []
    lines, cp = _with_case([_case("case_01HZY5V7Q3T8R2M6K4N9P0W1XZ")])
    report = verify(lines, cp, agentplane_typed=False)
    assert report.findings == [
        f"case {CASE} is stamped on exported records and missing from the case layer — the "
        "journal names a matter this file does not carry"
    ]
    assert report.not_checked == [contents]


def test_a_malformed_case_block_is_a_finding() -> None:
    lines, cp = _with_case([_case(None), _case(f"case_{CASE}", deadlines=None)])
    report = verify(lines, cp, agentplane_typed=False)
    assert report.findings == [
        "a case block is malformed: it names no case id",
        "a case block's deadlines are malformed",
    ]
    lines, cp = _with_case([json.dumps({"kind": "agentplane.export.case", "case": "x"})])
    report = verify(lines, cp, agentplane_typed=False)
    assert report.findings[0] == "a case block is malformed: it names no case id"


# -- agentplane 0.22's typed reading --------------------------------------------------------


def test_a_canon_1_record_agentplane_cannot_read_is_a_finding() -> None:
    extra = {1: {"kind": "Bogus"}}
    blocks = [Block(A, chain(A, sealed=False, extra=extra))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    report = verify(lines, cp)
    only(
        report,
        f"run {A}: record 1 is not a record agentplane 0.22 can read (agentplane 0.22 defines no "
        "record kind 'Bogus') — agentplane's verify calls it malformed and the rest of the run "
        "tampered",
    )
    assert report.sound == []
    assert verify(lines, cp, agentplane_typed=False).findings == []
    assert verify(write(blocks, cp, canon=0), cp).findings == []


def test_members_agentplane_would_drop_are_counted_not_found() -> None:
    extra = {1: {"x": 1}, 2: {"y": 2}}
    blocks = [Block(A, chain(A, sealed=False, extra=extra))]
    cp = checkpoint(blocks)
    report = verify(write(blocks, cp), cp)
    assert report.findings == []
    assert report.not_checked == [
        "agentplane 0.22's restore of 2 record(s) — they hold members its typed records do not "
        "carry, so its re-seal would give other bytes (this package's restore keeps them); "
        f"first: record 1 of {A}: ['Note.x']"
    ]
    assert verify(write(blocks, cp), cp, agentplane_typed=False).not_checked == []
    assert verify(write(blocks, cp, canon=0), cp).not_checked == []


# -- unreadable lines ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "finding"),
    [
        (b"\xff{}", "a line is not UTF-8, so the export is unreadable from there on"),
        ("{", "a line is not valid JSON, so the export is unreadable from there on"),
        ("[1]", "a line is not a JSON object, so the export is unreadable from there on"),
    ],
)
def test_an_unreadable_line_stops_the_pass(line: str | bytes, finding: str) -> None:
    _, cp, lines = honest()
    check = ExportVerifier(VERIFIER)
    for x in lines[:3]:
        assert check.feed(x)
    assert check.feed(line) is False
    for x in lines[3:]:
        assert check.feed(x) is False
        assert check.feed_read(json.loads(x)) is False
    report = check.finish(cp)
    assert report.findings[0] == finding
    assert report.records == 1 and not report.complete
    assert "the export has no trailer" in report.findings[-1]


# -- hostile values a reader must report, never crash on -----------------------------------


def test_a_body_holding_a_list_where_the_wire_holds_an_object_is_a_finding() -> None:
    blocks = [Block(A, chain(A, 1, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    raw = json.loads(lines[2])["raw"]
    lines[2] = edit(lines[2], raw=raw.replace('"text":"note 1"', '"text":{"k":1}'))
    value = json.loads(lines[2])
    for shown in (["k"], {"k": [1]}):
        lines[2] = edit(lines[2], body={**json.loads(value["raw"]), "text": shown})
        report = verify(lines, cp, None, agentplane_typed=False)
        assert any("record 1's readable body does not match" in f for f in report.findings)


@pytest.mark.parametrize("signature", ["aX", "XX", "0g", " a"])
def test_a_signature_of_non_hex_characters_is_malformed(signature: str) -> None:
    blocks = [Block(A, chain(A, 1, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[2] = edit(lines[2], attestation={"key_id": "w", "signature": signature})
    report = verify(lines, cp)
    assert report.findings[0] == f"run {A}: record 1's attestation is malformed"


def test_a_byte_array_signature_may_hold_0_and_255() -> None:
    blocks = [Block(A, chain(A, 1, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[2] = edit(lines[2], attestation={"key_id": "w", "signature": [0, 255] * 32})
    only(verify(lines, cp), f"run {A}: record 1 has a signature that 'w' did not make")


@pytest.mark.parametrize("canon", [True, 1.0])
def test_a_canon_that_is_no_integer_is_not_read_as_agentplanes(canon: object) -> None:
    blocks = [Block(A, chain(A, sealed=False, extra={1: {"kind": "Bogus"}}))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[0] = edit(lines[0], canon=canon)
    report = verify(lines, cp)
    assert report.findings == []
    assert f"rule {canon!r}" in report.not_checked[0]


@pytest.mark.parametrize("entries", [5, "run", None, {"run": "x"}])
def test_an_unreadable_list_that_is_no_list_is_ignored(entries: object) -> None:
    _, cp, lines = honest()
    lines[-1] = edit(lines[-1], unreadable=entries)
    report = verify(lines, cp)
    assert report.findings == [] and report.not_checked == []


def test_wire_bytes_holding_a_lone_surrogate_are_reported_not_a_crash() -> None:
    blocks = [Block(A, chain(A, 1, sealed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    raw = json.loads(lines[2])["raw"].replace("note 1", "\ud800")
    lines[2] = edit(lines[2], raw=raw, body=json.loads(json.dumps(json.loads(raw))))
    report = verify(lines, cp, None)
    only(report, f"run {A}: record 1 does not recompute to the hash it carries")
    assert report.sound == []


def test_a_seq_gap_alone_makes_the_run_unsound() -> None:
    """Records written with a gap by a broken writer: every link joins, no hash lies."""
    first = Record.seal(body(A, 1), Digest.ZERO, SIGNER, canon=P.canonicalize)
    third = Record.seal(body(A, 3), first.hash, SIGNER, canon=P.canonicalize)
    blocks = [Block(A, [first, third])]
    cp = checkpoint(blocks)
    report = verify(write(blocks, cp), cp)
    only(report, f"run {A}: seq 3 follows 1")
    assert report.sound == []


def test_a_claimed_hash_alone_makes_the_run_unsound() -> None:
    blocks = [Block(A, chain(A, 1, sealed=False, signed=False))]
    cp = checkpoint(blocks)
    lines = write(blocks, cp)
    lines[2] = edit(lines[2], hash="ab" * 32)
    report = verify(lines, cp, None)
    only(report, f"run {A}: record 1 does not recompute")
    assert report.sound == []


def test_without_a_checkpoint_the_tree_is_held_to_the_header() -> None:
    """An editor who drops a run but leaves the header is still caught without an outside
    checkpoint (only one who rewrites the header too is not: see "deletion")."""
    blocks, cp, _ = honest()
    lines = write([blocks[0], blocks[2]], cp)
    report = verify(lines, None)
    only(report, "the export carries 1 sealed run(s) and its checkpoint commits to 2")
