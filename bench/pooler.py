"""Appends per second directly, with ``?pgbouncer=true``, and through PgBouncer, in one run.

    python bench/pooler.py [--seconds 2] [--rounds 5] [--writers 8] [--durable]

A throwaway cluster (``tests/support/pgcluster.py``; the test suite's fast settings unless
``--durable``) and a PgBouncer in ``pool_mode = transaction`` in front of it
(``tests/support/pgtopology.py``; Debian's ``pgbouncer``). ``--writers`` tasks, each on its own
store and its own leased run, append one record per call for ``--seconds``; contenders:

* ``direct``: the server's URL as is (asyncpg's statement caches on);
* ``direct+option``: the same URL with ``?pgbouncer=true`` (no statement caches);
* ``pgbouncer+option``: through the pooler, with the option;
* ``pgbouncer+option, planned``: the same, but each append sending its statement itself, as
  before revision ``0007_pooled_append`` (so parsed and planned for every append) instead of
  calling its server-side function: the change's baseline, interleaved in the same run;
* ``pgbouncer bare``: through the pooler without the option: how many calls fail, and as
  what (``PoolerError`` once statement names are unique per connection).

Rounds are interleaved, medians reported with min-max. Run it once against the code before a
change (``PYTHONPATH=<old checkout>``) and once after, on the same machine, to compare.
Figures, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from agentplane_journal import Append, RunId, SqlJournalStore
from agentplane_journal.backends.postgresql import sql as pgsql
from agentplane_journal.migrations.commands import upgrade


async def _round(url: str, writers: int, seconds: float) -> tuple[float, Counter[str]]:
    tenant = f"b{uuid.uuid4().hex[:10]}"
    errors: Counter[str] = Counter()
    stores = []
    for _ in range(writers):
        try:
            stores.append(await SqlJournalStore.connect(url, tenant=tenant))
        except Exception as exc:  # a pooler without the option may refuse the first read
            errors[type(exc).__name__] += 1
    # Warm up outside the timed window: each store's connections, type introspection, its
    # run's lease and a first append (a pooler without the option may refuse any of it).
    leases = []
    for store in stores:
        run = RunId.generate()
        try:
            lease = await store.acquire(run, "bench", 600)
            await store.append(lease.epoch, [Append(run, "note", {"warm": True})])
            leases.append((store, run, lease.epoch))
        except Exception as exc:
            errors[type(exc).__name__] += 1
    done = 0
    stop = time.monotonic() + seconds

    async def writer(store: SqlJournalStore, run: RunId, epoch: int) -> None:
        nonlocal done
        while time.monotonic() < stop:
            try:
                await store.append(epoch, [Append(run, "note", {"n": done, "pad": "x" * 100})])
                done += 1
            except Exception as exc:
                errors[type(exc).__name__] += 1

    start = time.monotonic()
    await asyncio.gather(*(writer(*w) for w in leases))
    elapsed = time.monotonic() - start
    await asyncio.gather(*(s.close() for s in stores))
    return done / elapsed, errors


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--durable", action="store_true")
    args = parser.parse_args()

    from support.pgcluster import Cluster
    from support.pgtopology import PgBouncer

    cluster = Cluster(durable=args.durable)
    bouncer = None
    try:
        await upgrade(cluster.url)
        bouncer = PgBouncer(cluster.url, pool_size=args.writers)
        contenders = {
            "direct": cluster.url,
            "direct+option": cluster.url + "?pgbouncer=true",
            "pgbouncer+option": bouncer.url(cluster.url),
            "pgbouncer+option, planned": bouncer.url(cluster.url),
            "pgbouncer bare": bouncer.url(cluster.url, pgbouncer=False),
        }
        pooled = pgsql.pooled
        rates: dict[str, list[float]] = {name: [] for name in contenders}
        failures: dict[str, Counter[str]] = {name: Counter() for name in contenders}
        names = list(contenders)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                if name.endswith(", planned"):
                    pgsql.pooled = pgsql.sql  # type: ignore[assignment]
                try:
                    rate, errors = await _round(contenders[name], args.writers, args.seconds)
                finally:
                    pgsql.pooled = pooled  # type: ignore[assignment]
                rates[name].append(rate)
                failures[name] += errors
        code = Path(sys.modules["agentplane_journal"].__file__ or "?").parent.parent
        print(f"code: {code}; {args.writers} writers, {args.rounds} rounds of {args.seconds}s")
        print(f"cluster: {'durable' if args.durable else 'fast (fsync off)'}; PgBouncer 1.18")
        base = statistics.median(rates["direct"])
        for name in names:
            med = statistics.median(rates[name])
            print(
                f"{name:<27} {med:8.0f}/s  ({min(rates[name]):.0f}-{max(rates[name]):.0f})"
                f"  x{med / base:.2f}  errors: {dict(failures[name]) or 'none'}"
            )
    finally:
        if bouncer is not None:
            bouncer.stop()
        cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
