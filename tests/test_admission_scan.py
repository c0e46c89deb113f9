"""The admission audit's database-bound scan (``journal/admission_audit.py``: the page-wise scan
of ``RunAdmitted`` records, a row's check against its run read page by page, the repairs),
on both dialects.

Written against the mutants of the scan that survived tests/test_admissions.py (tools/
mutation.py admission_scan): each test pins what a finding says and what a repair does,
with the page sizes made small so that every page boundary is crossed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import RunId, SqlJournalStore, canonical_bytes
from agentplane_journal.journal import admission_audit, reads

from support.admissions import admit, admitted_under, sql
from support.helpers import note

NO_RECORDS = "the run it names has no records"
NONE_UNDER_KEY = "the run it names has records, and none is an admission under this key"


async def _noted(store: SqlJournalStore, key: str | None, notes: int) -> RunId:
    run = await admit(store, key)
    await store.append(1, [note(run, f"n{i}") for i in range(notes)])
    return run


@pytest.mark.parametrize("notes", [0, 1, 4, 5])
async def test_an_orphan_row_is_read_against_its_whole_run_page_by_page(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch, notes: int
) -> None:
    monkeypatch.setattr(reads, "STREAM_PAGE", 2)
    run = await _noted(store, "mine", notes)
    await sql(store, "UPDATE run_admission SET key = 'invented' WHERE tenant = :t")
    audit = await store.audit_admissions()
    [finding] = audit.findings
    assert (finding.what, finding.key, finding.run) == ("orphan-row", "invented", str(run))
    assert finding.detail == NONE_UNDER_KEY and not finding.repaired


async def test_a_row_naming_a_run_without_records_says_so(store: SqlJournalStore) -> None:
    await admit(store, "mine")
    nobody = RunId.generate()
    await sql(store, "UPDATE run_admission SET run_id = :r WHERE tenant = :t", r=str(nobody))
    [finding] = (await store.audit_admissions()).findings
    assert (finding.what, finding.run, finding.detail) == ("orphan-row", str(nobody), NO_RECORDS)


@pytest.mark.parametrize(("page", "notes"), [(1, 0), (2, 1), (2, 3)])
async def test_a_row_backed_past_the_first_page_of_its_run_is_kept(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch, page: int, notes: int
) -> None:
    """A row whose run's admission under its key sits after a page of other records (at
    seq ``notes + 2``): backed, so neither a finding nor removed (the scan is told to miss
    it), every record of the run read once, none skipped."""
    monkeypatch.setattr(reads, "STREAM_PAGE", page)
    run = await _noted(store, None, notes)
    await store.append(1, [admitted_under(run, "late")])  # claims the key: the row
    monkeypatch.setattr(admission_audit, "_take", lambda *_: None)  # the scan sees nothing
    for audit in (await store.audit_admissions(), await store.reindex_admissions()):
        assert audit.findings == [] and audit.removed == 0
    assert await store.admitted_as("late") == run


def _hide(monkeypatch: pytest.MonkeyPatch, *runs: RunId) -> None:
    """The scan misses ``runs``' records, as it misses an admission committed behind it."""
    take = admission_audit._take
    hidden = {str(r) for r in runs}

    def partial(row: Any, claims: Any, report: Any) -> None:
        if row[6] not in hidden:
            take(row, claims, report)

    monkeypatch.setattr(admission_audit, "_take", partial)


async def _shared(store: SqlJournalStore, *keys: str) -> list[RunId]:
    """Two runs carrying each of ``keys`` (retired in between): the later ones, which the
    rows name."""
    for key in keys:
        await admit(store, key)
    await store.forget_admissions(2**40)
    return [await admit(store, key) for key in keys]


