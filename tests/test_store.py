"""The behaviour battery: every row of the store contract, on SQLite and on PostgreSQL.

Each test runs twice (``dialect`` is parametrized in conftest). PostgreSQL tests share one
migrated database and each gets its own tenant, so isolation is exercised throughout.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from sqlalchemy import ForeignKey, Integer, String, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from agentplane_journal import (
    MAX_RECORD_BYTES,
    Append,
    BackendError,
    Cancellation,
    CaseId,
    Checkpoint,
    CorruptRecordError,
    Digest,
    DuplicateEffectError,
    Ed25519Signer,
    Ed25519Verifier,
    EffectKey,
    FencedError,
    Head,
    LeaseHeldError,
    RecordTooLargeError,
    RunId,
    RunSealedError,
    SchemaOutOfDateError,
    SqlJournalStore,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from agentplane_journal.db.models import Journal, RunActivity

from support.helpers import admitted, concluded, key, note, started
from support.markers import THROUGH_PGBOUNCER

# The battery runs once more through PgBouncer (tests/test_pgbouncer.py).
pytestmark = THROUGH_PGBOUNCER

LEASE = 300


async def leased(store: SqlJournalStore, owner: str = "conformance") -> tuple[RunId, int]:
    run = RunId.generate()
    lease = await store.acquire(run, owner, LEASE)
    return run, lease.epoch


async def count(store: SqlJournalStore, run: RunId) -> int:
    async with store.engine.connect() as conn:
        stmt = select(func.count()).where(
            Journal.tenant == store.tenant, Journal.run_id == str(run)
        )
        return (await conn.execute(stmt)).scalar_one()


def other_tenant(store: SqlJournalStore) -> SqlJournalStore:
    return store.for_tenant(f"other-{uuid.uuid4().hex[:8]}")


# -- append, chaining, read -------------------------------------------------------------


async def test_an_unwritten_run_has_the_genesis_head(store: SqlJournalStore) -> None:
    assert await store.head(RunId.generate()) == Head(0, Digest.ZERO)


async def test_appends_get_contiguous_seqs_from_one(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    for _ in range(3):
        await store.append(epoch, [admitted(run)])
    assert [r.seq for r in await store.read(run)] == [1, 2, 3]


async def test_each_record_links_to_its_predecessor(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    for _ in range(3):
        await store.append(epoch, [admitted(run)])
    records = await store.read(run)
    assert records[0].prev_hash == Digest.ZERO
    for before, after in itertools.pairwise(records):
        assert after.prev_hash == before.hash
    assert await store.head(run) == Head(3, records[-1].hash)


async def test_a_self_written_chain_verifies_to_its_head(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    written = []
    for _ in range(4):
        written += await store.append(epoch, [admitted(run)])
    assert await store.verify(run) == written[-1].hash
    assert await store.verify(RunId.generate()) == Digest.ZERO


async def test_append_returns_what_read_returns(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    written = await store.append(epoch, [admitted(run), note(run), note(run, "two")])
    assert [r.seq for r in written] == [1, 2, 3]
    assert await store.read(run) == written
    assert written[0].body["epoch"] == epoch and written[0].body["run"] == run.ulid


async def test_read_starts_at_from_seq_and_zero_reads_like_one(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    for _ in range(4):
        await store.append(epoch, [admitted(run)])
    assert [r.seq for r in await store.read(run, 3)] == [3, 4]
    assert await store.read(run, 0) == await store.read(run, 1)
    assert await store.read(run, 9) == []


async def test_an_empty_batch_writes_nothing(store: SqlJournalStore) -> None:
    run = RunId.generate()
    assert await store.append(7, []) == []
    assert await store.recent_runs() == []
    assert await store.head(run) == Head(0, Digest.ZERO)


async def test_a_rejected_batch_writes_nothing(store: SqlJournalStore, clock: Any) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [started(run, key(3))])
    before = await store.recent_runs()
    clock.advance(10)
    with pytest.raises(DuplicateEffectError):
        await store.append(epoch, [admitted(run), started(run, key(3))])
    assert await count(store, run) == 1
    assert await store.recent_runs() == before  # not even the activity time moved


async def test_an_oversized_record_is_refused_and_its_batch_not_written(
    store: SqlJournalStore,
) -> None:
    run, epoch = await leased(store)
    huge = Append(run, "Note", {"text": "x" * MAX_RECORD_BYTES})
    with pytest.raises(RecordTooLargeError) as caught:
        await store.append(epoch, [admitted(run), huge])
    assert caught.value.limit == MAX_RECORD_BYTES
    assert caught.value.size > MAX_RECORD_BYTES
    assert await count(store, run) == 0


async def test_a_large_batch_is_written_whole(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    written = await store.append(epoch, [note(run, str(i)) for i in range(2500)])
    assert [r.seq for r in written] == list(range(1, 2501))
    assert await store.verify(run) == written[-1].hash


# -- fencing and leases -----------------------------------------------------------------


async def test_a_stale_epoch_is_fenced_after_a_takeover(store: SqlJournalStore, clock: Any) -> None:
    run = RunId.generate()
    first = await store.acquire(run, "instance-a", 1)
    clock.advance(2)
    second = await store.acquire(run, "instance-b", LEASE)
    assert second.epoch == first.epoch + 1
    with pytest.raises(FencedError) as caught:
        await store.append(first.epoch, [admitted(run)])
    assert type(caught.value.run) is RunId
    assert (caught.value.run, caught.value.held, caught.value.current) == (
        run,
        first.epoch,
        second.epoch,
    )
    assert await store.append(second.epoch, [admitted(run)])


async def test_a_future_epoch_is_fenced(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    with pytest.raises(FencedError):
        await store.append(epoch + 1, [admitted(run)])


async def test_an_unleased_run_accepts_any_epoch(store: SqlJournalStore) -> None:
    run = RunId.generate()
    records = await store.append(5, [admitted(run)])
    assert records[0].epoch == 5


async def test_a_live_lease_is_refused_naming_holder_and_time_left(
    store: SqlJournalStore, clock: Any
) -> None:
    run = RunId.generate()
    held = await store.acquire(run, "instance-a", 60)
    clock.advance(15)
    with pytest.raises(LeaseHeldError) as caught:
        await store.acquire(run, "instance-b", 60)
    err = caught.value
    assert type(err.run) is RunId
    assert (err.run, err.owner, err.epoch, err.remaining_secs) == (
        run,
        "instance-a",
        held.epoch,
        45,
    )
    assert "instance-a" in str(err)


async def test_renewal_is_renew_and_keeps_the_epoch(store: SqlJournalStore, clock: Any) -> None:
    """Before issue 21 a same-owner ``acquire`` renewed; now it is refused, and ``renew`` is
    how a holder extends its lease (``tests/test_leases.py`` has the whole contract)."""
    run = RunId.generate()
    a = await store.acquire(run, "instance-a", 60)
    clock.advance(30)
    with pytest.raises(LeaseHeldError) as held:
        await store.acquire(run, "instance-a", 60)
    assert (held.value.owner, held.value.epoch, held.value.remaining_secs) == ("instance-a", 1, 30)
    b = await store.renew(run, "instance-a", a.epoch, 60)
    assert a.epoch == b.epoch == 1
    clock.advance(45)  # past the first expiry, inside the renewed one
    with pytest.raises(LeaseHeldError):
        await store.acquire(run, "instance-b", 60)


async def test_a_lapsed_owner_reacquiring_gets_a_new_epoch(
    store: SqlJournalStore, clock: Any
) -> None:
    run = RunId.generate()
    a = await store.acquire(run, "instance-a", 5)
    clock.advance(5)  # expires_at <= now is lapsed
    again = await store.acquire(run, "instance-a", 5)
    assert again.epoch == a.epoch + 1


async def test_a_released_lease_fences_its_epoch_and_the_next_acquire_advances(
    store: SqlJournalStore,
) -> None:
    run = RunId.generate()
    a = await store.acquire(run, "instance-a", LEASE)
    await store.release_lease(run, a.epoch)
    with pytest.raises(FencedError):
        await store.append(a.epoch, [admitted(run)])
    b = await store.acquire(run, "instance-b", LEASE)  # free at once: no TTL wait
    assert b.epoch == a.epoch + 1
    await store.release_lease(run, a.epoch)  # stale and repeated: a silent no-op
    with pytest.raises(LeaseHeldError):
        await store.acquire(run, "instance-c", LEASE)


async def test_release_keeps_the_epoch_so_it_never_restarts_at_one(
    store: SqlJournalStore, clock: Any
) -> None:
    run = RunId.generate()
    await store.acquire(run, "a", 1)
    clock.advance(2)
    second = await store.acquire(run, "b", LEASE)
    await store.release_lease(run, second.epoch)
    await store.release_lease(run, second.epoch)  # idempotent
    with pytest.raises(FencedError):
        await store.append(1, [admitted(run)])
    third = await store.acquire(run, "c", LEASE)
    assert third.epoch == 3


async def test_a_fenced_release_is_a_no_op(store: SqlJournalStore, clock: Any) -> None:
    run = RunId.generate()
    old = await store.acquire(run, "a", 1)
    clock.advance(2)
    new = await store.acquire(run, "b", LEASE)
    assert await store.release_lease(run, old.epoch) is None
    with pytest.raises(LeaseHeldError) as caught:
        await store.acquire(run, "c", LEASE)
    assert caught.value.owner == "b" and caught.value.epoch == new.epoch
    assert await store.append(new.epoch, [admitted(run)])


# -- exactly-once -----------------------------------------------------------------------


async def test_a_second_start_of_one_effect_is_refused(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [started(run, key(1))])
    with pytest.raises(DuplicateEffectError) as caught:
        await store.append(epoch, [started(run, key(1))])
    assert caught.value.effect_key == key(1) and type(caught.value.effect_key) is EffectKey


async def test_a_duplicate_start_inside_one_batch_is_refused(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    with pytest.raises(DuplicateEffectError):
        await store.append(epoch, [started(run, key(1)), note(run), started(run, key(1))])
    assert await count(store, run) == 0


async def test_the_duplicate_names_the_key_that_had_started(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [started(run, key(2))])
    with pytest.raises(DuplicateEffectError) as caught:
        await store.append(epoch, [started(run, key(1)), started(run, key(2))])
    assert caught.value.effect_key == key(2)


async def test_the_same_key_in_another_run_is_accepted(store: SqlJournalStore) -> None:
    run_a, epoch_a = await leased(store)
    run_b, epoch_b = await leased(store)
    assert await store.append(epoch_a, [started(run_a, key(2))])
    assert await store.append(epoch_b, [started(run_b, key(2))])


async def test_only_effect_started_is_unique(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    done = Append(run, "EffectDone", {"output": 1}, effect_key=key(4))
    await store.append(epoch, [started(run, key(4)), done, done])
    assert await count(store, run) == 3


# -- seal -------------------------------------------------------------------------------


async def test_a_sealed_run_refuses_appends_even_from_the_current_epoch(
    store: SqlJournalStore,
) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [admitted(run)])
    frozen = await store.seal(run, epoch, "succeeded")
    assert frozen == (await store.head(run)).hash
    with pytest.raises(RunSealedError) as caught:
        await store.append(epoch, [started(run, key(201))])
    assert caught.value.outcome == "succeeded" and caught.value.run == run
    assert type(caught.value.run) is RunId
    assert await store.head(run) == Head(1, frozen)


async def test_the_fence_comes_before_the_seal_check(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    await store.seal(run, epoch, "succeeded")
    with pytest.raises(FencedError):
        await store.append(epoch + 1, [admitted(run)])


async def test_a_seal_with_a_stale_epoch_is_fenced(store: SqlJournalStore, clock: Any) -> None:
    run = RunId.generate()
    old = await store.acquire(run, "a", 1)
    await store.append(old.epoch, [admitted(run)])
    clock.advance(2)
    await store.acquire(run, "b", LEASE)
    with pytest.raises(FencedError):
        await store.seal(run, old.epoch, "succeeded")
    assert await store.inclusion_proof(run) is None
    assert (await store.checkpoint()).size == 0


async def test_a_reseal_changes_nothing_and_returns_the_sealed_head(
    store: SqlJournalStore,
) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [admitted(run)])
    first = await store.seal(run, epoch, "succeeded")
    before = await store.checkpoint()
    assert await store.seal(run, epoch, "failed") == first
    assert await store.checkpoint() == before
    with pytest.raises(RunSealedError) as caught:
        await store.append(epoch, [admitted(run)])
    assert caught.value.outcome == "succeeded"


async def test_sealing_an_empty_run_logs_the_genesis_head(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    assert await store.seal(run, epoch, "cancelled") == Digest.ZERO
    inclusion = await store.inclusion_proof(run)
    assert inclusion is not None and inclusion.seal == Digest.ZERO


# -- outcome index ----------------------------------------------------------------------


async def test_sealed_runs_are_findable_by_outcome_newest_first(store: SqlJournalStore) -> None:
    runs = []
    for outcome in ("quarantined", "quarantined", "succeeded"):
        run, epoch = await leased(store)
        await store.append(epoch, [admitted(run), concluded(run, outcome)])
        await store.seal(run, epoch, outcome)
        runs.append(run)
    assert await store.runs_by_outcome("quarantined", 100) == [runs[1], runs[0]]
    assert await store.runs_by_outcome("quarantined", 1) == [runs[1]]
    assert await store.runs_by_outcome("succeeded", 100) == [runs[2]]
    assert await store.runs_by_outcome("quarantined", 0) == []


async def test_the_last_conclusion_wins(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [admitted(run), concluded(run, "failed")])
    assert run in await store.runs_by_outcome("failed", 10)  # indexed without a seal
    await store.append(epoch, [concluded(run, "succeeded")])
    await store.seal(run, epoch, "succeeded")
    assert run not in await store.runs_by_outcome("failed", 10)
    assert await store.runs_by_outcome("succeeded", 10) == [run]


async def test_the_last_conclusion_inside_one_batch_wins(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [concluded(run, "failed"), concluded(run, "exhausted")])
    assert await store.runs_by_outcome("failed", 10) == []
    assert await store.runs_by_outcome("exhausted", 10) == [run]


# -- recent runs, case history ----------------------------------------------------------


async def test_recent_runs_pages_reassemble_the_whole_index(
    store: SqlJournalStore, clock: Any
) -> None:
    runs = []
    for i in range(23):
        if i % 4 == 0:
            clock.advance(1)  # many ties, broken by run id
        run = RunId.generate()
        await store.append(1, [admitted(run)])
        runs.append((run, int(clock())))
    expected = sorted(runs, key=lambda p: (p[1], str(p[0])), reverse=True)
    assert await store.recent_runs(limit=100) == expected
    pages, after = [], None
    while page := await store.recent_runs(after=after, limit=5):
        pages.append(page)
        after = page[-1]
    assert [p for page in pages for p in page] == expected
    assert all(len(page) <= 5 for page in pages)


async def test_activity_moves_a_run_to_the_front(store: SqlJournalStore, clock: Any) -> None:
    old, new = RunId.generate(), RunId.generate()
    await store.append(1, [admitted(old)])
    clock.advance(5)
    await store.append(1, [admitted(new)])
    clock.advance(5)
    await store.append(1, [note(old)])
    assert [r for r, _ in await store.recent_runs()] == [old, new]


async def test_a_case_scan_selects_one_matter_from_any_run(store: SqlJournalStore) -> None:
    mine, theirs = CaseId.generate(), CaseId.generate()
    r1, e1 = await leased(store)
    r2 = RunId.generate()
    await store.append(e1, [admitted(r1, case=mine), admitted(r1, case=mine)])
    await store.append(1, [admitted(r2, case=theirs), note(r2)])
    sweeper = RunId.generate()
    await store.append(
        1, [Append(sweeper, "Swept", {"subject": "x", "action": "case_escalated"}, case=mine)]
    )
    history = await store.case_history(mine, 100)
    assert len(history) == 3 and all(r.case == mine for r in history)
    assert [(r.run, r.seq) for r in history] == sorted((r.run, r.seq) for r in history)
    assert len(await store.case_history(mine, 1)) == 1
    assert await store.case_history(CaseId.generate(), 10) == []


# -- cancellation -----------------------------------------------------------------------


async def test_a_stop_request_needs_no_lease(store: SqlJournalStore) -> None:
    run = RunId.generate()
    await store.acquire(run, "the-owner", LEASE)
    await store.append(1, [admitted(run)])
    assert await store.request_cancel(run, "operator", "stop it") is True
    assert await store.cancellation(run) == Cancellation("operator", "stop it")
    assert await store.cancellation(RunId.generate()) is None


async def test_the_first_asker_stays_on_the_record(store: SqlJournalStore) -> None:
    run = RunId.generate()
    assert await store.request_cancel(run, "alice", "first") is True
    assert await store.request_cancel(run, "bob", "second") is False
    assert await store.cancellation(run) == Cancellation("alice", "first")


# -- the Merkle log ---------------------------------------------------------------------


async def test_the_log_only_grows_and_every_earlier_checkpoint_is_a_prefix(
    store: SqlJournalStore,
) -> None:
    empty = await store.checkpoint()
    assert empty.size == 0 and empty.root == Digest.of(b"")
    seen: list[Checkpoint] = [empty]
    sealed = []
    for i in range(6):
        run, epoch = await leased(store)
        await store.append(epoch, [admitted(run)])
        await store.seal(run, epoch, "succeeded")
        sealed.append(run)
        cp = await store.checkpoint()
        assert cp.size == i + 1
        seen.append(cp)
    latest = seen[-1]
    for index, run in enumerate(sealed):
        inc = await store.inclusion_proof(run)
        assert inc is not None and inc.index == index and inc.size == latest.size
        assert verify_inclusion(
            leaf_hash(inc.seal), inc.index, inc.size, list(inc.proof), latest.root
        )
    for cp in seen:
        proof = await store.consistency_proof(cp.size)
        assert verify_consistency(cp.size, cp.root, latest.size, latest.root, proof)
    assert await store.consistency_proof(latest.size) == []
    assert await store.consistency_proof(0) == []


async def test_sealed_runs_lists_the_log_in_order(store: SqlJournalStore) -> None:
    assert await store.sealed_runs() == []
    sealed = []
    for _ in range(3):
        run, epoch = await leased(store)
        await store.append(epoch, [admitted(run)])
        sealed.append((run, await store.seal(run, epoch, "succeeded")))
    assert await store.sealed_runs() == sealed
    assert await other_tenant(store).sealed_runs() == []


async def test_a_consistency_proof_for_a_larger_log_is_an_error(store: SqlJournalStore) -> None:
    with pytest.raises(BackendError, match="larger than this log"):
        await store.consistency_proof(1)


async def test_an_unsealed_run_has_no_inclusion_proof(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [admitted(run)])
    assert await store.inclusion_proof(run) is None


async def test_the_checkpoint_names_the_tenants_log(store: SqlJournalStore) -> None:
    acme = store.for_tenant("acme")
    assert acme.origin == "agentplane/acme" and acme.tenant == "acme"
    assert (await acme.checkpoint()).origin == "agentplane/acme"
    assert (await store.checkpoint()).origin == store.origin


# -- tenant isolation -------------------------------------------------------------------


async def test_nothing_of_one_tenant_is_visible_or_affected_through_another(
    store: SqlJournalStore,
) -> None:
    a, b = store, other_tenant(store)
    case = CaseId.generate()
    run, epoch = await leased(a)
    await a.append(
        epoch, [admitted(run, case=case), started(run, key(1)), concluded(run, "failed")]
    )
    await a.seal(run, epoch, "failed")
    await a.request_cancel(run, "operator", "stop")

    assert await b.read(run) == []
    assert await b.head(run) == Head(0, Digest.ZERO)
    assert await b.case_history(case, 10) == []
    assert await b.runs_by_outcome("failed", 10) == []
    assert await b.recent_runs() == []
    assert (await b.checkpoint()).size == 0
    assert await b.inclusion_proof(run) is None
    with pytest.raises(BackendError):
        await b.consistency_proof(1)
    assert await b.cancellation(run) is None
    assert await b.verify(run) == Digest.ZERO

    lease_b = await b.acquire(run, "someone-else", LEASE)  # a's live lease does not block
    assert lease_b.epoch == 1
    # b's append is not fenced by a's lease, frozen by a's seal or deduplicated by a's keys
    assert await b.append(1, [started(run, key(1))])
    assert await b.request_cancel(run, "other", "x") is True
    await b.release_lease(run, 1)

    # and a is untouched
    assert len(await a.read(run)) == 3
    with pytest.raises(LeaseHeldError):
        await a.acquire(run, "intruder", LEASE)
    assert (await a.checkpoint()).size == 1
    assert await a.cancellation(run) == Cancellation("operator", "stop")


# -- tamper detection and signatures ----------------------------------------------------


async def _edit(store: SqlJournalStore, run: RunId, seq: int, **values: Any) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(
            update(Journal)
            .where(Journal.tenant == store.tenant, Journal.run_id == str(run), Journal.seq == seq)
            .values(**values)
        )


async def test_a_row_whose_bytes_were_edited_is_corrupt(store: SqlJournalStore) -> None:
    case = CaseId.generate()
    run, epoch = await leased(store)
    await store.append(epoch, [admitted(run, case=case) for _ in range(3)])
    await _edit(store, run, 2, raw=b'{"seq":2,"tampered":true}')
    for attempt in (store.read(run), store.verify(run), store.case_history(case, 10)):
        with pytest.raises(CorruptRecordError) as caught:
            await attempt
        assert caught.value.seq == 2
    assert len(await store.read(run, 3)) == 1  # the untouched tail still reads


async def test_a_deleted_record_breaks_verification(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [admitted(run) for _ in range(3)])
    async with store.engine.begin() as conn:
        await conn.execute(
            text("DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = 2"),
            {"t": store.tenant, "r": str(run)},
        )
    with pytest.raises(CorruptRecordError) as caught:
        await store.verify(run)
    assert caught.value.seq == 3


async def test_half_a_signature_is_corrupt_not_unsigned(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [admitted(run), admitted(run)])
    await _edit(store, run, 2, key_id="someone")
    with pytest.raises(CorruptRecordError) as caught:
        await store.read(run)
    assert caught.value.seq == 2


SEED_A = bytes(range(32))
SEED_B = bytes(range(1, 33))


async def test_signed_records_verify_and_a_wrong_key_does_not(make_store: Any) -> None:
    signer = Ed25519Signer("spiffe://plane/a", SEED_A)
    store = await make_store(signer=signer)
    run, epoch = await leased(store)
    written = await store.append(epoch, [admitted(run), note(run)])
    assert all(r.attestation and r.attestation.key_id == signer.key_id for r in written)
    assert [r.attestation for r in await store.read(run)] == [r.attestation for r in written]

    trusted = Ed25519Verifier().trust(signer.key_id, signer.public_key)
    assert await store.verify(run, trusted, require_signature=True) == written[-1].hash

    impostor = Ed25519Verifier().trust(signer.key_id, Ed25519Signer("x", SEED_B).public_key)
    with pytest.raises(CorruptRecordError) as caught:
        await store.verify(run, impostor)
    assert caught.value.seq == 1
    with pytest.raises(CorruptRecordError):
        await store.verify(run, Ed25519Verifier())  # unknown key id


async def test_an_unsigned_record_fails_only_when_a_signature_is_required(
    store: SqlJournalStore,
) -> None:
    run, epoch = await leased(store)
    await store.append(epoch, [admitted(run)])
    verifier = Ed25519Verifier().trust("k", Ed25519Signer("k", SEED_A).public_key)
    assert await store.verify(run, verifier) == (await store.head(run)).hash
    with pytest.raises(CorruptRecordError):
        await store.verify(run, verifier, require_signature=True)


# -- append_atomic ----------------------------------------------------------------------


class HostBase(DeclarativeBase):
    pass


class Account(HostBase):
    __tablename__ = "host_account"
    id: Mapped[str] = mapped_column(String, primary_key=True)
    balance: Mapped[int] = mapped_column(Integer)


class Posting(HostBase):
    __tablename__ = "host_posting"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account: Mapped[str] = mapped_column(ForeignKey("host_account.id"))
    amount: Mapped[int] = mapped_column(Integer)


@pytest.fixture
async def host_store(store: SqlJournalStore) -> SqlJournalStore:
    """The host application's own tables beside ours (made by the host, as hosts do)."""
    async with store.engine.begin() as conn:
        await conn.run_sync(HostBase.metadata.create_all)
    return store


