"""A worker process for tests/test_steps_crash.py (run as a script, never collected).

``python steps_crash_worker.py URL TENANT LEDGER work BOUNDARY KEY``: runs one checkout
under admission key KEY and SIGKILLs itself when it reaches BOUNDARY (a name the runner
passes to its boundary hook, or ``after_call`` / ``never``).

``python steps_crash_worker.py URL TENANT LEDGER recover``: a store whose clock runs an hour
ahead (every lease the dead workers held has lapsed), a sweeper drained, then one crash-free
run under the key ``baseline``; prints a JSON report.

LEDGER is a file outside the journal: one line per external side effect (``charge KEY``,
``mail KEY``) and per reconciliation (``reconcile KEY``), appended and flushed before the
call returns, so a SIGKILL after it cannot lose it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

from agentplane_journal import DidNotHappen, Landed, SqlJournalStore, Steps


def ledger_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def write(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def build(steps: Steps, ledger: str, die_after_call: bool) -> Any:
    async def check_charge(order: str, amount: int) -> Any:
        write(ledger, f"reconcile {order}")
        if f"charge {order}" in ledger_lines(ledger):
            return Landed({"charged": amount})
        return DidNotHappen()

    @steps.effect("charge", reconcile=check_charge)
    async def charge(order: str, amount: int) -> dict[str, int]:
        write(ledger, f"charge {order}")
        if die_after_call:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"charged": amount}

    async def check_mail(order: str) -> Any:
        write(ledger, f"reconcile-mail {order}")
        if f"mail {order}" in ledger_lines(ledger):
            return Landed("sent")
        return DidNotHappen()

    @steps.effect("mail", reconcile=check_mail)
    async def mail(order: str) -> str:
        write(ledger, f"mail {order}")
        return "sent"

    @steps.workflow("checkout")
    async def checkout(order: str, amount: int) -> dict[str, Any]:
        receipt = await charge(order, amount)
        return {"receipt": receipt, "mail": await mail(order)}

    return checkout


async def main(url: str, tenant: str, ledger: str, mode: str, *rest: str) -> None:
    if mode == "work":
        boundary, key = rest

        def die(at: str) -> None:
            if at == boundary:
                os.kill(os.getpid(), signal.SIGKILL)

        store = await SqlJournalStore.connect(url, tenant=tenant)
        steps = Steps(store, instance=f"worker-{os.getpid()}", lease_ttl=60, _boundary=die)
        checkout = build(steps, ledger, boundary == "after_call")
        await checkout.start(key, key, 42)
        await store.close()
        return
    store = await SqlJournalStore.connect(url, tenant=tenant, clock=lambda: time.time() + 3600)
    steps = Steps(store, instance="rescuer", lease_ttl=60)
    checkout = build(steps, ledger, False)
    report = await steps.sweeper().drain()
    baseline = await checkout.start("baseline", "baseline", 42)
    print(
        json.dumps(
            {
                "resumed": {str(r.run_id): r.result for r in report.resumed},
                "errors": [repr(r.error) for r in report.resumed if r.error is not None],
                "concluded": [str(r) for r in report.concluded],
                "baseline": baseline.result,
            }
        )
    )
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
