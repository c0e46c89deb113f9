"""Admission keys: agentplane 0.22.0's admission conformance checks, in our own words, on both
dialects, and the paths, the retirement, the rebuild and the audit of ``run_admission``.

The reference's battery (``src_testkit_conformance.rs``): one key admits one run and the
loser is told which run won; the key is claimed by the append that writes the run (not by
taking the lease); a refused append spends no key; an unkeyed admission claims nothing;
retiring a key frees it and leaves the run. Beyond it: every refusal inside the append's
transaction, every write path (``append``, ``append_atomic``, a host's ``session=``), tenant
scoping, a hostile stored id, and the table as an index that can be audited and rebuilt.
The race of 32 instances for one key is ``test_admission_race.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal import (
    Append,
    CorruptRecordError,
    Digest,
    DuplicateAdmissionError,
    DuplicateEffectError,
    FencedError,
    Record,
    RecordTooLargeError,
    RunId,
    RunSealedError,
    SqlJournalStore,
    canonical_bytes,
)
from agentplane_journal.core.admission import MAX_ADMISSION_KEY_BYTES

from support.admissions import LEASE, admit, admitted_under, sql
from support.clock import FakeClock
from support.helpers import admitted, key, note, started


async def rows(store: SqlJournalStore) -> list[tuple[Any, ...]]:
    async with store.engine.connect() as conn:
        found = await conn.execute(
            text("SELECT key, run_id FROM run_admission WHERE tenant = :t ORDER BY key"),
            {"t": store.tenant},
        )
        return [tuple(r) for r in found]


# -- the record --------------------------------------------------------------------------


def test_the_key_is_a_payload_member_written_only_when_given() -> None:
    run = RunId.generate()
    plain = Record.seal(admitted(run).body(1, 1), Digest.ZERO)
    assert b"idempotency_key" not in plain.raw  # an unkeyed admission's bytes are 0.4.0's
    assert plain.idempotency_key is None and admitted(run).idempotency_key is None
    keyed = admitted_under(run, "webhook/evt_1")
    body = keyed.body(1, 1)
    assert keyed.idempotency_key == "webhook/evt_1"
    record = Record.seal(body, Digest.ZERO)
    assert record.idempotency_key == "webhook/evt_1"
    # Canonical JSON: a member like any other, sorted among the kind's fields.
    assert record.raw == canonical_bytes(body)
    assert b'"epoch":1,"idempotency_key":"webhook/evt_1","input":null' in record.raw
    # Other kinds carrying a member of that name claim nothing.
    assert Append(run, "Note", {"idempotency_key": "k"}).idempotency_key is None


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("", ValueError),
        ("   ", ValueError),
        ("a\x00b", ValueError),
        ("x" * (MAX_ADMISSION_KEY_BYTES + 1), ValueError),
        ("é" * (MAX_ADMISSION_KEY_BYTES // 2 + 1), ValueError),  # bytes, not characters
        (None, TypeError),
        (7, TypeError),
    ],
)
def test_a_key_no_admission_could_mean_is_refused_at_construction(
    value: object, error: type[Exception]
) -> None:
    payload = {"capability": "c", "idempotency_key": value}
    with pytest.raises(error, match="idempotency_key"):
        Append(RunId.generate(), "RunAdmitted", payload)


def test_a_stored_key_that_is_not_a_string_is_corruption_not_a_type_error() -> None:
    run = RunId.generate()
    base = {"seq": 1, "run": run.ulid, "epoch": 1, "v": 4, "kind": "RunAdmitted"}
    assert Record.seal({**base, "idempotency_key": None}, Digest.ZERO).idempotency_key is None
    for hostile in (5, ["k"], {"k": 1}, True):
        record = Record.seal({**base, "idempotency_key": hostile}, Digest.ZERO)
        with pytest.raises(CorruptRecordError, match="idempotency_key"):
            record.idempotency_key  # noqa: B018


# -- the reference's conformance checks ---------------------------------------------------


async def test_one_key_admits_one_run_and_the_loser_is_told_which(store: SqlJournalStore) -> None:
    first = RunId.generate()
    held = await store.acquire(first, "conformance", LEASE)
    await store.append(held.epoch, [admitted_under(first, "conformance/one-message")])
    second = RunId.generate()
    lease = await store.acquire(second, "conformance", LEASE)
    with pytest.raises(DuplicateAdmissionError) as refused:
        await store.append(lease.epoch, [admitted_under(second, "conformance/one-message")])
    assert refused.value.run == first and refused.value.key == "conformance/one-message"
    assert str(first) in str(refused.value)
    assert await store.read(second) == []  # nothing of the refused batch was written
    assert (await store.head(second)).seq == 0
    assert await store.admitted_as("conformance/one-message") == first
    # The holder itself admitted again under its key is refused too, naming itself.
    with pytest.raises(DuplicateAdmissionError) as again:
        await store.append(held.epoch, [admitted_under(first, "conformance/one-message")])
    assert again.value.run == first
    assert len(await store.read(first)) == 1


async def test_the_key_is_claimed_by_the_append_not_by_the_lease(store: SqlJournalStore) -> None:
    assert await store.admitted_as("conformance/not-yet") is None
    run = RunId.generate()
    lease = await store.acquire(run, "conformance", LEASE)
    assert await store.admitted_as("conformance/not-yet") is None
    await store.append(lease.epoch, [admitted_under(run, "conformance/not-yet"), note(run)])
    assert await store.admitted_as("conformance/not-yet") == run


async def _refuse_spanning(store: SqlJournalStore, run: RunId, epoch: int) -> None:
    other = RunId.generate()
    await store.append(epoch, [admitted_under(run, "k"), admitted(other)])


async def _refuse_fenced(store: SqlJournalStore, run: RunId, epoch: int) -> None:
    await store.append(epoch + 1, [admitted_under(run, "k")])


async def _refuse_sealed(store: SqlJournalStore, run: RunId, epoch: int) -> None:
    await store.append(epoch, [note(run)])
    await store.seal(run, epoch, "failed")
    await store.append(epoch, [admitted_under(run, "k")])


async def _refuse_duplicate_effect(store: SqlJournalStore, run: RunId, epoch: int) -> None:
    await store.append(epoch, [started(run, key(1))])
    await store.append(epoch, [admitted_under(run, "k"), started(run, key(1))])


async def _refuse_too_large(store: SqlJournalStore, run: RunId, epoch: int) -> None:
    await store.append(epoch, [admitted_under(run, "k"), note(run, "x" * (1 << 20))])


async def _refuse_one_of_two_keys(store: SqlJournalStore, run: RunId, epoch: int) -> None:
    await admit(store, "taken")
    await store.append(
        epoch,
        [admitted_under(run, "k"), admitted_under(run, "taken")],  # "k" sorts after
    )


REFUSALS: dict[str, tuple[Callable[..., Any], type[Exception]]] = {
    "spans two runs": (_refuse_spanning, ValueError),
    "fenced": (_refuse_fenced, FencedError),
    "sealed": (_refuse_sealed, RunSealedError),
    "duplicate effect": (_refuse_duplicate_effect, DuplicateEffectError),
    "record too large": (_refuse_too_large, RecordTooLargeError),
    "another key is taken": (_refuse_one_of_two_keys, DuplicateAdmissionError),
}


@pytest.mark.parametrize("why", list(REFUSALS))
async def test_a_refused_append_spends_no_key(store: SqlJournalStore, why: str) -> None:
    refuse, error = REFUSALS[why]
    run = RunId.generate()
    lease = await store.acquire(run, "conformance", LEASE)
    with pytest.raises(error):
        await refuse(store, run, lease.epoch)
    # Nothing of the refused batch was written, and the key was not spent (in the last
    # case it was claimed first, then rolled back with the batch).
    assert all(r.kind != "RunAdmitted" for r in await store.read(run))
    assert await store.admitted_as("k") is None
    taker = await admit(store, "k")
    assert await store.admitted_as("k") == taker


async def test_an_unkeyed_admission_claims_nothing(store: SqlJournalStore) -> None:
    for _ in range(2):
        await admit(store, None)
    assert await store.admitted_as("") is None
    assert await rows(store) == []


async def test_admission_keys_are_per_tenant(store: SqlJournalStore) -> None:
    other = store.for_tenant(f"{store.tenant}x")
    mine = await admit(store, "shared/message")
    theirs = await admit(other, "shared/message")  # two tenants, one business key: ordinary
    assert await store.admitted_as("shared/message") == mine
    assert await other.admitted_as("shared/message") == theirs
    assert await other.forget_admissions(2**40) == 1
    assert await store.admitted_as("shared/message") == mine  # the other tenant's, untouched


async def test_retiring_a_key_frees_it_and_leaves_the_run(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    claimed_at = int(clock.now)
    run = await admit(store, "conformance/retired")
    assert await store.forget_admissions(0) == 0  # a cutoff before the claim retires nothing
    assert await store.forget_admissions(claimed_at) == 0  # strictly before
    assert await store.admitted_as("conformance/retired") == run
    clock.advance(3 * 86_400)
    later = await admit(store, "conformance/kept")
    cutoff = datetime.fromtimestamp(claimed_at + 86_400, UTC)
    assert await store.forget_admissions(cutoff) == 1  # an aware datetime, like the int
    assert await store.admitted_as("conformance/retired") is None
    assert await store.admitted_as("conformance/kept") == later
    assert len(await store.read(run)) == 1  # the run and its RunAdmitted record stay
    assert (await store.read(run))[0].idempotency_key == "conformance/retired"
    # The door is open again: a redelivery now admits a second run.
    again = await admit(store, "conformance/retired")
    assert again != run and await store.admitted_as("conformance/retired") == again


async def test_forget_admissions_takes_an_instant_and_nothing_else(store: SqlJournalStore) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        await store.forget_admissions(datetime(2030, 1, 1))
    for bad in (1.5, "2030-01-01", None, True, timedelta(days=1)):
        with pytest.raises(TypeError, match="older_than"):
            await store.forget_admissions(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="older_than"):
        await store.forget_admissions(-1)
    with pytest.raises(TypeError):
        await store.forget_admissions()  # type: ignore[call-arg]
    east = timezone(timedelta(hours=5))
    assert await store.forget_admissions(datetime(1971, 1, 1, tzinfo=east)) == 0


async def test_admitted_as_reports_an_unparsable_stored_run_id_as_corruption(
    store: SqlJournalStore,
) -> None:
    await sql(
        store,
        "INSERT INTO run_admission (tenant, key, run_id, admitted_at) VALUES (:t, 'x', 'nope', 0)",
    )
    with pytest.raises(CorruptRecordError, match=r"run_admission\.run_id"):
        await store.admitted_as("x")
    run = RunId.generate()  # and a claim that meets it is corruption too, not a refusal
    lease = await store.acquire(run, "conformance", LEASE)
    with pytest.raises(CorruptRecordError):
        await store.append(lease.epoch, [admitted_under(run, "x")])
    assert await store.read(run) == []
    with pytest.raises(TypeError):
        await store.admitted_as(None)  # type: ignore[arg-type]


# -- every write path ---------------------------------------------------------------------


async def test_append_atomic_claims_in_its_transaction(store: SqlJournalStore) -> None:
    first = RunId.generate()
    lease = await store.acquire(first, "conformance", LEASE)

    async def work(session: AsyncSession) -> Sequence[Append]:
        return [admitted_under(first, "atomic")]

    await store.append_atomic(first, lease.epoch, work)
    assert await store.admitted_as("atomic") == first
    second = RunId.generate()
    lease = await store.acquire(second, "conformance", LEASE)

    async def again(session: AsyncSession) -> Sequence[Append]:
        return [admitted_under(second, "atomic")]

    with pytest.raises(DuplicateAdmissionError) as refused:
        await store.append_atomic(second, lease.epoch, again)
    assert refused.value.run == first
    assert await store.read(second) == []


async def test_a_host_session_claims_in_its_savepoint_and_commits_with_the_host(
    store: SqlJournalStore,
) -> None:
    first, second = RunId.generate(), RunId.generate()
    epochs = [(await store.acquire(r, "conformance", LEASE)).epoch for r in (first, second)]
    async with AsyncSession(store.engine) as session:
        await store.append(epochs[0], [admitted_under(first, "host")], session=session)
        # Inside the host's transaction, before it commits: the claim is there for it.
        assert await store.admitted_as("host", session=session) == first
        with pytest.raises(DuplicateAdmissionError) as refused:
            await store.append(epochs[1], [admitted_under(second, "host")], session=session)
        assert refused.value.run == first
        # The refusal rolled back its savepoint only: the host's transaction goes on.
        await store.append(epochs[1], [admitted_under(second, "host/2")], session=session)
        await session.commit()
    assert await store.admitted_as("host") == first
    assert await store.admitted_as("host/2") == second
    assert [r.idempotency_key for r in await store.read(second)] == ["host/2"]

    third = RunId.generate()
    epoch = (await store.acquire(third, "conformance", LEASE)).epoch
    async with AsyncSession(store.engine) as session:
        await store.append(epoch, [admitted_under(third, "host/rolled-back")], session=session)
        await session.rollback()  # the host's rollback takes the claim with the records
    assert await store.admitted_as("host/rolled-back") is None
    assert await store.read(third) == []


async def test_an_ungrouped_store_claims_too(make_store: Callable[..., Any]) -> None:
    store: SqlJournalStore = await make_store(group_commit=False)
    run = await admit(store, "ungrouped")
    assert await store.admitted_as("ungrouped") == run
    with pytest.raises(DuplicateAdmissionError):
        await admit(store, "ungrouped")


# -- the index: audit and rebuild ---------------------------------------------------------


async def test_an_intact_index_audits_clean_and_reindexes_to_itself(
    store: SqlJournalStore,
) -> None:
    runs = [await admit(store, f"key/{i}") for i in range(3)] + [await admit(store, None)]
    before = await rows(store)
    audit = await store.audit_admissions()
    assert audit.ok and (audit.rows, audit.admissions, audit.unclaimed, audit.shared) == (
        3,
        3,
        0,
        0,
    )
    rebuilt = await store.reindex_admissions()
    assert rebuilt.ok and (rebuilt.claimed, rebuilt.removed) == (0, 0)
    assert await rows(store) == before
    assert [await store.admitted_as(f"key/{i}") for i in range(3)] == runs[:3]


async def test_a_lost_row_is_reported_and_claimed_again(store: SqlJournalStore) -> None:
    run = await admit(store, "lost")
    await sql(store, "DELETE FROM run_admission WHERE tenant = :t")
    audit = await store.audit_admissions()
    # Not a failure: forget_admissions leaves exactly this on purpose.
    assert audit.ok and audit.unclaimed == 1 and "'lost'" in audit.notes[0]
    rebuilt = await store.reindex_admissions()
    assert rebuilt.ok and rebuilt.claimed == 1
    assert await store.admitted_as("lost") == run
    assert (await store.audit_admissions()).unclaimed == 0


ROWS = {
    # a row naming a run whose admission carries no key
    "orphan: an unkeyed run": "UPDATE run_admission SET run_id = :unkeyed WHERE tenant = :t",
    # a row naming a run with no records at all
    "orphan: no such run": "UPDATE run_admission SET run_id = :nobody WHERE tenant = :t",
    # a row for a key no record carries
    "orphan: an invented key": "UPDATE run_admission SET key = 'invented' WHERE tenant = :t",
    "not a run id": "UPDATE run_admission SET run_id = 'run_garbage' WHERE tenant = :t",
}


@pytest.mark.parametrize("edit", list(ROWS))
async def test_a_row_no_record_backs_is_a_finding_and_the_rebuild_removes_it(
    store: SqlJournalStore, edit: str
) -> None:
    holder = await admit(store, "held")
    unkeyed = await admit(store, None)
    await sql(store, ROWS[edit], unkeyed=str(unkeyed), nobody=str(RunId.generate()))
    audit = await store.audit_admissions()
    assert not audit.ok
    [finding] = audit.findings
    assert finding.what == ("bad-row" if edit == "not a run id" else "orphan-row"), finding
    assert not finding.repaired
    rebuilt = await store.reindex_admissions()
    assert rebuilt.ok and rebuilt.removed == 1 and rebuilt.findings[0].repaired
    # The key goes back to the run whose record carries it.
    assert rebuilt.claimed == 1 and await store.admitted_as("held") == holder
    assert await rows(store) == [("held", str(holder))]
    assert (await store.audit_admissions()).ok


async def test_a_tampered_admission_is_reported_not_indexed_and_its_row_is_kept(
    store: SqlJournalStore,
) -> None:
    run = await admit(store, "tampered")
    other = await admit(store, "lost-and-tampered")
    await sql(store, "DELETE FROM run_admission WHERE tenant = :t AND key = 'lost-and-tampered'")
    for victim in (run, other):
        await sql(
            store,
            "UPDATE journal SET raw = :raw WHERE tenant = :t AND run_id = :r AND seq = 1",
            raw=b'{"edited":true}',
            r=str(victim),
        )
    audit = await store.audit_admissions()
    assert not audit.ok
    found = sorted((f.what, f.run) for f in audit.findings)
    assert found == sorted(
        [("bad-record", str(run)), ("bad-record", str(other)), ("unchecked-row", str(run))]
    ), audit.findings
    rebuilt = await store.reindex_admissions()
    assert not rebuilt.ok and rebuilt.claimed == 0 and rebuilt.removed == 0
    # Kept, not deleted: a row of a run that cannot be read may still close a real door.
    assert await store.admitted_as("tampered") == run
    assert await store.admitted_as("lost-and-tampered") is None  # never indexed from it


async def _forge(store: SqlJournalStore, run: RunId, body_key: object) -> None:
    """A hash-valid seq-1 RunAdmitted whose key no honest writer writes."""
    body = {
        "seq": 1,
        "run": run.ulid,
        "epoch": 0,
        "v": 4,
        "kind": "RunAdmitted",
        "capability": "c",
        "idempotency_key": body_key,
    }
    raw = canonical_bytes(body)
    digest = hashlib.sha256(bytes(32) + raw).digest()
    await sql(
        store,
        "INSERT INTO journal (tenant, run_id, seq, epoch, kind, prev_hash, hash, raw) "
        "VALUES (:t, :r, 1, 0, 'RunAdmitted', :p, :h, :raw)",
        r=str(run),
        p=bytes(32),
        h=digest,
        raw=raw,
    )


async def test_a_forged_key_no_admission_could_claim_is_reported(store: SqlJournalStore) -> None:
    blank, number = RunId.generate(), RunId.generate()
    await _forge(store, blank, "")
    await _forge(store, number, 5)
    assert (await store.verify(blank)) == (await store.read(blank))[0].hash  # the chain is fine
    audit = await store.audit_admissions()
    assert sorted((f.what, f.run) for f in audit.findings) == sorted(
        [("bad-key", str(blank)), ("bad-record", str(number))]
    )
    rebuilt = await store.reindex_admissions()
    assert not rebuilt.ok and rebuilt.claimed == 0
    assert await rows(store) == []


async def test_a_key_carried_by_two_runs_keeps_its_holder_or_goes_to_the_earliest(
    store: SqlJournalStore,
) -> None:
    first = await admit(store, "reused")
    assert await store.forget_admissions(2**40) == 1  # retired: the door reopens
    second = await admit(store, "reused")
    audit = await store.audit_admissions()
    assert audit.ok and audit.shared == 1 and audit.unclaimed == 0
    assert "carried by 2 runs" in audit.notes[0]
    # A row that names one of them stays as it is: the later run holds the key.
    assert (await store.reindex_admissions()).claimed == 0
    assert await store.admitted_as("reused") == second
    # With no row, the earliest run id holds: every rebuild makes the same choice.
    await sql(store, "DELETE FROM run_admission WHERE tenant = :t")
    assert (await store.reindex_admissions()).claimed == 1
    earliest = min((first, second), key=str)
    assert await store.admitted_as("reused") == earliest


async def test_the_rebuild_claims_retired_keys_again(store: SqlJournalStore) -> None:
    runs = [await admit(store, f"old/{i}") for i in range(3)]
    assert await store.forget_admissions(2**40) == 3
    audit = await store.audit_admissions()
    assert audit.ok and audit.unclaimed == 3
    assert (await store.reindex_admissions()).claimed == 3
    assert [await store.admitted_as(f"old/{i}") for i in range(3)] == runs


async def test_the_scan_pages_by_count_and_by_bytes(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentplane_journal.journal import admission_audit, reads

    monkeypatch.setattr(admission_audit, "SCAN_PAGE", 3)
    monkeypatch.setattr(reads, "PAGE_BYTES", 300)  # about one admission per statement
    runs = [await admit(store, f"page/{i}") for i in range(8)]
    for run in runs[:2]:
        await store.append(1, [note(run), admitted_under(run, f"{run}/second")])
    await sql(store, "DELETE FROM run_admission WHERE tenant = :t")
    rebuilt = await store.reindex_admissions()
    assert rebuilt.ok and rebuilt.admissions == 10 and rebuilt.claimed == 10
    assert [await store.admitted_as(f"page/{i}") for i in range(8)] == runs
    assert await store.admitted_as(f"{runs[1]}/second") == runs[1]


async def test_hostile_storage_classes_are_findings_never_tracebacks(
    make_store: Callable[..., Any], dialect: str
) -> None:
    if dialect != "sqlite":
        pytest.skip("PostgreSQL's column types refuse these values")
    store: SqlJournalStore = await make_store()
    run = await admit(store, "real")
    await sql(
        store,
        "INSERT INTO run_admission (tenant, key, run_id, admitted_at) VALUES "
        "(:t, X'FF00', 'run_x', 0), (:t, 7, :r, 'soon'), (:t, 'blob-run', X'00', 0)",
        r=str(run),
    )
    audit = await store.audit_admissions()
    found = sorted((f.what, f.key) for f in audit.findings)
    # 7 became the text '7' (the column's affinity), a key the run does not carry.
    assert found == [("bad-row", "b'\\xff\\x00'"), ("bad-row", "blob-run"), ("orphan-row", "7")]
    assert await store.admitted_as("real") == run
    rebuilt = await store.reindex_admissions()
    assert rebuilt.ok and rebuilt.removed == 3 and rebuilt.claimed == 0
    assert await rows(store) == [("real", str(run))]
    assert (await store.audit_admissions()).ok


async def test_a_store_in_its_own_schema_claims_there(pg_database: Any) -> None:
    """Every admission statement names the store's schema (its bind's translate map), on
    the store's own units and in a host's session alike."""
    from agentplane_journal.migrations.commands import upgrade

    url = pg_database(migrated=False)
    await upgrade(url, schema="journal_here")
    store = await SqlJournalStore.connect(url, schema="journal_here")
    try:
        first = await admit(store, "schema/key")
        with pytest.raises(DuplicateAdmissionError) as refused:
            await admit(store, "schema/key")
        assert refused.value.run == first
        second = RunId.generate()
        epoch = (await store.acquire(second, "conformance", LEASE)).epoch
        async with AsyncSession(store.engine) as session:
            await store.append(epoch, [admitted_under(second, "schema/host")], session=session)
            await session.commit()
        assert await store.admitted_as("schema/host") == second
        assert (await store.audit_admissions()).ok
        assert await store.forget_admissions(2**40) == 2
        assert (await store.reindex_admissions()).claimed == 2
        assert await store.admitted_as("schema/key") == first
    finally:
        await store.close()