async def _balance(store: SqlJournalStore, account: str) -> int | None:
    async with store.engine.connect() as conn:
        stmt = select(Account.balance).where(Account.id == account)
        return (await conn.execute(stmt)).scalar_one_or_none()


async def test_an_atomic_unit_commits_the_hosts_rows_and_the_records_together(
    host_store: SqlJournalStore,
) -> None:
    store, account = host_store, f"AC-{uuid.uuid4().hex[:8]}"
    run = RunId.generate()

    async def post(session: AsyncSession) -> list[Append]:
        session.add(Account(id=account, balance=0))
        await session.flush()
        acct = await session.get(Account, account)
        assert acct is not None
        acct.balance += 129
        session.add(Posting(account=account, amount=129))
        await session.execute(
            update(Account).where(Account.id == account).values(balance=Account.balance + 1)
        )
        return [Append(run, "EffectDone", {"output": {"posted": 129}})]

    records = await store.append_atomic(run, 1, post)
    assert [r.seq for r in records] == [1]
    assert await _balance(store, account) == 130
    assert await store.read(run) == records
    assert [r for r, _ in await store.recent_runs()] == [run]


async def test_a_failing_atomic_unit_leaves_neither(host_store: SqlJournalStore) -> None:
    store, account = host_store, f"AC-{uuid.uuid4().hex[:8]}"
    run = RunId.generate()
    refusal = RuntimeError("the account is closed")

    async def post(session: AsyncSession) -> list[Append]:
        session.add(Account(id=account, balance=129))
        await session.flush()
        raise refusal

    with pytest.raises(RuntimeError) as caught:
        await store.append_atomic(run, 1, post)
    assert caught.value is refusal
    assert await _balance(store, account) is None
    assert await store.read(run) == []
    assert await store.recent_runs() == []


