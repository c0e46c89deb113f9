"""The chain checks' promises, each held by a test that fails without it (core/chain.py).

Written against the mutants that survived the older tests (tools/mutation.py): a signed run
with unsigned records in it, a run checked page by page, exactly-once alone, the head each
check returns and the seq each refusal names.
"""

from __future__ import annotations

from collections.abc import Collection

import pytest

from agentplane_journal.core.append import Append
from agentplane_journal.core.chain import (
    RunCheck,
    check_exactly_once,
    verify_attested,
    verify_chain,
    verify_run,
)
from agentplane_journal.core.ids import Digest, EffectKey, RunId
from agentplane_journal.core.record import Attestation, Record
from agentplane_journal.core.signing import Ed25519Signer, Ed25519Verifier, Signer
from agentplane_journal.errors import CorruptRecordError

RUN = RunId.parse("01ARZ3NDEKTSV4RRFFQ69G5FAV")
SIGNER = Ed25519Signer("w", bytes(range(32)))
VERIFIER = Ed25519Verifier().trust("w", SIGNER.public_key)
KEY = EffectKey.derive(0, "forward", 1, 1, "probe", b"\x01")
OTHER = EffectKey.derive(0, "forward", 2, 1, "probe", b"\x02")


def note(text: str) -> Append:
    return Append(RUN, "Note", {"text": text})


def started(key: EffectKey) -> Append:
    payload = {
        "descriptor": {"kind": "probe", "args": None},
        "recovery": {"mode": "retry"},
        "mutates": True,
        "attempt": 1,
        "backoff_ms": 0,
    }
    return Append(RUN, "EffectStarted", payload, step=0, effect_key=key)


def done(key: EffectKey) -> Append:
    return Append(RUN, "EffectDone", {"output": {"ok": True}}, step=0, effect_key=key)


def stored(
    appends: list[Append], signer: Signer | None = None, unsigned: Collection[int] = ()
) -> list[Record]:
    """The records a store reads back (through ``Record.from_stored``), from seq 1; the seqs
    in ``unsigned`` are written without a signature."""
    records: list[Record] = []
    prev = Digest.ZERO
    for seq, item in enumerate(appends, start=1):
        sealed = Record.seal(item.body(seq, 1), prev, None if seq in unsigned else signer)
        records.append(
            Record.from_stored(sealed.raw, sealed.prev_hash, sealed.hash, sealed.attestation)
        )
        prev = sealed.hash
    return records


def forge(record: Record) -> Record:
    """The record with a signature its key did not make over it (a valid signature, made
    by the right key, over another message)."""
    return Record(
        record.body,
        record.raw,
        record.prev_hash,
        record.hash,
        Attestation("w", SIGNER.sign(b"something else")),
    )


def rebuilt(appends: list[Append], first_seq: int) -> list[Record]:
    """A consistent unsigned chain whose seqs start at ``first_seq`` (someone who can write
    the table rebuilding a run)."""
    records: list[Record] = []
    prev = Digest.ZERO
    for seq, item in enumerate(appends, start=first_seq):
        records.append(Record.seal(item.body(seq, 1), prev))
        prev = records[-1].hash
    return records


# --- verify_chain -----------------------------------------------------------------------------


def test_verify_chain_returns_the_last_hash_and_accepts_an_equal_link_that_is_another_object() -> (
    None
):
    records = stored([note("a"), note("b"), note("c")])
    assert verify_chain(records) == records[-1].hash
    # A link equal to its predecessor's hash but not the same object (a row read on its own).
    relinked = [records[0]] + [
        Record(r.body, r.raw, Digest.from_hex(r.prev_hash.hex()), r.hash) for r in records[1:]
    ]
    assert relinked[1].prev_hash is not records[0].hash
    assert verify_chain(relinked) == records[-1].hash


def test_verify_chain_rehashes_by_default_and_not_when_told_the_records_were_read_checked() -> None:
    records = stored([note("a"), note("b")])
    edited = Record(
        records[1].body,
        records[1].raw.replace(b'"b"', b'"x"'),
        records[1].prev_hash,
        records[1].hash,
    )
    with pytest.raises(CorruptRecordError, match="hash does not cover the stored bytes") as info:
        verify_chain([records[0], edited])
    assert info.value.seq == 2
    # rehash=False: from_stored already refused such a row; links and seqs are still checked.
    assert verify_chain([records[0], edited], rehash=False) == records[1].hash


def test_a_chain_starting_elsewhere_than_its_start_or_jumping_a_seq_names_the_record() -> None:
    with pytest.raises(CorruptRecordError, match="broken link") as info:
        verify_chain(stored([note("a"), note("b")])[1:])
    assert info.value.seq == 2
    jumped = rebuilt([note("a")], 1) + rebuilt([note("b")], 3)
    with pytest.raises(CorruptRecordError, match="sequence gap: expected 2, found 3") as info:
        verify_chain(jumped)
    assert info.value.seq == 3


