"""The push store's concurrency claims, raced on a real PostgreSQL.

Each racer is its own store with its own engine and a single pooled connection, opened and
used once before the race so that no racer is still connecting when the others start. All
of them wait on one barrier and fire together; every race runs several rounds. Each test has
been seen to fail against a deliberately broken mechanism (see the report of issue 5): a
read-then-write ``advance``, a client-side ``attempts + 1``, a ``put`` that overwrites the
cursor. The parking races (issue 21) were seen red with ``due`` lacking the due index's
predicate, with ``park`` returning before its UPDATE committed, and with a client-side
``attempts + 1`` in ``park``.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from functools import partial

import pytest
from sqlalchemy import text

from agentplane_journal import RunId
from agentplane_journal.push.store import SqlPushStore
from agentplane_journal.push.values import PushConfig

from support.markers import THROUGH_PGBOUNCER
from support.races import no_surprises, race

pytestmark = [pytest.mark.postgres, pytest.mark.race, *THROUGH_PGBOUNCER]

RACERS = 16
ROUNDS = 6
URL = "https://receiver.example/hook"


@pytest.fixture
async def racers(pg_battery_url: str) -> AsyncIterator[list[SqlPushStore]]:
    """RACERS stores on one tenant, each on its own (already open) connection."""
    tenant = f"race{uuid.uuid4().hex[:12]}"
    stores = await asyncio.gather(
        *(
            SqlPushStore.connect(
                pg_battery_url,
                tenant=tenant,
                engine_options={"pool_size": 1, "max_overflow": 0},
            )
            for _ in range(RACERS)
        )
    )
    warm = RunId.generate()
    await asyncio.gather(*(store.get(warm, "warm-up") for store in stores))
    yield list(stores)
    await asyncio.gather(*(store.close() for store in stores))


async def cursor_and_attempts(store: SqlPushStore, task: RunId, id: str) -> tuple[int, int]:
    async with store.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT next_seq, attempts FROM push_delivery WHERE tenant = :t "
                    "AND task_id = :task AND config_id = :id"
                ),
                {"t": store.tenant, "task": str(task), "id": id},
            )
        ).one()
    return int(row.next_seq), int(row.attempts)


async def test_concurrent_advances_end_at_the_maximum(racers: list[SqlPushStore]) -> None:
    rng = random.Random(1)
    for round_ in range(ROUNDS):
        task, id = RunId.generate(), f"cfg-{round_}"
        initial = rng.randrange(1, 50)
        await racers[0].put(PushConfig(id, task, URL), initial)
        seqs = rng.sample(range(1, 10_000), RACERS)

        no_surprises(
            await race(*[partial(s.advance, task, id, seqs[i]) for i, s in enumerate(racers)])
        )
        cursor, attempts = await cursor_and_attempts(racers[0], task, id)
        assert cursor == max(initial, *seqs), f"round {round_}: an advance was lost"
        assert attempts == 0


async def test_concurrent_retries_count_every_attempt(racers: list[SqlPushStore]) -> None:
    for round_ in range(ROUNDS):
        task, id = RunId.generate(), f"cfg-{round_}"
        await racers[0].put(PushConfig(id, task, URL), 7)

        no_surprises(
            await race(
                *[partial(s.retry, task, id, 100 + i, f"racer {i}") for i, s in enumerate(racers)]
            )
        )
        cursor, attempts = await cursor_and_attempts(racers[0], task, id)
        assert attempts == RACERS, f"round {round_}: {RACERS - attempts} retries were lost"
        assert cursor == 7


async def test_a_put_racing_advances_never_lowers_the_cursor(
    racers: list[SqlPushStore],
) -> None:
    rng = random.Random(2)
    for round_ in range(ROUNDS):
        task, id = RunId.generate(), f"cfg-{round_}"
        await racers[0].put(PushConfig(id, task, URL, token="first"), 1)
        seqs = rng.sample(range(2, 10_000), RACERS)
        # Half the racers re-register the receiver (asking for cursor 1), half acknowledge.
        putters = set(rng.sample(range(RACERS), RACERS // 2))
        acked = [seqs[i] for i in range(RACERS) if i not in putters]
        no_surprises(
            await race(
                *[
                    partial(s.put, PushConfig(id, task, f"{URL}/{i}", token=f"t{i}"), 1)
                    if i in putters
                    else partial(s.advance, task, id, seqs[i])
                    for i, s in enumerate(racers)
                ]
            )
        )
        cursor, _ = await cursor_and_attempts(racers[0], task, id)
        assert cursor == max(acked), f"round {round_}: a put rewound the cursor to {cursor}"
        config = await racers[0].get(task, id)
        assert config is not None and config.url.startswith(URL)


async def test_races_do_not_leak_between_tenants(racers: list[SqlPushStore]) -> None:
    """Half the racers advance one tenant's registration, half another's with the same ids."""
    task, id = RunId.generate(), "cfg"
    other = [store.for_tenant(store.tenant + "-b") for store in racers]
    await racers[0].put(PushConfig(id, task, URL), 1)
    await other[0].put(PushConfig(id, task, URL), 1)
    seqs = random.Random(3).sample(range(2, 10_000), RACERS)
    no_surprises(
        await race(
            *[
                partial((s if i % 2 else other[i]).advance, task, id, seqs[i])
                for i, s in enumerate(racers)
            ]
        )
    )
    assert (await cursor_and_attempts(racers[0], task, id))[0] == max(seqs[1::2])
    assert (await cursor_and_attempts(other[0], task, id))[0] == max(seqs[0::2])


SWEEPERS = 4


async def park_while_sweeping(
    parker: SqlPushStore, sweepers: list[SqlPushStore], keys: list[tuple[RunId, str]]
) -> tuple[list[str], int]:
    """``parker`` parks ``keys`` in order while ``sweepers`` call ``due`` in a loop.

    Each sweep notes which parks had returned before its ``due`` started, and reports any of
    those it was served. After every park the parker waits until every sweeper has started
    another sweep, so each park is followed by sweeps that race the next one. Returns the
    violations and the number of sweeps.
    """
    returned: set[tuple[RunId, str]] = set()
    violations: list[str] = []
    started = sweeps = 0
    done = False
    progress = asyncio.Condition()

    async def park_all() -> None:
        nonlocal done
        try:
            for task, id in keys:
                await parker.park(task, id, "HTTP 410 Gone")
                returned.add((task, id))
                async with progress:
                    target = started + len(sweepers)
                    await progress.wait_for(lambda t=target: started >= t)
        finally:
            done = True

    async def sweep(store: SqlPushStore) -> None:
        nonlocal started, sweeps
        while not done:
            before = frozenset(returned)
            async with progress:
                started += 1
                progress.notify_all()
            for reg in await store.due(10**9, len(keys)):
                if (reg.config.task, reg.config.id) in before:
                    violations.append(f"{reg.config.id} served after park() returned")
            sweeps += 1

    no_surprises(await race(park_all, *[partial(sweep, s) for s in sweepers]))
    return violations, sweeps


async def test_a_parked_registration_is_never_served_once_park_has_returned(
    racers: list[SqlPushStore],
) -> None:
    """Sweepers take due rows while a worker parks them one by one (issue 21): no ``due``
    that started after a ``park`` returned serves that registration."""
    parker, sweepers = racers[0], racers[1 : 1 + SWEEPERS]
    rng = random.Random(21)
    for round_ in range(ROUNDS):
        tasks = [RunId.generate() for _ in range(3)]
        keys = [(task, f"cfg-{round_}-{n}") for task in tasks for n in range(8)]
        for task, id in keys:
            await parker.put(PushConfig(id, task, URL), 1)

        violations, sweeps = await park_while_sweeping(
            parker, sweepers, rng.sample(keys, len(keys))
        )
        assert not violations, f"round {round_}: {violations[:3]}"
        assert sweeps >= len(keys)
        assert await parker.due(10**9, 100) == []
        listed = await parker.parked(100)
        assert sorted((r.config.task, r.config.id) for r in listed) == sorted(keys)
        for task, id in keys:  # leave the tenant empty for the next round
            await parker.delete(task, id)


async def test_concurrent_parks_and_retries_count_every_attempt(
    racers: list[SqlPushStore],
) -> None:
    """Half the racers park one registration, half retry it: every attempt counts."""
    for round_ in range(ROUNDS):
        task, id = RunId.generate(), f"cfg-{round_}"
        await racers[0].put(PushConfig(id, task, URL), 7)

        no_surprises(
            await race(
                *[
                    partial(s.park, task, id, f"racer {i}")
                    if i % 2
                    else partial(s.retry, task, id, 100 + i, f"racer {i}")
                    for i, s in enumerate(racers)
                ]
            )
        )
        cursor, attempts = await cursor_and_attempts(racers[0], task, id)
        assert attempts == RACERS, f"round {round_}: {RACERS - attempts} attempts were lost"
        assert cursor == 7
        await racers[0].delete(task, id)