async def test_a_refused_append_rolls_back_the_hosts_writes(host_store: SqlJournalStore) -> None:
    store, account = host_store, f"AC-{uuid.uuid4().hex[:8]}"
    run, epoch = await leased(store)
    await store.append(epoch, [started(run, key(1))])

    async def post(session: AsyncSession) -> list[Append]:
        session.add(Account(id=account, balance=1))
        return [started(run, key(1))]

    with pytest.raises(DuplicateEffectError):
        await store.append_atomic(run, epoch, post)
    assert await _balance(store, account) is None


async def test_a_fenced_atomic_unit_never_runs_its_work(
    host_store: SqlJournalStore, clock: Any
) -> None:
    store = host_store
    run = RunId.generate()
    old = await store.acquire(run, "a", 1)
    clock.advance(2)
    await store.acquire(run, "b", LEASE)
    calls = []

    async def work(session: AsyncSession) -> list[Append]:
        calls.append(1)
        return [note(run)]

    with pytest.raises(FencedError):
        await store.append_atomic(run, old.epoch, work)
    assert calls == []


async def test_an_atomic_unit_on_a_sealed_run_is_refused(store: SqlJournalStore) -> None:
    run, epoch = await leased(store)
    await store.seal(run, epoch, "succeeded")

    async def work(session: AsyncSession) -> list[Append]:
        return []

    with pytest.raises(RunSealedError):
        await store.append_atomic(run, epoch, work)


