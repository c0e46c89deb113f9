"""Restore in batches (journal/bulk.write_ops): boundaries anywhere, all-or-nothing batches.

Both dialects, small sizes: ``restore.BATCH`` is made tiny so that batch boundaries fall
inside runs, between runs and between a run's records and its seal. What must hold: the same
root and the same file back whatever the batch; a batch refused by the store leaves nothing
of itself and the restore says exactly what it left (:class:`RestoreIncomplete`); a record
that cannot be replayed is refused before anything is written; and a chunk of operations is
judged as the single calls would be (fenced, sealed, duplicate effect), all or nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.errors import (
    CommitUnknownError,
    DuplicateEffectError,
    FencedError,
    RunSealedError,
)
from agentplane_journal.journal import restore as restore_mod
from agentplane_journal.journal.bulk import AppendOp, SealOp, write_ops
from agentplane_journal.journal.restore import RestoreIncomplete, RestoreRefused, restore_export

from support.exports import build, export_to, lines_of, other_tenant, write_lines
from support.helpers import key, note, started

pytestmark = pytest.mark.slow

RUN_BLOCK = '"kind":"agentplane.export.run"'


async def _records_in(store: SqlJournalStore) -> int:
    total = 0
    for run in await store.audit_runs(None, 1000):
        total += len(await store.read(RunId.parse(str(run))))
    return total


async def test_batch_boundaries_anywhere_restore_the_same_root_and_file(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    cp, trailer = await export_to(store, path)
    lines = lines_of(path)
    for batch in (1, 4, 9):  # mid-run, between runs, between a run's records and its seal
        monkeypatch.setattr(restore_mod, "BATCH", batch)
        target = other_tenant(store)
        restored = await restore_export(target, path)
        assert restored.is_faithful, (batch, restored.to_json())
        assert restored.differing == 0 and restored.records == trailer.records
        assert (await target.checkpoint()).root == cp.root
        again = tmp_path / f"again-{batch}.jsonl"
        await export_to(target, again)
        assert lines_of(again)[1:] == lines[1:], batch


async def test_a_batch_refused_part_way_is_reported_with_what_is_committed(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    lines = lines_of(path)
    # Another writer in the target: a lease on the last run in the file, taken and released
    # (which fences every epoch). The target holds no record or seal, so it is empty; the
    # file is sound; only the store, in a late batch, refuses the run's records.
    blocks = [i for i, x in enumerate(lines) if RUN_BLOCK in x]
    last = RunId.parse(json.loads(lines[blocks[-1]])["run"])
    target = other_tenant(store)
    lease = await target.acquire(last, "another writer", 60)
    await target.release_lease(last, lease.epoch)
    monkeypatch.setattr(restore_mod, "BATCH", 4)
    with pytest.raises(RestoreIncomplete, match="PARTIAL history") as caught:
        await restore_export(target, path)
    failed = caught.value
    assert isinstance(failed.cause, FencedError)
    # What it says is committed is what the target holds: whole batches, nothing of the
    # refused one (its run's records are absent).
    assert failed.records > 0
    assert failed.records == await _records_in(target)
    assert failed.seals == (await target.checkpoint()).size
    # And the partial target is not restored into again: it is not empty.
    monkeypatch.setattr(restore_mod, "BATCH", 2000)
    with pytest.raises(RestoreRefused, match="not empty"):
        await restore_export(target, path)


async def test_a_batch_whose_commit_is_lost_is_named_unknown_never_counted(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A COMMIT whose connection is lost may or may not have landed: the batches before it
    are counted as committed, that one is named unknown (here it did land), none is lied
    about either way."""
    await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    real = restore_mod.write_rows
    calls = 0

    async def lost_at_third_commit(target: SqlJournalStore, ops: list[object]) -> object:
        nonlocal calls
        calls += 1
        result = await real(target, ops)  # type: ignore[arg-type]
        if calls == 3:  # committed, and the answer never came back
            raise CommitUnknownError("connection lost during COMMIT")
        return result

    monkeypatch.setattr(restore_mod, "write_rows", lost_at_third_commit)
    monkeypatch.setattr(restore_mod, "BATCH", 4)
    target = other_tenant(store)
    with pytest.raises(RestoreIncomplete, match="unknown") as caught:
        await restore_export(target, path)
    failed = caught.value
    assert isinstance(failed.cause, CommitUnknownError)
    assert failed.unknown_records > 0
    held = await _records_in(target)
    # Surely committed: the two batches before; unknown: the third (which did land here).
    assert failed.records + failed.unknown_records == held
    assert failed.seals + failed.unknown_seals == (await target.checkpoint()).size
    assert "surely committed" in str(failed)


@pytest.mark.parametrize("damage", ["epoch", "run"])
async def test_a_record_that_cannot_be_replayed_is_refused_before_anything_is_written(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    await build(store, 8, long=False)
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    lines = lines_of(path)
    last = len(lines) - 2  # the last record line, far past the first batch
    record = json.loads(lines[last])
    body = json.loads(record["raw"])
    if damage == "epoch":
        body["epoch"] = "1"
    else:
        body["run"] = str(RunId.generate())  # a record filed under another run's block
    record["raw"] = json.dumps(body)
    lines[last] = json.dumps(record)
    write_lines(path, lines)
    monkeypatch.setattr(restore_mod, "BATCH", 1)
    target = other_tenant(store)
    with pytest.raises(RestoreRefused, match=f"line {last + 1}"):
        await restore_export(target, path)
    assert (await target.checkpoint()).size == 0 and not await target.audit_runs(None, 1)


async def test_write_ops_seals_as_single_seals_do_and_is_all_or_nothing(
    store: SqlJournalStore,
) -> None:
    runs = [RunId.generate() for _ in range(4)]
    one_by_one = store.for_tenant("singles")
    for run in runs:
        await one_by_one.append(1, [note(run, "a"), note(run, "b")])
    for run in reversed(runs):
        await one_by_one.seal(run, 1, "succeeded")
    # The same history in one batch: the appends, then the seals in the same order, one
    # sealed twice (first seal wins, no second leaf).
    ops = [AppendOp(1, [note(r, "a"), note(r, "b")]) for r in runs]
    seals = [SealOp(r, 1, "succeeded") for r in reversed(runs)]
    results = await write_ops(store, [*ops, *seals, SealOp(runs[0], 1, "again")])
    assert results[-1] == results[-2]
    cp, other = await store.checkpoint(), await one_by_one.checkpoint()
    assert (cp.size, cp.root) == (4, other.root)
    for run in runs:
        assert [r.raw for r in await store.read(run)] == [r.raw for r in await one_by_one.read(run)]
    before = await store.checkpoint()

    fresh = RunId.generate()
    leased = RunId.generate()
    await store.acquire(leased, "owner", 60)
    refusals = [
        ([AppendOp(1, [note(fresh)]), AppendOp(7, [note(leased)])], FencedError),
        (
            [
                AppendOp(1, [note(fresh)]),
                SealOp(fresh, 1, "done"),
                AppendOp(1, [note(fresh)]),
            ],
            RunSealedError,
        ),
        (
            [AppendOp(1, [started(fresh, key(1))]), AppendOp(1, [started(fresh, key(1))])],
            DuplicateEffectError,
        ),
        (
            [AppendOp(1, [note(fresh)]), AppendOp(1, [note(runs[0])])],
            RunSealedError,
        ),
    ]
    for ops_, error in refusals:
        with pytest.raises(error):
            await write_ops(store, ops_)
        assert await store.read(fresh) == [], error
        assert await store.checkpoint() == before, error