# --- verify_attested --------------------------------------------------------------------------


def test_a_forged_signature_after_an_unsigned_record_is_caught() -> None:
    """A run mixing signed and unsigned records (a signer configured part-way): checking
    goes on past an unsigned record, so a forgery on any later one is refused."""
    records = stored([note("a"), note("b"), note("c"), note("d")], SIGNER, unsigned={2})
    assert verify_attested(records, VERIFIER) == records[-1].hash
    tampered = [*records[:3], forge(records[3])]
    with pytest.raises(CorruptRecordError, match="'w' did not make") as info:
        verify_attested(tampered, VERIFIER)
    assert info.value.seq == 4
    assert "record 4 has a signature" in info.value.detail


def test_unsigned_records_pass_by_default_and_fail_when_a_signature_is_required() -> None:
    records = stored([note("a"), note("b"), note("c")], SIGNER, unsigned={2, 3})
    assert verify_attested(records, VERIFIER) == records[-1].hash
    assert verify_attested(records, VERIFIER, False) == records[-1].hash
    with pytest.raises(CorruptRecordError, match="record 2 carries no signature") as info:
        verify_attested(records, VERIFIER, require_signature=True)
    assert info.value.seq == 2
    assert "this verification required one" in info.value.detail


def test_verify_attested_rehashes_by_default() -> None:
    records = stored([note("a"), note("b")], SIGNER)
    edited = Record(
        records[1].body,
        records[1].raw.replace(b'"b"', b'"x"'),
        records[1].prev_hash,
        records[1].hash,
        records[1].attestation,
    )
    with pytest.raises(CorruptRecordError, match="hash does not cover") as info:
        verify_attested([records[0], edited], VERIFIER)
    assert info.value.seq == 2
    assert verify_attested([records[0], edited], VERIFIER, rehash=False) == records[1].hash


def test_verify_attested_checks_a_slice_against_its_start() -> None:
    records = stored([note("a"), note("b"), note("c")], SIGNER)
    assert verify_attested(records[1:], VERIFIER, start=records[0].hash) == records[-1].hash
    with pytest.raises(CorruptRecordError, match="broken link") as info:
        verify_attested(records[1:], VERIFIER)
    assert info.value.seq == 2


def test_a_signature_by_a_key_the_verifier_does_not_trust_is_refused_naming_it() -> None:
    stranger = Ed25519Signer("stranger", bytes(range(1, 33)))
    records = stored([note("a")], stranger)
    with pytest.raises(CorruptRecordError, match="'stranger' did not make") as info:
        verify_attested(records, VERIFIER)
    assert info.value.seq == 1


# --- check_exactly_once -----------------------------------------------------------------------


def test_check_exactly_once_alone_refuses_a_second_start_naming_both() -> None:
    records = stored([started(KEY), done(KEY), started(OTHER), started(KEY)])
    with pytest.raises(CorruptRecordError, match="a second EffectStarted") as info:
        check_exactly_once(records)
    assert info.value.seq == 4
    assert f"ek:{KEY.hex()[:16]}…" in info.value.detail
    assert "(the first is seq 1)" in info.value.detail
    assert "exactly-once was bypassed" in info.value.detail


def test_an_honest_run_with_a_completed_effect_passes_exactly_once() -> None:
    """The ``EffectDone`` carries the key too: only ``EffectStarted`` records count."""
    records = stored([started(KEY), done(KEY), started(OTHER), done(OTHER), note("x")])
    check_exactly_once(records)
    started_by: dict[str, int] = {}
    check_exactly_once(records, started_by)
    assert started_by == {KEY.hex(): 1, OTHER.hex(): 3}


def test_check_exactly_once_remembers_what_earlier_pages_started() -> None:
    records = stored([started(KEY), note("x"), started(KEY)])
    started_by: dict[str, int] = {}
    check_exactly_once(records[:2], started_by)
    assert started_by == {KEY.hex(): 1}
    with pytest.raises(CorruptRecordError, match=r"the first is seq 1") as info:
        check_exactly_once(records[2:], started_by)
    assert info.value.seq == 3


# --- RunCheck, verify_run ---------------------------------------------------------------------


def test_runcheck_fed_page_by_page_catches_a_second_start_on_a_later_page() -> None:
    records = stored([started(KEY), done(KEY), note("x"), started(KEY)])
    check = RunCheck()
    check.feed(records[:2])
    check.feed(records[2:3])
    with pytest.raises(CorruptRecordError, match="a second EffectStarted") as info:
        check.feed(records[3:])
    assert info.value.seq == 4
    with pytest.raises(CorruptRecordError, match="a second EffectStarted"):
        verify_run(records)