async def test_an_atomic_unit_with_no_records_still_bumps_activity(
    store: SqlJournalStore,
) -> None:
    run = RunId.generate()

    async def work(session: AsyncSession) -> list[Append]:
        return []

    assert await store.append_atomic(run, 1, work) == []
    assert [r for r, _ in await store.recent_runs()] == [run]


async def test_an_atomic_unit_may_not_append_to_another_run(store: SqlJournalStore) -> None:
    run, other = RunId.generate(), RunId.generate()

    async def work(session: AsyncSession) -> list[Append]:
        return [note(other)]

    with pytest.raises(ValueError, match="unit is for"):
        await store.append_atomic(run, 1, work)
    assert await store.read(other) == []


# -- bad input never reaches the database -----------------------------------------------


async def test_bad_arguments_are_refused_before_the_database(store: SqlJournalStore) -> None:
    run = RunId.generate()
    bad_calls = [
        (ValueError, lambda: store.read("run_not-a-ulid")),
        (ValueError, lambda: store.read(str(CaseId.generate()))),
        (TypeError, lambda: store.read(42)),
        (ValueError, lambda: store.append(-1, [admitted(run)])),
        (TypeError, lambda: store.append(1.5, [admitted(run)])),
        (TypeError, lambda: store.append(True, [admitted(run)])),
        (ValueError, lambda: store.append(1, [admitted(run), admitted(RunId.generate())])),
        (TypeError, lambda: store.append(1, [{"run": str(run)}])),
        (ValueError, lambda: store.append(1, [Append(run, "RunSealed", {"chain_head": "00"})])),
        (ValueError, lambda: store.acquire(run, "me", 0)),
        (TypeError, lambda: store.acquire(run, "me", "10")),
        (ValueError, lambda: store.acquire(run, "", 10)),
        (ValueError, lambda: store.seal(run, -3, "succeeded")),
        (ValueError, lambda: store.seal(run, 1, "")),
        (ValueError, lambda: store.release_lease(run, -1)),
        (ValueError, lambda: store.read(run, -1)),
        (ValueError, lambda: store.runs_by_outcome("failed", -1)),
        (ValueError, lambda: store.recent_runs(limit=-1)),
        (TypeError, lambda: store.recent_runs(after="yesterday")),
        (ValueError, lambda: store.case_history(CaseId.generate(), -5)),
        (ValueError, lambda: store.consistency_proof(-1)),
        (ValueError, lambda: store.request_cancel(run, "", "why")),
    ]
    for expected, call in bad_calls:
        with pytest.raises(expected):
            await call()
    assert await store.recent_runs() == []


