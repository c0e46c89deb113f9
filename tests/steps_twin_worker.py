"""A worker process for tests/test_steps_twins.py (run as a script, never collected).

``python steps_twin_worker.py URL TENANT LEDGER RUNS [--no-fence]``: one process of the
instance ``twin``: once the other is ready too, starts RUNS workflows (keys ``twin-0`` ..)
at once, while draining its own instance's runs with ``drain(reclaim_own=True)`` every
50 ms for 4 s, as a restarted worker does: so two such processes take each other's live
runs over all the time. Prints a JSON report of what each start answered.

LEDGER is the outside world: one line per effect call (``call RUN EFFECT EPOCH``), written
in the call's synchronous prefix (before its first await), and read by the reconcile
functions, as a provider's status API would be.

``--no-fence`` breaks the fence in this process only (the test's red run): the store's
check of a write's epoch against the lease's (``core.batch.fenced``, and the PostgreSQL
hot statements: the single-run and multi-run appends' and the conclusion's) lets a displaced
writer's records in.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from agentplane_journal import DidNotHappen, Landed, SqlJournalStore, Steps
from agentplane_journal.steps.effect import current_run


def calls(path: str) -> list[list[str]]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.split() for line in f.read().splitlines()]
    except FileNotFoundError:
        return []


def build(steps: Steps, ledger: str) -> Any:
    def effect(name: str) -> Any:
        async def landed(i: int) -> Any:
            ctx = current_run.get()
            assert ctx is not None
            done = [c for c in calls(ledger) if c[1:3] == [str(ctx.run), name]]
            return Landed(i) if done else DidNotHappen()

        @steps.effect(name, reconcile=landed)
        async def call(i: int) -> int:
            ctx = current_run.get()
            assert ctx is not None
            # The call itself, in the synchronous prefix (no await between the fence's proof
            # and it): blocking on purpose.
            with open(ledger, "a", encoding="utf-8") as f:  # noqa: ASYNC230
                f.write(f"call {ctx.run} {name} {ctx.epoch}\n")
            await asyncio.sleep(0.2)  # the call's answer takes a while
            return i

        return call

    a, b, c = effect("a"), effect("b"), effect("c")

    @steps.workflow("twin")
    async def twin(i: int) -> int:
        return await c(await b(await a(i)))

    return twin


def break_the_fence() -> None:
    from agentplane_journal.backends.postgresql import conclude, sql
    from agentplane_journal.journal import writes as run_state

    run_state.fenced = lambda *args: None  # type: ignore[attr-defined]
    sql.fenced = lambda *args: None  # type: ignore[attr-defined]
    sql.ONE = sql.ONE.replace("st.lease_epoch = $4", "true")
    sql.ONE_UNLESS_CANCELLED = sql.ONE_UNLESS_CANCELLED.replace("st.lease_epoch = $4", "true")
    conclude.CONCLUDE = conclude.CONCLUDE.replace("st.lease_epoch = $4", "true")
    # The multi-run statement too: the writer's turns carry most concurrent appends in it.
    sql.MANY = sql.MANY.replace("st.lease_epoch = st.epoch", "true")
    sql.MANY_UNLESS_CANCELLED = sql.MANY_UNLESS_CANCELLED.replace(
        "st.lease_epoch = st.epoch", "true"
    )
    assert "st.lease_epoch = st.epoch" not in sql.MANY + sql.MANY_UNLESS_CANCELLED


async def main(url: str, tenant: str, ledger: str, runs: int) -> dict[str, Any]:
    store = await SqlJournalStore.connect(url, tenant=tenant)
    steps = Steps(store, instance="twin", lease_ttl=30)
    twin = build(steps, ledger)
    answers: dict[str, str] = {}

    async def one(i: int) -> None:
        try:
            answer = await twin.start(f"twin-{i}", i)
            answers[f"twin-{i}"] = type(answer).__name__
        except Exception as error:
            answers[f"twin-{i}"] = type(error).__name__

    async def sweep(stop: asyncio.Event) -> int:
        resumed = 0
        while not stop.is_set():
            report = await steps.sweeper().drain(reclaim_own=True)
            resumed += len(report.resumed)
            await asyncio.sleep(0.05)
        return resumed

    stop = asyncio.Event()
    sweeper = asyncio.create_task(sweep(stop))
    await asyncio.gather(*(one(i) for i in range(runs)), asyncio.sleep(4))
    stop.set()
    resumed = await sweeper
    await store.close()
    return {"answers": answers, "resumed": resumed, "pid": os.getpid()}


def both_ready(ledger: str) -> None:
    """Start together: each process says it is ready and waits for the other (10 s)."""
    with open(f"{ledger}.ready.{os.getpid()}", "w", encoding="utf-8"):
        pass
    folder, name = os.path.split(ledger)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if sum(f.startswith(name + ".ready.") for f in os.listdir(folder or ".")) >= 2:
            return
        time.sleep(0.01)


if __name__ == "__main__":
    url, tenant, ledger, runs = sys.argv[1:5]
    if "--no-fence" in sys.argv:
        break_the_fence()
    both_ready(ledger)
    print(json.dumps(asyncio.run(main(url, tenant, ledger, int(runs)))))
