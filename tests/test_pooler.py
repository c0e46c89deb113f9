"""Behind PgBouncer (transaction pooling) WITHOUT ``?pgbouncer=true``: nothing misroutes.

Several writer *processes* (asyncpg's own statement names come from a per-process counter, so
processes started alike hand out the same names: the collision the issue saw) append, seal
and read through a pooler that moves every transaction to the next server connection. Each
call either works, and is then in the database exactly as acknowledged, or fails with
:class:`PoolerError`, whose message names the option. The server logs every statement
(``log_statement = all``): each statement name the log shows executed always carries the
same statement text (so no client ran a statement another client prepared), and no name
is asyncpg's per-process ``__asyncpg_stmt_<n>__``.

Seen red: with :func:`agentplane_journal.db.pgnames.install` made a no-op, the processes'
names collide and the log shows one name executed with two texts (and unexplained errors).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.db.pgnames import unique_names
from agentplane_journal.migrations.commands import upgrade

from support.pgcluster import Cluster
from support.pgtopology import PgBouncer, need_pgbouncer

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer, pytest.mark.slow]

ROOT = str(Path(__file__).resolve().parent.parent)
WRITERS = 3
CALLS = 6

# One writer process: its own tenant, a few runs, every call's outcome reported as JSON.
WRITER = """
import asyncio, json, sys
from agentplane_journal import Append, PoolerError, RunId, SqlJournalStore

async def main(url, tenant, calls):
    out = {"ok": [], "pooler": 0, "other": []}
    while True:
        try:
            store = await SqlJournalStore.connect(url, tenant=tenant)
            break
        except PoolerError:
            out["pooler"] += 1
    try:
        for i in range(calls):
            run = RunId.generate()
            try:
                lease = await store.acquire(run, "w", 60)
                recs = await store.append(lease.epoch, [Append(run, "note", {"i": i})])
                await store.seal(run, lease.epoch, "succeeded")
                read = await store.read(run)
                assert [r.hash for r in read] == [r.hash for r in recs], "read differs"
                out["ok"].append([str(run), recs[-1].hash.hex()])
            except PoolerError as exc:
                assert "?pgbouncer=true" in str(exc)
                out["pooler"] += 1
            except Exception as exc:
                out["other"].append(f"{type(exc).__name__}: {exc}")
    finally:
        await store.close()
    print(json.dumps(out))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


@pytest.fixture(scope="module")
def logged() -> Iterator[Cluster]:
    """A server of its own that logs every statement, with its parameters."""
    cluster = Cluster(
        options="-c log_statement=all -c log_min_error_statement=error "
        "-c log_parameter_max_length=-1"
    )
    try:
        yield cluster
    finally:
        cluster.stop()


def test_statement_names_are_unique_to_each_connection() -> None:
    import asyncpg

    cls = unique_names(asyncpg.Connection)
    assert unique_names(asyncpg.Connection) is cls and issubclass(cls, asyncpg.Connection)
    a, b = SimpleNamespace(), SimpleNamespace()  # what the method reads: the instance dict
    names = [cls._get_unique_id(x, "stmt") for x in (a, a, b)]
    assert len(set(names)) == 3 and names[0][:38] == names[1][:38] != names[2][:38]


async def test_writers_through_a_pooler_without_the_option_never_misroute(
    logged: Cluster,
) -> None:
    need_pgbouncer()
    await upgrade(logged.url)
    bouncer = PgBouncer(logged.url, pool_size=2, round_robin=True)
    results: list[dict[str, Any]] = []
    try:
        url = bouncer.url(logged.url, pgbouncer=False)
        env = {**os.environ, "PYTHONPATH": ROOT}
        # Sized by events, not by one round: rounds of writers (each its own tenants) until the
        # pooler has moved a statement at least once (a quiet round may see no move at all).
        for attempt in range(5):
            procs = [
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-c",
                    WRITER,
                    url,
                    f"w{attempt}-{i}" if attempt else f"w{i}",
                    str(CALLS),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    env=env,
                )
                for i in range(WRITERS)
            ]
            outs = [await p.communicate() for p in procs]
            for proc, (stdout, stderr) in zip(procs, outs, strict=True):
                assert proc.returncode == 0, stderr.decode()
                results.append(json.loads(stdout))
            if sum(r["pooler"] for r in results) > 0:
                break
    finally:
        bouncer.stop()
    tenants = [f"w{a}-{i}" if a else f"w{i}" for a in range(5) for i in range(WRITERS)]
    # Every call worked or was the clear refusal; nothing else.
    assert [r["other"] for r in results] == [[]] * len(results)
    assert sum(r["pooler"] for r in results) > 0, "the pooler never moved a statement"

    # What was acknowledged is in the database, as acknowledged, and verifies.
    for tenant, r in zip(tenants, results, strict=False):
        async with await SqlJournalStore.connect(logged.url, tenant=tenant) as store:
            for run, last in r["ok"]:
                records = await store.read(RunId(run))
                assert records and records[-1].hash.hex() == last
                await store.verify(RunId(run))

    # The server's statement log: one text per statement name, none of asyncpg's own names.
    log = (logged.root / "server.log").read_text(errors="replace")
    executed: dict[str, set[str]] = {}
    entry = re.compile(r"LOG:  execute (\S+?): (.*?)(?=\n\S+ \S+ \S+ \[\d+\] |\Z)", re.S)
    for name, statement in entry.findall(log):
        executed.setdefault(name, set()).add(statement.strip())
    assert executed, "the server logged no statement"
    clashes = {n: t for n, t in executed.items() if len(t) > 1 and n != "<unnamed>"}
    assert clashes == {}, f"one statement name ran as different statements: {clashes}"
    assert not [n for n in executed if n.startswith("__asyncpg_")]
    assert "bind message supplies" not in log
