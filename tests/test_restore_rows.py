"""A restore writes the rows the store's own append and seal wrote, column by column.

Both dialects. Restore's second pass no longer replays through ``append``: it writes the
rows pass one established (:mod:`agentplane_journal.journal.restore_spool`) through
:func:`~agentplane_journal.journal.bulk.write_rows`. So the restored tenant is compared with
the store-written one table by table: every journal column (bytes, hashes, links, epoch,
kind, effect key, case, key id and signature; on SQLite the storage class too), the log's
tree, the seals' heads, positions and outcomes, the outcome and admission indexes and the
activity rows, leaving out only what a restore documents it does not carry (timestamps,
the outcome ordinals' order). Then: pass two writes what pass one judged even if the file
changes between the passes, and rows that no longer continue the head the target holds (a
writer in the target mid-restore) fail their chunk, nothing of it written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from agentplane_journal import AGENTPLANE_0_22, Append, CaseId, RunId, SqlJournalStore
from agentplane_journal.db.models import (
    Journal,
    JournalCounter,
    LogTree,
    RunActivity,
    RunAdmission,
    RunOutcome,
    RunSeal,
)
from agentplane_journal.journal import bulk as bulk_mod
from agentplane_journal.journal import restore as restore_mod
from agentplane_journal.journal import restore_read
from agentplane_journal.journal.bulk import ChainMovedError
from agentplane_journal.journal.restore import RestoreIncomplete, restore_export

from support.exports import build, export_to, lines_of, other_tenant, write_lines

pytestmark = pytest.mark.slow


async def _mixed(store: SqlJournalStore) -> None:
    """``build``'s history (admission key, case, started effects, a run that changed
    epochs, a step and phase, conclusions, seals out of id order), then records of the
    other wire profile after ``migrate_profile``: one continuing an old run, one new run
    concluded and sealed."""
    made = await build(store, 14, long=False)
    await store.migrate_profile(AGENTPLANE_0_22)
    old = next(r for r in made["runs"] if r not in made["sealed"])
    await store.append(1, [AGENTPLANE_0_22.append(old, "Note", {"text": "after", "y": 2.5})])
    new = RunId.generate()
    await store.append(1, [AGENTPLANE_0_22.append(new, "Note", {"text": "new", "z": [1, None]})])
    head = await store.head(new)
    concluded = {"outcome": "succeeded", "chain_head": head.hash.hex()}
    await store.append(1, [AGENTPLANE_0_22.append(new, "RunSealed", concluded)])
    await store.seal(new, 1, "succeeded")


async def _tables(store: SqlJournalStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the tenant holds in the tables an append or a seal writes, without the
    tenant and without what a restore does not carry (timestamps, ordinals)."""
    t = store.tenant
    queries = {
        "journal": select(
            Journal.run_id,
            Journal.seq,
            Journal.epoch,
            Journal.kind,
            Journal.effect_key,
            Journal.prev_hash,
            Journal.hash,
            Journal.raw,
            Journal.key_id,
            Journal.signature,
            Journal.case_id,
        )
        .where(Journal.tenant == t)
        .order_by(Journal.run_id, Journal.seq),
        "log_tree": select(LogTree.level, LogTree.idx, LogTree.hash, LogTree.run_id)
        .where(LogTree.tenant == t)
        .order_by(LogTree.level, LogTree.idx),
        "run_seal": select(RunSeal.run_id, RunSeal.chain_head, RunSeal.log_index, RunSeal.outcome)
        .where(RunSeal.tenant == t)
        .order_by(RunSeal.run_id),
        "run_outcome": select(RunOutcome.run_id, RunOutcome.outcome)
        .where(RunOutcome.tenant == t)
        .order_by(RunOutcome.run_id),
        "run_admission": select(RunAdmission.key, RunAdmission.run_id)
        .where(RunAdmission.tenant == t)
        .order_by(RunAdmission.key),
        "run_activity": select(RunActivity.run_id)
        .where(RunActivity.tenant == t)
        .order_by(RunActivity.run_id),
    }
    if store.dialect.name == "sqlite":  # the storage class of every column too
        queries["journal_storage"] = (
            select(*(func.typeof(c) for c in Journal.__table__.columns if c.name != "tenant"))
            .where(Journal.tenant == t)
            .order_by(Journal.run_id, Journal.seq)
        )
    out: dict[str, list[tuple[Any, ...]]] = {}
    async with store.engine.connect() as conn:
        for name, stmt in queries.items():
            out[name] = [tuple(r) for r in (await conn.execute(stmt)).all()]
        counter = select(JournalCounter.value).where(JournalCounter.name == f"log_position/{t}")
        out["log_position"] = [tuple(r) for r in (await conn.execute(counter)).all()]
    return out


