"""The known-head cache under a hostile or moved head: refused or chained right, never wrong.

Both hot paths remember the head this process wrote last to a run (``HeadCache``, filled
only after a commit) and, under the run's lock, compare the head row's ``seq`` and ``hash``
columns with it instead of re-hashing the whole row. The cache is only a hint: each test
warms it with an honest append, then moves or edits the head row with SQL behind the
store's back, and checks that the next append either is refused or chains onto the true
hash, and that ``verify`` still names an edited row. On both dialects.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import CorruptRecordError, Record, RunId, SqlJournalStore

from support.helpers import note

_HEAD = "WHERE tenant=:t AND run_id=:r AND seq=:s"


async def _warm(store: SqlJournalStore) -> tuple[RunId, int, list[Record]]:
    """A leased run of two notes, appended by ``store``: its cache knows the second."""
    run = RunId.generate()
    epoch = (await store.acquire(run, "worker", 60)).epoch
    written = await store.append(epoch, [note(run, "one")])
    written += await store.append(epoch, [note(run, "two")])
    assert store._shared.writer._heads.get(store.tenant, str(run)) == (2, written[-1].hash)
    return run, epoch, written


async def _sql(store: SqlJournalStore, statement: str, **params: Any) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(text(statement), params)


def _params(store: SqlJournalStore, run: RunId, seq: int) -> dict[str, Any]:
    return {"t": store.tenant, "r": str(run), "s": seq}


async def test_an_edited_head_body_under_a_warm_cache_is_chained_past_on_its_true_hash(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    run, epoch, written = await _warm(store)
    # The body edited, the hash column kept: the column is still what this process wrote.
    forged = written[-1].raw.replace(b'"two"', b'"TWO"')
    await _sql(store, f"UPDATE journal SET raw=:raw {_HEAD}", raw=forged, **_params(store, run, 2))
    try:
        [after] = await store.append(epoch, [note(run, "three")])
    except CorruptRecordError as refused:  # refusing is right too
        assert refused.seq == 2
    else:
        assert (after.seq, after.prev_hash) == (3, written[-1].hash)  # the true chain
    with pytest.raises(CorruptRecordError) as caught:
        await store.verify(run)
    assert caught.value.seq == 2  # the edit is still reported, at the edited row


async def test_a_forged_head_hash_under_a_warm_cache_is_refused(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    run, epoch, _ = await _warm(store)
    await _sql(store, f"UPDATE journal SET hash=:h {_HEAD}", h=b"\1" * 32, **_params(store, run, 2))
    for _ in range(2):  # and the failure leaves no cache entry that would let a retry through
        with pytest.raises(CorruptRecordError, match="hash mismatch") as caught:
            await store.append(epoch, [note(run, "onto a forged head")])
        assert caught.value.seq == 2
    assert [r.seq for r in await _rows(store, run)] == [1, 2]


async def test_a_head_rewritten_to_hash_right_is_rehashed_not_taken_from_the_cache(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    run, epoch, written = await _warm(store)
    raw = written[-1].raw.replace(b'"two"', b'"2"')
    digest = hashlib.sha256(bytes(written[-1].prev_hash) + raw).digest()
    await _sql(
        store,
        f"UPDATE journal SET raw=:raw, hash=:h {_HEAD}",
        raw=raw,
        h=digest,
        **_params(store, run, 2),
    )
    [after] = await store.append(epoch, [note(run, "three")])
    # What the head row holds now, exactly as without a cache; never the cached hash.
    assert (after.seq, bytes(after.prev_hash)) == (3, digest)
    assert after.prev_hash != written[-1].hash


async def test_a_head_moved_by_another_writer_is_read_not_assumed(
    make_store: Callable[..., Any],
) -> None:
    first = await make_store()
    run, epoch, written = await _warm(first)
    second = await make_store()  # its own process-level cache, as another process would have
    [theirs] = await second.append(epoch, [note(run, "from elsewhere")])
    [ours] = await first.append(epoch, [note(run, "three")])
    assert (theirs.seq, theirs.prev_hash) == (3, written[-1].hash)
    assert (ours.seq, ours.prev_hash) == (4, theirs.hash)
    assert await first.verify(run) == ours.hash


async def test_a_deleted_head_under_a_warm_cache_is_never_chained_onto(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    run, epoch, written = await _warm(store)
    await _sql(store, f"DELETE FROM journal {_HEAD}", **_params(store, run, 2))
    [after] = await store.append(epoch, [note(run, "again")])
    assert (after.seq, after.prev_hash) == (2, written[0].hash)
    assert await store.verify(run) == after.hash


async def test_concurrent_appends_to_one_run_with_one_cached_head_chain_in_order(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    run, epoch, _ = await _warm(store)
    # With group commit on SQLite these share a transaction, all starting from one cached
    # head: each after the first finds the head moved (by the group's own earlier append).
    batches = await asyncio.gather(*(store.append(epoch, [note(run, f"n{i}")]) for i in range(6)))
    assert sorted(r.seq for [r] in batches) == list(range(3, 9))
    # Whatever the cache holds afterwards (the answers' order is theirs), it stays a hint.
    [last] = await store.append(epoch, [note(run, "last")])
    assert last.seq == 9
    assert await store.verify(run) == last.hash


async def test_the_activity_stays_the_latest_append_time_with_a_warm_cache(
    make_store: Callable[..., Any], clock: Any
) -> None:
    # SQLite writes the activity row only when it is behind; what it holds must not change.
    store = await make_store()
    run, epoch, _ = await _warm(store)
    at = dict(await store.recent_runs())[run]
    clock.advance(7)
    await store.append(epoch, [note(run, "later")])
    assert dict(await store.recent_runs())[run] == at + 7
    clock.advance(-5)  # a clock stepped back never moves the activity back
    await store.append(epoch, [note(run, "earlier")])
    assert dict(await store.recent_runs())[run] == at + 7
    await _sql(
        store, "DELETE FROM run_activity WHERE tenant=:t AND run_id=:r", t=store.tenant, r=str(run)
    )
    await store.append(epoch, [note(run, "again")])  # a missing row is written again
    assert dict(await store.recent_runs())[run] == at + 2


async def _rows(store: SqlJournalStore, run: RunId) -> list[Any]:
    async with store.engine.connect() as conn:
        return list(
            await conn.execute(
                text("SELECT seq FROM journal WHERE tenant=:t AND run_id=:r ORDER BY seq"),
                {"t": store.tenant, "r": str(run)},
            )
        )
