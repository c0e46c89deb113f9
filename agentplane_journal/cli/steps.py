"""``agentplane-journal steps``: the durable-steps runs an operator must know about.

Open runs of the tenant (admitted, not concluded) with their state: in flight, in doubt
(which effect, which key), abandoned (a sweeper will resume it), stopped, damaged (its
records do not verify: listed with the error, and the listing goes on). See
:mod:`agentplane_journal.steps.status` for what each state means.
"""

from __future__ import annotations

import argparse

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli.db import _store
from agentplane_journal.steps.status import open_runs


async def cmd_steps(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        runs = await open_runs(store, args.limit)
    if args.state:
        runs = [r for r in runs if r.state == args.state]
    if args.json:
        fmt.print_json(
            [
                {
                    "run": str(r.run_id),
                    "state": r.state,
                    "workflow": r.workflow,
                    "owner": r.owner,
                    "epoch": r.epoch,
                    "records": r.records,
                    "in_doubt": [{"effect": n, "effect_key": k.hex()} for n, k in r.in_doubt],
                    **({"error": r.error} if r.error else {}),
                }
                for r in runs
            ]
        )
        return 0
    if not runs:
        print(f"no open runs among the {args.limit} most recent of tenant {store.tenant}")
        return 0
    for r in runs:
        owner = f" owner={r.owner} epoch={r.epoch}" if r.owner else ""
        print(f"{r.run_id}  {r.state:<9}  {r.workflow}  {r.records} records{owner}")
        for name, key in r.in_doubt:
            print(f"    in doubt: {name} ek:{key.hex()}")
        if r.error:
            print(f"    does not verify: {r.error} (agentplane-journal verify {r.run_id})")
    return 0
