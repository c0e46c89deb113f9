"""``DuplicateEffectError`` names the colliding key without a second connection.

The records' INSERT skips a row the exactly-once index refuses (``ON CONFLICT .. DO
NOTHING`` on exactly that partial index), so the missing seq in its RETURNING names the key
on the same connection, in the same statement. The first version asked on a *second*
pooled connection while holding the first: a ``pool_size=1`` engine failed every time and a
loaded pool deadlocked into a raw ``sqlalchemy.exc.TimeoutError``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from agentplane_journal import DuplicateEffectError, RunId, SqlJournalStore

from support.helpers import key, note, started


async def test_a_multi_key_batch_names_the_started_key_on_a_one_connection_pool(
    make_store: Callable[..., Any], dialect: str
) -> None:
    options = {"pool_size": 1, "max_overflow": 0, "pool_timeout": 5}
    store = await make_store(engine_options=options)
    run = RunId.generate()
    await store.append(1, [started(run, key(2))])
    for batch in (
        [started(run, key(1)), started(run, key(2)), started(run, key(3))],
        [note(run), started(run, key(3)), started(run, key(4)), started(run, key(2))],
    ):
        with pytest.raises(DuplicateEffectError) as caught:
            await store.append(1, batch)
        assert caught.value.effect_key == key(2)
    # Nothing of the refused batches landed, and the store still works on its one connection.
    assert [r.effect_key for r in await store.read(run)] == [key(2)]
    assert await store.append(1, [started(run, key(1)), started(run, key(3))])
    await store.verify(run)


@pytest.mark.race
async def test_32_multi_key_batches_sharing_a_key_on_a_two_connection_pool(
    pg_battery_url: str,
) -> None:
    """Every loser gets DuplicateEffectError naming the shared key, within seconds."""
    store = await SqlJournalStore.connect(
        pg_battery_url,
        tenant=f"dup{uuid.uuid4().hex[:10]}",
        engine_options={"pool_size": 2, "max_overflow": 0, "pool_timeout": 30},
    )
    try:
        run = RunId.generate()
        shared = key(200)
        gate = asyncio.Event()

        async def contender(i: int) -> Any:
            own = key(i)
            batch = [started(run, own), started(run, shared)]
            if i % 2:
                batch.reverse()
            await gate.wait()
            return await store.append(1, batch)

        tasks = [asyncio.create_task(contender(i)) for i in range(32)]
        await asyncio.sleep(0.05)
        started_at = time.monotonic()
        gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        elapsed = time.monotonic() - started_at

        winners = [r for r in results if not isinstance(r, BaseException)]
        losers = [r for r in results if isinstance(r, BaseException)]
        assert len(winners) == 1, results
        assert all(isinstance(r, DuplicateEffectError) for r in losers), losers
        assert all(r.effect_key == shared for r in losers)
        assert elapsed < 10, f"32 batches took {elapsed:.1f}s on a 2-connection pool"
        records = await store.read(run)
        assert len(records) == 2 and shared in {r.effect_key for r in records}
        await store.verify(run)
    finally:
        await store.close()