def test_bad_records_are_refused_at_construction() -> None:
    run = RunId.generate()
    with pytest.raises(ValueError, match="epoch"):
        Append(run, "Note", {"epoch": 3})
    with pytest.raises(ValueError, match="phase"):
        Append(run, "Note", {}, phase="sideways")
    with pytest.raises(ValueError, match=r"payload\.items\[1\]"):
        Append(run, "Note", {"items": [1, float("nan")]})
    with pytest.raises(TypeError):
        Append(run, "Note", {"when": object()})
    with pytest.raises(ValueError):
        Append(run, "Note", {}, step=-1)


@pytest.mark.parametrize("name", ["", "   ", "a/b", "a:b", "nul\x00", "new\nline", "x" * 65])
def test_bad_tenant_names_are_refused(name: str, store: SqlJournalStore) -> None:
    with pytest.raises(ValueError):
        store.for_tenant(name)


def test_a_store_needs_an_async_engine() -> None:
    with pytest.raises(TypeError, match="AsyncEngine"):
        SqlJournalStore("sqlite:///x.db")  # type: ignore[arg-type]


async def test_a_bad_url_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="database URL"):
        await SqlJournalStore.connect("not a url")


async def test_activity_time_never_moves_backwards(store: SqlJournalStore, clock: Any) -> None:
    run = RunId.generate()
    await store.append(1, [admitted(run)])
    at = int(clock())
    clock.advance(-100)  # another instance with a slow clock
    await store.append(1, [note(run)])
    async with store.engine.connect() as conn:
        stmt = select(RunActivity.updated_at).where(
            RunActivity.tenant == store.tenant, RunActivity.run_id == str(run)
        )
        assert (await conn.execute(stmt)).scalar_one() == at


async def test_connecting_to_a_missing_sqlite_file_creates_nothing(tmp_path: Any) -> None:
    path = tmp_path / "nowhere.db"
    with pytest.raises(SchemaOutOfDateError) as caught:
        await SqlJournalStore.connect(f"sqlite+aiosqlite:///{path}")
    assert caught.value.current is None and "upgrade" in str(caught.value)
    assert not path.exists()


@pytest.mark.parametrize("origin", ["", "two\nlines", "tab\there"])
async def test_a_bad_origin_is_refused(origin: str, store: SqlJournalStore) -> None:
    with pytest.raises(ValueError, match="origin"):
        SqlJournalStore(store.engine, origin=origin)


def test_the_store_satisfies_the_contract_protocol(store: SqlJournalStore) -> None:
    from agentplane_journal import JournalStore

    assert isinstance(store, JournalStore)
    assert isinstance(store.for_tenant("acme"), JournalStore)