def test_an_honest_run_with_a_completed_effect_verifies_whole_and_by_pages() -> None:
    records = stored([note("a"), started(KEY), done(KEY), started(OTHER), done(OTHER)], SIGNER)
    head = records[-1].hash
    assert verify_run(records) == head
    assert verify_run(records, head) == head
    assert verify_run(records, head, VERIFIER, require_signature=True) == head
    for size in (1, 2, 3):
        check = RunCheck(VERIFIER, require_signature=True)
        assert (check.head, check.last) == (Digest.ZERO, 0)
        for i in range(0, len(records), size):
            check.feed(records[i : i + size])
            assert check.last == records[min(i + size, len(records)) - 1].seq
            assert check.head == records[check.last - 1].hash
        check.feed([])
        assert (check.head, check.last) == (head, 5)
        assert check.finish() == head
        assert check.finish(head) == head


def test_runcheck_refuses_a_run_not_starting_at_seq_1_or_jumping_seqs_between_pages() -> None:
    with pytest.raises(CorruptRecordError, match="sequence gap: expected 1, found 2") as info:
        RunCheck().feed(rebuilt([note("a"), note("b")], 2))
    assert info.value.seq == 2
    with pytest.raises(CorruptRecordError, match="sequence gap: expected 1, found 2"):
        verify_run(rebuilt([note("a"), note("b")], 2))
    pages = rebuilt([note("a"), note("b")], 1), rebuilt([note("c")], 4)
    check = RunCheck()
    check.feed(pages[0])
    with pytest.raises(CorruptRecordError, match="sequence gap: expected 3, found 4") as info:
        check.feed(pages[1])
    assert info.value.seq == 4


def test_runcheck_links_each_page_to_the_previous_pages_head() -> None:
    a, b = stored([note("a"), note("b")]), stored([note("x"), note("y")])
    check = RunCheck()
    check.feed(a[:1])
    with pytest.raises(CorruptRecordError, match="broken link") as info:
        check.feed(b[1:])  # seq 2 of another run: linked to its own seq 1, not to a's
    assert info.value.seq == 2


def test_runcheck_checks_signatures_on_every_page_with_a_verifier() -> None:
    records = stored([note("a"), note("b"), note("c")], SIGNER, unsigned={2})
    check = RunCheck(VERIFIER)
    check.feed(records[:2])
    with pytest.raises(CorruptRecordError, match="'w' did not make") as info:
        check.feed([forge(records[2])])
    assert info.value.seq == 3
    required = RunCheck(VERIFIER, require_signature=True)
    required.feed(records[:1])
    with pytest.raises(CorruptRecordError, match="record 2 carries no signature"):
        required.feed(records[1:])
    with pytest.raises(CorruptRecordError, match="record 2 carries no signature"):
        verify_run(records, None, VERIFIER, True)
    assert verify_run(records, None, VERIFIER) == records[-1].hash


def test_runcheck_does_not_rehash_records_that_from_stored_has_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store's verify hashes every row once (reading it), not twice."""
    records = stored([note("a"), note("b")], SIGNER)

    def refuse(prev: Digest, raw: bytes) -> Digest:
        raise AssertionError("rehashed a record from_stored had checked")

    monkeypatch.setattr(Digest, "chain", refuse)
    for check in (RunCheck(), RunCheck(VERIFIER)):
        check.feed(records)
        assert check.finish() == records[-1].hash


def test_require_signature_without_a_verifier_is_refused() -> None:
    with pytest.raises(ValueError, match="require_signature needs a verifier"):
        RunCheck(None, require_signature=True)
    with pytest.raises(ValueError, match="require_signature needs a verifier"):
        verify_run([], require_signature=True)
    assert RunCheck(None).finish() == Digest.ZERO
    assert verify_run([]) == Digest.ZERO


def test_a_run_whose_records_end_elsewhere_than_its_seal_names_the_last_seq() -> None:
    records = stored([note("a"), note("b"), note("c")])
    check = RunCheck()
    check.feed(records[:2])
    sealed = records[-1].hash
    with pytest.raises(CorruptRecordError, match="records were deleted, added") as info:
        check.finish(sealed)
    assert info.value.seq == 2
    assert f"sealed at head {sealed.hex()[:12]}," in info.value.detail
    assert f"records end at {records[1].hash.hex()[:12]} (seq 2)" in info.value.detail
    with pytest.raises(CorruptRecordError, match="records were deleted, added") as info:
        verify_run(records[:2], sealed)
    assert info.value.seq == 2
