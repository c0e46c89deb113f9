"""A one-record append by a writer that knows the run's current head refuses exactly what
the general unit of work refuses: a displaced lease, a released lease, a sealed run.

On PostgreSQL such an append is ``sql.ONE_RECORD`` (one statement, scalar parameters), and
its head check passes, so only the statement's own lease and seal checks stand between the
append and the journal: each case here went red with that check dropped from
``ONE_RECORD`` alone (docs/performance.md, 2026-12-05). On SQLite the same behaviour comes
from the general unit of work. The races are in ``tests/test_races_fastpath.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentplane_journal import FencedError, RunId, RunSealedError, SqlJournalStore

from support.clock import FakeClock
from support.helpers import admitted, note

Make = Callable[..., Any]


async def _warm(make_store: Make, ttl: int) -> tuple[SqlJournalStore, SqlJournalStore, Any]:
    """Two stores of one tenant; the first holds a lease on a fresh run and has appended
    to it twice (its writer knows the head)."""
    a: SqlJournalStore = await make_store()
    b: SqlJournalStore = await make_store()
    run = RunId.generate()
    lease = await a.acquire(run, "first", ttl)
    await a.append(lease.epoch, [admitted(run)])
    await a.append(lease.epoch, [note(run, "warm")])
    return a, b, lease


async def test_one_record_lands_at_the_head(make_store: Make) -> None:
    a, _, lease = await _warm(make_store, 300)
    (record,) = await a.append(lease.epoch, [note(lease.run, "third")])
    assert record.seq == 3
    assert [r.seq for r in await a.read(lease.run)] == [1, 2, 3]
    await a.verify(lease.run)


async def test_a_displaced_writer_that_knows_the_head_is_fenced(
    make_store: Make, clock: FakeClock
) -> None:
    a, b, old = await _warm(make_store, 1)
    clock.advance(5)
    new = await b.acquire(old.run, "second", 300)
    assert new.epoch == old.epoch + 1
    with pytest.raises(FencedError):
        await a.append(old.epoch, [note(old.run, "stale")])
    assert [r.epoch for r in await b.read(old.run)] == [old.epoch] * 2


async def test_a_writer_whose_lease_was_released_is_fenced(make_store: Make) -> None:
    a, b, lease = await _warm(make_store, 300)
    await b.release_lease(lease.run, lease.epoch)
    with pytest.raises(FencedError):
        await a.append(lease.epoch, [note(lease.run, "after release")])
    assert len(await b.read(lease.run)) == 2


async def test_a_writer_that_knows_the_sealed_head_is_refused(make_store: Make) -> None:
    a, b, lease = await _warm(make_store, 300)
    await b.seal(lease.run, lease.epoch, "succeeded")
    await a.head(lease.run)  # the writer learns the sealed head: its head check passes
    with pytest.raises(RunSealedError):
        await a.append(lease.epoch, [note(lease.run, "after seal")])
    assert [r.body.get("text") for r in await b.read(lease.run) if r.kind == "Note"] == ["warm"]
