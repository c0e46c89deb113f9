"""Chunks of operations over the same runs, in different orders, at once: no deadlock (PostgreSQL).

``write_ops`` holds every run mutex of its batch until COMMIT. Eight store instances (own
engines, own connections) each append to the same twenty runs, each in its own shuffled order,
and seal a run of their own, while eight more append to those runs one call at a time and seal
their own runs live. Everything must commit: every batch, every single append, every seal; each
shared run's chain holds exactly one record per writer that touched it and verifies; the log
holds every seal once.

What makes it hold: the batch takes its runs' mutexes in run id order (one executemany, sorted),
so two batches sharing runs queue on the first shared one instead of each holding what the
other waits for, and the log counter is taken last (run mutexes, then the counter, the store's
lock order). Seen red with the mechanism broken: the mutexes taken in the batch's own order
(``ids = list(dict.fromkeys(...))`` instead of ``sorted``), PostgreSQL detected deadlocks and
aborted batches.
"""

from __future__ import annotations

import random
import uuid

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.journal.bulk import AppendOp, SealOp, write_ops

from support.clock import FakeClock
from support.helpers import note
from support.races import no_surprises, race

pytestmark = [pytest.mark.race, pytest.mark.postgres, pytest.mark.slow]

BATCHES = 8
SINGLES = 8
SHARED = 20


async def test_batches_sharing_runs_in_any_order_all_commit(
    pg_battery_url: str, clock: FakeClock
) -> None:
    tenant = f"bulk{uuid.uuid4().hex[:10]}"
    stores = [
        await SqlJournalStore.connect(pg_battery_url, tenant=tenant, clock=clock)
        for _ in range(BATCHES + SINGLES)
    ]
    try:
        shared = [RunId.generate() for _ in range(SHARED)]
        for run in shared:
            await stores[0].append(1, [note(run, "first")])
        own = [RunId.generate() for _ in stores]
        rng = random.Random(22)

        def batch(i: int) -> list[AppendOp | SealOp]:
            order = rng.sample(shared, len(shared))
            return [
                *(AppendOp(1, [note(r, f"batch {i}")]) for r in order),
                AppendOp(1, [note(own[i], "mine")]),
                SealOp(own[i], 1, "succeeded"),
            ]

        async def single(i: int) -> None:
            store = stores[i]
            for r in rng.sample(shared, 5):
                await store.append(1, [note(r, f"single {i}")])
            await store.append(1, [note(own[i], "mine")])
            await store.seal(own[i], 1, "succeeded")

        ops = [batch(i) for i in range(BATCHES)]
        results = await race(
            *(lambda i=i: write_ops(stores[i], ops[i]) for i in range(BATCHES)),
            *(lambda i=i: single(i) for i in range(BATCHES, BATCHES + SINGLES)),
        )
        no_surprises(results)
        total = 0
        for run in shared:
            records = await stores[0].read(run)
            await stores[0].verify(run)  # contiguous, every link and hash
            batch_notes = [r for r in records if str(r.body.get("text", "")).startswith("batch")]
            assert len(batch_notes) == BATCHES, run
            total += len(records)
        assert total == SHARED * (1 + BATCHES) + SINGLES * 5
        cp = await stores[0].checkpoint()
        assert cp.size == len(own)
    finally:
        for store in stores:
            await store.close()
