"""The hot append statements' ``xmin`` proof, with the window it closes held open.

``sql.ONE`` and ``sql.ONE_RECORD`` (and ``sql.MANY``, per run of a group) read the run's
lease, seal and head from the statement's snapshot, taken before the run mutex row is
locked. A transaction that changes the run and commits between the two is caught only by
the proof: the mutex row version the statement locked (``a.xmin``, its latest, after the
lock) is not the one its snapshot saw. In a race that window is tens of microseconds, and
the primary key or the head check refuses first in every race the fast-path tests could
build (``tests/test_races_fastpath.py``), so here the window is held open: the statement,
exactly as shipped but for a pause inserted before its lock, is what the store sends, and
a first ``acquire`` of the run's lease commits during the pause. That change moves no head,
so nothing but the proof stands in the way: a lease row the snapshot does not see reads as
"no lease", which lets any epoch append.

With the proof, the statement writes nothing and the append goes to the general unit of
work, which sees the lease and fences the appender. Without it (the second test removes it
from the same paused statement), the record lands after the lease was granted: the window
is real in every run, so the first test is not passing by luck of timing. The group's test
also shows the proof is per run: the other run of the same statement lands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal import FencedError, RunId, SqlJournalStore
from agentplane_journal.backends.postgresql import sql as pgsql

from support.helpers import admitted, note

Make = Callable[..., Any]

_LOCK = (
    "    FROM {s}run_activity a WHERE a.tenant = $1 AND a.run_id = $2\n    FOR UPDATE SKIP LOCKED\n"
)
_PAUSED = (
    "    FROM {s}run_activity a WHERE a.tenant = $1 AND a.run_id = $2\n"
    "      AND (SELECT 1 FROM pg_sleep(1.5)) = 1\n"
    "    FOR UPDATE SKIP LOCKED\n"
)
_PROOF = (
    "a.xmin = (\n"
    "        SELECT s.xmin FROM {s}run_activity s WHERE s.tenant = $1 AND s.run_id = $2\n"
    "    ) AS fresh"
)
_NAMES = ("ONE", "ONE_RECORD")


def _paused(text: str, proof: bool) -> str:
    assert text.count(_LOCK) == 1 and text.count(_PROOF) == 1
    text = text.replace(_LOCK, _PAUSED)
    return text if proof else text.replace(_PROOF, "true AS fresh")


async def _pausing(url: str, pause: str = "pg_sleep(1.5)") -> None:
    """Until a backend sleeps in the paused statement (so its snapshot is taken)."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            for _ in range(500):
                found = await conn.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE wait_event = 'PgSleep' AND position(:pause IN query) > 0"
                    ),
                    {"pause": pause},
                )
                if found:
                    return
                await conn.rollback()
                await asyncio.sleep(0.01)
        raise AssertionError("the paused statement never started")
    finally:
        await engine.dispose()


async def _append_while_a_lease_is_granted(
    make_store: Make, url: str, monkeypatch: pytest.MonkeyPatch, records: int, proof: bool
) -> tuple[BaseException | None, list[Any], Any]:
    """A warm store appends ``records`` records with no lease (so at any epoch) by the paused
    statement; a second store takes the run's first lease during the pause."""
    a: SqlJournalStore = await make_store()
    b: SqlJournalStore = await make_store()
    run = RunId.generate()
    await a.append(0, [admitted(run)])
    await a.append(0, [note(run, "warm")])  # a's writer knows the head: the hot path
    await b.head(run)  # b's connection is open: its acquire is quick
    for name in _NAMES:
        monkeypatch.setattr(pgsql, name, _paused(getattr(pgsql, name), proof))
    appending = asyncio.ensure_future(a.append(0, [note(run, f"{i}") for i in range(records)]))
    await _pausing(url)  # a's statement has its snapshot and is pausing
    lease = await b.acquire(run, "second", 300)  # commits while a's statement pauses
    assert not appending.done()
    error = (await asyncio.gather(appending, return_exceptions=True))[0]
    monkeypatch.undo()
    return error if isinstance(error, BaseException) else None, await b.read(run), lease


@pytest.mark.parametrize("records", [1, 2], ids=["ONE_RECORD", "ONE"])
@pytest.mark.parametrize("dialect", ["postgresql"])
async def test_a_lease_granted_after_the_snapshot_fences_the_hot_append(
    make_store: Make, database_url: str, monkeypatch: pytest.MonkeyPatch, records: int
) -> None:
    error, journal, lease = await _append_while_a_lease_is_granted(
        make_store, database_url, monkeypatch, records, proof=True
    )
    assert isinstance(error, FencedError), error
    assert len(journal) == 2
    assert lease.epoch == 1