async def test_a_row_the_scan_missed_keeps_its_key_held_and_the_audit_goes_on(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row backed by a run the scan did not see holds its key (nothing to claim for the run
    the scan saw), and so does a row whose run cannot be read; the rows after them are
    judged too."""
    backed, unreadable = await _shared(store, "a-dup", "b-dup")
    await sql(
        store,
        "UPDATE journal SET raw = :raw WHERE tenant = :t AND run_id = :r AND seq = 1",
        raw=b'{"edited":true}',
        r=str(unreadable),
    )
    orphan = await admit(store, "z-orphan")
    await sql(store, "UPDATE run_admission SET key = 'z-invented' WHERE key = 'z-orphan'")
    _hide(monkeypatch, backed, unreadable)
    for audit in (await store.audit_admissions(), await store.reindex_admissions()):
        found = sorted((f.what, f.key, f.run) for f in audit.findings)
        assert found == [
            ("orphan-row", "z-invented", str(orphan)),
            ("unchecked-row", "b-dup", str(unreadable)),
        ], audit.findings
        assert audit.unclaimed == 1 and "'z-orphan'" in audit.notes[-1]  # only the invented one
    assert await store.admitted_as("a-dup") == backed
    assert await store.admitted_as("b-dup") == unreadable


async def test_a_row_the_repair_finds_backed_keeps_its_key_from_being_claimed_again(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    [later] = await _shared(store, "dup")
    _hide(monkeypatch, later)
    _told_orphan_checker(monkeypatch)
    rebuilt = await store.reindex_admissions()
    assert [(f.what, f.key, f.repaired) for f in rebuilt.findings] == [("orphan-row", "dup", False)]
    assert (rebuilt.removed, rebuilt.unclaimed, rebuilt.claimed) == (0, 0, 0)
    assert await store.admitted_as("dup") == later


async def test_the_scan_counts_every_admission_across_pages(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admission_audit, "SCAN_PAGE", 2)
    monkeypatch.setattr(reads, "PAGE_BYTES", 1)  # one record per statement
    runs = [await admit(store, f"k{i}") for i in range(5)] + [await admit(store, None)]
    audit = await store.audit_admissions()
    assert audit.ok and (audit.rows, audit.admissions, audit.unclaimed) == (5, 5, 0)
    await sql(store, "DELETE FROM run_admission WHERE tenant = :t AND key IN ('k0', 'k4')")
    rebuilt = await store.reindex_admissions()
    assert (rebuilt.rows, rebuilt.admissions, rebuilt.unclaimed, rebuilt.claimed) == (3, 5, 2, 2)
    assert [await store.admitted_as(f"k{i}") for i in range(5)] == runs[:5]


async def test_many_unclaimed_keys_are_counted_with_a_few_examples(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admission_audit, "_CLAIM_CHUNK", 2)
    runs = [await admit(store, f"u{i}") for i in range(admission_audit.EXAMPLES + 2)]
    await sql(store, "DELETE FROM run_admission WHERE tenant = :t")
    audit = await store.audit_admissions()
    assert audit.ok and audit.unclaimed == len(runs) and audit.claimed == 0
    assert len(audit.notes) == admission_audit.EXAMPLES
    assert all("is held by no row" in line for line in audit.notes)
    rebuilt = await store.reindex_admissions()
    assert rebuilt.claimed == len(runs)
    assert [await store.admitted_as(f"u{i}") for i in range(len(runs))] == runs


def _told_orphan_checker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The row check calls every row an orphan: what a record committed between the check
    and the repair looks like to the repair."""

    def checker(tenant: str, key: str, run_id: str) -> Any:
        async def check(session: Any) -> tuple[str, str]:
            return "orphan", "told so"

        return check

    monkeypatch.setattr(admission_audit, "_checker", checker)


def _told_orphan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan misses every admission and the row check calls every row an orphan."""
    monkeypatch.setattr(admission_audit, "_take", lambda *_: None)
    _told_orphan_checker(monkeypatch)


async def test_the_repair_checks_the_run_again_and_keeps_a_row_it_backs(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await admit(store, "kept")
    other = await admit(store, "other")
    _told_orphan(monkeypatch)
    rebuilt = await store.reindex_admissions()
    found = sorted((f.what, f.key, f.run, f.detail, f.repaired) for f in rebuilt.findings)
    assert found == [
        ("orphan-row", "kept", str(run), "told so", False),
        ("orphan-row", "other", str(other), "told so", False),
    ]
    assert rebuilt.removed == 0 and rebuilt.claimed == 0 and rebuilt.unclaimed == 0
    assert await store.admitted_as("kept") == run and await store.admitted_as("other") == other


async def test_a_key_shared_by_many_runs_is_noted_with_five_of_them(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admission_audit, "EXAMPLES", 2)
    shared: dict[str, list[RunId]] = {}
    for key, count in (("six", 6), ("five", 5), ("two", 2)):
        for _ in range(count):
            shared.setdefault(key, []).append(await admit(store, key))
            await store.forget_admissions(2**40)  # retired: the key admits again
    audit = await store.audit_admissions()
    assert audit.ok and audit.shared == 3 and audit.unclaimed == 3
    six = sorted(str(r) for r in shared["six"])
    five = sorted(str(r) for r in shared["five"])
    # keys in the order the scan meets them (by run id: "six" first), at most EXAMPLES each
    assert [n for n in audit.notes if "carried by" in n] == [
        f"key 'six' is carried by 6 runs: {', '.join(six[:5])}, ...",
        f"key 'five' is carried by 5 runs: {', '.join(five)}",
    ]
    assert [n for n in audit.notes if "held by no row" in n] == [
        f"key 'six' of {six[0]} is held by no row",
        f"key 'five' of {five[0]} is held by no row",
    ]
    assert len(audit.notes) == 4


async def test_a_repair_removes_its_own_tenants_row_only(
    make_store: Callable[..., Any],
) -> None:
    here: SqlJournalStore = await make_store()
    there: SqlJournalStore = await make_store(tenant=here.tenant + "-other")
    run = await admit(there, "k")  # there, "k" is run's; here, a row claims it for nothing
    await sql(
        here,
        "INSERT INTO run_admission (tenant, key, run_id, admitted_at) VALUES (:t, 'k', :r, 0)",
        r=str(run),
    )
    rebuilt = await here.reindex_admissions()
    assert rebuilt.removed == 1 and await here.admitted_as("k") is None
    assert await there.admitted_as("k") == run and (await there.audit_admissions()).ok


async def test_a_row_changed_since_it_was_read_is_left_as_it_is(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repair deletes the row as it was read: one that another run took meanwhile (here
    inside the repair's own transaction, just before its DELETE) is not removed, not
    counted, and its key not claimed again."""
    unkeyed = await admit(store, None)
    holder = await admit(store, "moved")
    await sql(store, "UPDATE run_admission SET run_id = :r WHERE tenant = :t", r=str(unkeyed))
    remover = admission_audit._remover

    def racing(tenant: str, key: Any, run_id: Any, *, check: bool) -> Any:
        remove = remover(tenant, key, run_id, check=check)

        async def first_another_run_takes_it(session: Any) -> bool:
            await session.execute(
                text("UPDATE run_admission SET run_id = :r WHERE tenant = :t AND key = :k"),
                {"r": str(holder), "t": tenant, "k": key},
            )
            return bool(await remove(session))

        return first_another_run_takes_it

    monkeypatch.setattr(admission_audit, "_remover", racing)
    rebuilt = await store.reindex_admissions()
    assert [(f.key, f.repaired) for f in rebuilt.findings] == [("moved", False)]
    assert rebuilt.removed == 0 and rebuilt.claimed == 0
    # the repair's transaction, the other run's change with it, was rolled back
    assert await store.admitted_as("moved") == unkeyed


async def test_a_bad_row_is_removed_without_reading_its_run(
    make_store: Callable[..., Any], dialect: str
) -> None:
    """A row whose key is not text is removed as it is: its run, even one that cannot be
    read, is not consulted (only an orphan row's run is)."""
    if dialect != "sqlite":
        pytest.skip("PostgreSQL's column types refuse a key that is not text")
    store: SqlJournalStore = await make_store()
    run = await admit(store, "real")
    await sql(
        store,
        "UPDATE journal SET raw = :raw WHERE tenant = :t AND run_id = :r AND seq = 1",
        raw=b'{"edited":true}',
        r=str(run),
    )
    await sql(
        store,
        "INSERT INTO run_admission (tenant, key, run_id, admitted_at) VALUES (:t, X'FF00', :r, 0)",
        r=str(run),
    )
    rebuilt = await store.reindex_admissions()
    bad = [f for f in rebuilt.findings if f.what == "bad-row"]
    assert [(f.key, f.repaired) for f in bad] == [("b'\\xff\\x00'", True)] and rebuilt.removed == 1


async def test_a_bad_row_is_removed_even_if_rows_sit_under_its_run_id(
    make_store: Callable[..., Any], dialect: str
) -> None:
    """A row whose run id is not one is removed as it is, even when hostile journal rows
    sit under that same text (which would make its run 'unreadable' if it were read)."""
    if dialect != "sqlite":
        pytest.skip("the hostile journal row goes around PostgreSQL's column checks")
    store: SqlJournalStore = await make_store()
    await admit(store, "k")
    await sql(store, "UPDATE run_admission SET run_id = 'run_garbage' WHERE tenant = :t")
    await sql(
        store,
        "INSERT INTO journal (tenant, run_id, seq, epoch, kind, prev_hash, hash, raw) "
        "VALUES (:t, 'run_garbage', 1, 0, 'Note', :z, :z, X'7B7D')",
        z=bytes(32),
    )
    rebuilt = await store.reindex_admissions()
    bad = [(f.key, f.run, f.repaired) for f in rebuilt.findings if f.what == "bad-row"]
    assert bad == [("k", "run_garbage", True)]


async def _forged(store: SqlJournalStore, key: object) -> RunId:
    """A hash-valid seq-1 ``RunAdmitted`` whose key no honest writer writes."""
    run = RunId.generate()
    body = {"seq": 1, "run": run.ulid, "epoch": 0, "v": 4, "kind": "RunAdmitted"}
    raw = canonical_bytes({**body, "capability": "c", "idempotency_key": key})
    await sql(
        store,
        "INSERT INTO journal (tenant, run_id, seq, epoch, kind, prev_hash, hash, raw) "
        "VALUES (:t, :r, 1, 0, 'RunAdmitted', :p, :h, :raw)",
        r=str(run),
        p=bytes(32),
        h=hashlib.sha256(bytes(32) + raw).digest(),
        raw=raw,
    )
    return run


async def test_a_bad_record_or_key_is_named_with_its_run_seq_and_reason(
    store: SqlJournalStore,
) -> None:
    long_blank = " " * 600  # blank, and past 512 bytes: shown cut at 80 characters
    numbered, blank = await _forged(store, 5), await _forged(store, long_blank)
    findings = {f.what: f for f in (await store.audit_admissions()).findings}
    bad_record, bad_key = findings["bad-record"], findings["bad-key"]
    assert (bad_record.key, bad_record.run, bad_record.seq) == (None, str(numbered), 1)
    assert "idempotency_key" in bad_record.detail
    assert (bad_key.key, bad_key.run, bad_key.seq) == (" " * 80, str(blank), 1)
    assert bad_key.detail and "key" in bad_key.detail
