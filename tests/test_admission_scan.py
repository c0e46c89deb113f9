"""The admission audit's database-bound scan (``journal/admission_audit.py``: the page-wise scan
of ``RunAdmitted`` records, a row's check against its run read page by page, the repairs),
on both dialects.

Written against the mutants of the scan that survived tests/test_admissions.py (tools/
mutation.py admission_scan): each test pins what a finding says and what a repair does,
with the page sizes made small so that every page boundary is crossed.
"""

from __future__ import annotations

import pytest

from agentplane_journal import RunId, SqlJournalStore
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


async def test_a_row_backed_past_the_first_page_of_its_run_is_kept(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row whose run's admission under its key sits after a page of other records:
    backed, so neither a finding nor removed (the scan itself is told to miss it)."""
    monkeypatch.setattr(reads, "STREAM_PAGE", 2)
    run = await _noted(store, None, 3)
    await store.append(1, [admitted_under(run, "late")])  # claims the key: the row
    monkeypatch.setattr(admission_audit, "_take", lambda *_: None)  # the scan sees nothing
    for audit in (await store.audit_admissions(), await store.reindex_admissions()):
        assert audit.findings == [] and audit.removed == 0
    assert await store.admitted_as("late") == run


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