@pytest.mark.parametrize("records", [1, 2], ids=["ONE_RECORD", "ONE"])
@pytest.mark.parametrize("dialect", ["postgresql"])
async def test_without_the_proof_the_same_window_lets_the_append_land(
    make_store: Make, database_url: str, monkeypatch: pytest.MonkeyPatch, records: int
) -> None:
    """The first test with the proof removed: the append lands after the lease was granted
    (what the proof exists to refuse), so the pause does open the window."""
    error, journal, _ = await _append_while_a_lease_is_granted(
        make_store, database_url, monkeypatch, records, proof=False
    )
    assert error is None
    assert len(journal) == 2 + records


# -- the group statement ---------------------------------------------------------------

_GROUP_LOCK = (
    "    WHERE a.tenant = $1 AND a.run_id = ANY ($2::text[])\n"
    "    ORDER BY a.run_id\n"
    "    FOR UPDATE SKIP LOCKED\n"
)
_GROUP_PAUSED = (
    "    WHERE a.tenant = $1 AND a.run_id = ANY ($2::text[])\n"
    "      AND (SELECT 1 FROM pg_sleep(1.25)) = 1\n"
    "    ORDER BY a.run_id\n"
    "    FOR UPDATE SKIP LOCKED\n"
)
_GROUP_PROOF = (
    "a.xmin = (\n"
    "        SELECT s.xmin FROM {s}run_activity s WHERE s.tenant = $1 AND s.run_id = a.run_id\n"
    "    ) AS fresh"
)


def _group_paused(proof: bool) -> str:
    text = pgsql.MANY
    assert text.count(_GROUP_LOCK) == 1 and text.count(_GROUP_PROOF) == 1
    text = text.replace(_GROUP_LOCK, _GROUP_PAUSED)
    return text if proof else text.replace(_GROUP_PROOF, "true AS fresh")


async def _group_while_a_lease_is_granted(
    make_store: Make, url: str, monkeypatch: pytest.MonkeyPatch, proof: bool
) -> tuple[list[Any], list[int]]:
    """One store's writer busy with run X's paused append while appends to runs Y and Z
    queue behind it: they go as one group (``sql.MANY``, paused too), and a second store
    takes Y's first lease during the group's pause. The outcomes of Y's and Z's appends, and
    the records Y and Z then hold."""
    a: SqlJournalStore = await make_store()
    b: SqlJournalStore = await make_store()
    x, y, z = RunId.generate(), RunId.generate(), RunId.generate()
    for run in (x, y, z):
        await a.append(0, [admitted(run)])
        await a.append(0, [note(run, "warm")])
    await b.head(y)
    for name in _NAMES:
        monkeypatch.setattr(pgsql, name, _paused(getattr(pgsql, name), True))
    monkeypatch.setattr(pgsql, "MANY", _group_paused(proof))
    first = asyncio.ensure_future(a.append(0, [note(x, "first")]))
    await _pausing(url)  # x's statement holds the writer's connection
    queued = [asyncio.ensure_future(a.append(0, [note(run, "queued")])) for run in (y, z)]
    await _pausing(url, "pg_sleep(1.25)")  # y's and z's group has its snapshot
    await b.acquire(y, "second", 300)
    outcomes = await asyncio.gather(*queued, return_exceptions=True)
    await first
    monkeypatch.undo()
    return outcomes, [len(await b.read(run)) for run in (y, z)]


@pytest.mark.parametrize("dialect", ["postgresql"])
async def test_a_lease_granted_after_a_groups_snapshot_fences_that_run_alone(
    make_store: Make, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group statement's proof is per run: Y, whose mutex row changed, defers to the
    general unit and is fenced; Z, in the same statement, lands."""
    (y_outcome, z_outcome), (y_records, z_records) = await _group_while_a_lease_is_granted(
        make_store, database_url, monkeypatch, proof=True
    )
    assert isinstance(y_outcome, FencedError), y_outcome
    assert not isinstance(z_outcome, BaseException), z_outcome
    assert (y_records, z_records) == (2, 3)


@pytest.mark.parametrize("dialect", ["postgresql"])
async def test_without_the_group_proof_the_same_window_lets_the_append_land(
    make_store: Make, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (y_outcome, z_outcome), (y_records, z_records) = await _group_while_a_lease_is_granted(
        make_store, database_url, monkeypatch, proof=False
    )
    assert not isinstance(y_outcome, BaseException), y_outcome
    assert not isinstance(z_outcome, BaseException), z_outcome
    assert (y_records, z_records) == (3, 3)