async def test_a_restore_writes_the_rows_append_and_seal_wrote_column_by_column(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    await _mixed(store)
    path = tmp_path / "e.jsonl"
    cp, _ = await export_to(store, path)
    target = other_tenant(store)
    restored = await restore_export(target, path)
    assert restored.is_faithful and restored.differing == 0, restored.to_json()
    source, copy = await _tables(store), await _tables(target)
    assert source["journal"] and source["run_seal"] and source["run_admission"]
    assert {r[3] for r in source["journal"]} >= {"RunAdmitted", "EffectStarted", "RunSealed"}
    assert any(r[4] is not None for r in source["journal"])  # an effect key
    assert any(r[10] is not None for r in source["journal"])  # a case
    assert len({r[2] for r in source["journal"]}) == 2  # two epochs
    for table, rows in source.items():
        assert copy[table] == rows, table
    assert (await target.checkpoint()).root == cp.root


async def test_pass_two_writes_what_pass_one_judged_whatever_the_file_becomes(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pass two writes from pass one's spool, never from the file again: a file swapped for
    another between the passes changes nothing that is written."""
    await build(store, 8, long=False)
    path = tmp_path / "e.jsonl"
    cp, _ = await export_to(store, path)
    judged = restore_mod.check_frame

    def then_swapped(p: Path, spool: Any = None) -> Any:
        frame = judged(p, spool)
        lines = lines_of(p)
        write_lines(p, [lines[0], lines[-1]])  # every run gone from the file
        return frame

    monkeypatch.setattr(restore_mod, "check_frame", then_swapped)
    target = other_tenant(store)
    restored = await restore_export(target, path)
    assert restored.is_faithful and restored.records > 0, restored.to_json()
    assert (await target.checkpoint()).root == cp.root


async def test_rows_that_no_longer_continue_the_targets_head_fail_their_chunk(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer appends to a run the restore has begun (its first chunk committed):
    the next chunk's rows continue the old head, so the chunk is refused whole and the
    restore names what it committed."""
    run = RunId.generate()
    await store.append(1, [Append(run, "Note", {"text": f"n{i}"}) for i in range(6)])
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    target = other_tenant(store)
    real = restore_mod.write_rows
    calls = 0

    async def a_writer_between_chunks(into: SqlJournalStore, ops: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            await into.append(1, [Append(run, "Note", {"text": "another writer"})])
        await real(into, ops)

    monkeypatch.setattr(restore_mod, "write_rows", a_writer_between_chunks)
    monkeypatch.setattr(restore_mod, "BATCH", 3)
    with pytest.raises(RestoreIncomplete, match="PARTIAL") as caught:
        await restore_export(target, path)
    assert isinstance(caught.value.cause, ChainMovedError)
    assert caught.value.records == 3
    held = await target.read(run)
    assert [r.body.get("text") for r in held] == ["n0", "n1", "n2", "another writer"]


async def test_an_honest_files_wire_bytes_are_not_parsed_a_second_time(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pass one builds each record from the line's readable body when that body reproduces
    the wire bytes exactly (both wire profiles here); the wire bytes are parsed on their own
    only for a line whose body does not (then judged as before)."""
    await _mixed(store)
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    real, parsed = restore_read._wire, 0

    def counted(value: Any, number: int) -> Any:
        nonlocal parsed
        parsed += 1
        return real(value, number)

    monkeypatch.setattr(restore_read, "_wire", counted)
    restored = await restore_export(other_tenant(store), path)
    assert restored.is_faithful and restored.records > 0, restored.to_json()
    assert parsed == 0


async def test_chunks_of_bare_rows_are_written_without_their_null_columns_and_the_same(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk whose rows carry no effect key, case, key id or signature is inserted by the
    INSERT of the other eight columns (``bulk._insert_rows``, ``bare``); a chunk with one
    such row, by the INSERT of all of them (the rows before it given their NULLs). Either
    way the rows are the ones ``append`` and ``seal`` wrote, column by column."""
    for i in range(6):
        run = RunId.generate()
        await store.append(1, [Append(run, "Note", {"i": i}), Append(run, "Note", {"t": "x"})])
        if i % 2:
            head = await store.head(run)
            concluded = {"outcome": "succeeded", "chain_head": head.hash.hex()}
            await store.append(1, [Append(run, "RunSealed", concluded)])
            await store.seal(run, 1, "succeeded")
    cased = other_tenant(store)  # bare rows, then one with a case: no effect in the chunk
    run = RunId.generate()
    await cased.append(1, [Append(run, "Note", {"i": 0})])
    await cased.append(1, [Append(run, "Note", {"i": 1}, case=CaseId.generate())])
    mixed = other_tenant(store)
    await _mixed(mixed)
    taken: list[bool] = []
    real = bulk_mod._insert_rows

    async def insert(*args: Any) -> None:
        taken.append(args[-1])
        await real(*args)

    monkeypatch.setattr(bulk_mod, "_insert_rows", insert)
    for source in (store, cased, mixed):
        path = tmp_path / f"{source.tenant}.jsonl"
        cp, _ = await export_to(source, path)
        target = other_tenant(store)
        restored = await restore_export(target, path)
        assert restored.is_faithful and restored.differing == 0, restored.to_json()
        expected, copy = await _tables(source), await _tables(target)
        for table, rows in expected.items():
            assert copy[table] == rows, table
        assert (await target.checkpoint()).root == cp.root
    assert taken == [True, False, False]
