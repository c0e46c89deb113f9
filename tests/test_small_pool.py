"""The hot-append writers share the engine's pool fairly, even a pool of one connection.

A writer keeps a pooled connection while appends keep arriving (``pgpath.py``,
``sqlitepath.py``). Everything else the store does (the first append of a run, a takeover,
a read, a seal) and the host's own work check out connections from the same pool; on a
pool with nothing left the writer gives its connection back after each statement, so a
steady stream of appends never starves them into the pool's timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentplane_journal import BackendError, RunId

from support.helpers import note

SMALL_POOL = {"pool_size": 1, "max_overflow": 0, "pool_timeout": 5}


@pytest.mark.slow
async def test_steady_appends_do_not_starve_the_rest_of_a_one_connection_pool(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store(engine_options=SMALL_POOL)
    runs = [RunId.generate() for _ in range(4)]
    done = asyncio.Event()

    async def writer(run: RunId) -> int:
        epoch = (await store.acquire(run, f"owner-{run}", 3600)).epoch
        while time.monotonic() < until:
            await store.append(epoch, [note(run)])
        return epoch

    async def reader() -> int:
        served = 0  # reads answered while the writers were still appending
        while not done.is_set():
            await store.head(runs[0])  # any other use of the pool
            if not done.is_set():
                served += 1
            await asyncio.sleep(0.01)
        return served

    # Starvation is a read that gets the connection only once the appends stop: so the claim
    # is that reads are answered *between* appends (how long each waited depends on the
    # machine's load, and is not asserted).
    until = time.monotonic() + 3
    reading = asyncio.create_task(reader())
    epochs = await asyncio.gather(*(writer(r) for r in runs))
    done.set()
    served = await reading
    assert served >= 1, "no read was answered while the appends went on: the pool starved it"
    for run, epoch in zip(runs, epochs, strict=True):
        records = await store.read(run)
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        await store.verify(run)
        assert (await store.seal(run, epoch, "succeeded")) == records[-1].hash


async def test_a_writer_that_cannot_check_out_refuses_and_recovers(
    make_store: Callable[..., Any], dialect: str
) -> None:
    """The pool's own timeout (not a driver error) is a refusal of the appends that waited,
    never a hang, and the next append takes a connection again."""
    store = await make_store(engine_options={**SMALL_POOL, "pool_timeout": 0.2})
    run = RunId.generate()
    lease = await store.acquire(run, "w", 60)
    await store.append(lease.epoch, [note(run, "warm")])
    writer = store._shared.writer
    await writer.idle()
    async with store.engine.connect() as held:  # the pool's only connection
        await held.exec_driver_sql("SELECT 1")
        with pytest.raises(BackendError, match="cannot reach the database"):
            await asyncio.wait_for(store.append(lease.epoch, [note(run, "refused")]), 10)
    await store.append(lease.epoch, [note(run, "after")])
    assert [r.body["text"] for r in await store.read(run)] == ["warm", "after"]
