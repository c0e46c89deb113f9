"""``agentplane-journal steps``: the durable-steps runs an operator must know about, and the
verbs that act on them.

* ``steps`` lists the open runs of the tenant (admitted, not concluded) with their state: in
  flight, in doubt (which effect, which key), abandoned (a sweeper will resume it), stopped,
  damaged (its records do not verify: listed with the error, and the listing goes on). See
  :mod:`agentplane_journal.steps.status` for what each state means.
* ``steps settle RUN KEY --landed JSON | --did-not-happen --actor NAME`` journals a
  person's decision about an effect in doubt (``Steps.settle``); no workflow code needed.
* ``steps resume RUN --app MODULE:FUNCTION`` and ``steps sweep --app MODULE:FUNCTION
  [--forever --interval S]`` run workflows, so they need the code: ``FUNCTION`` takes a
  :class:`~agentplane_journal.steps.api.Steps` and registers the workflows and effects on
  it, as the application's workers do. ``--forever`` sweeps until SIGTERM or SIGINT, which
  end it between sweeps (a run being resumed finishes its current step first).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import signal
import socket
from collections.abc import Callable
from typing import Any

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli.base import _Exit
from agentplane_journal.cli.db import _run_id, _store
from agentplane_journal.core.ids import EffectKey
from agentplane_journal.errors import LeaseHeldError, StepError
from agentplane_journal.steps.api import Steps
from agentplane_journal.steps.status import open_runs
from agentplane_journal.steps.sweeper import SweepReport
from agentplane_journal.steps.values import DidNotHappen, Landed


async def cmd_steps(args: argparse.Namespace) -> int:
    verb = args.verb
    if verb is None:
        if args.operands:
            raise _Exit(2, f"unexpected {' '.join(args.operands)!r}: settle, resume or sweep?")
        return await _list(args)
    wanted = {"settle": 2, "resume": 1, "sweep": 0}[verb]
    if len(args.operands) != wanted:
        usage = {"settle": "RUN KEY", "resume": "RUN", "sweep": "no operands"}[verb]
        raise _Exit(2, f"steps {verb} takes {usage}")
    if verb == "settle":
        return await _settle(args)
    register = _app(args.app, verb)
    async with _store(args) as store:
        steps = Steps(store, instance=_instance(args))
        register(steps)
        if verb == "resume":
            return await _resume(steps, args)
        return await _sweep(steps, args)


def _instance(args: argparse.Namespace) -> str:
    return str(args.instance or f"cli@{socket.gethostname()}")


def _app(spec: str | None, verb: str) -> Callable[[Steps], Any]:
    """The application's registering function, from ``MODULE:FUNCTION``."""
    if not spec:
        raise _Exit(
            2,
            f"steps {verb} runs your workflows: name the function that registers them, "
            "--app MODULE:FUNCTION (it takes a Steps, as your workers call it)",
        )
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise _Exit(2, f"--app {spec!r} is not MODULE:FUNCTION")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise _Exit(
            2, f"--app: cannot import {module_name!r} ({exc}); is it on PYTHONPATH?"
        ) from None
    found = getattr(module, name, None)
    if not callable(found):
        raise _Exit(2, f"--app: {module_name!r} has no function {name!r}")
    register: Callable[[Steps], Any] = found
    return register


async def _settle(args: argparse.Namespace) -> int:
    run = _run_id(args.operands[0])
    try:
        key = EffectKey.from_hex(args.operands[1].removeprefix("ek:"))
    except ValueError as exc:
        raise _Exit(2, f"KEY {args.operands[1]!r} is not an effect key ({exc})") from None
    if not args.actor:
        raise _Exit(2, "steps settle needs --actor NAME: who decided is journaled with it")
    answer: Landed[Any] | DidNotHappen
    if args.did_not_happen:
        answer, said = DidNotHappen(), "did not happen"
    elif args.landed is not None:
        try:
            answer, said = Landed(json.loads(args.landed)), "landed"
        except ValueError as exc:
            raise _Exit(2, f"--landed is not JSON ({exc})") from None
    else:
        raise _Exit(2, "steps settle needs --landed JSON or --did-not-happen")
    async with _store(args) as store:
        steps = Steps(store, instance=_instance(args))
        try:
            await steps.settle(run, key, answer, args.actor)
        except StepError as exc:
            raise _Exit(1, str(exc)) from None
    print(
        f"settled ek:{key.hex()} of {run}: {said} (by {args.actor}); run it on with "
        f"`agentplane-journal steps resume {run} --app MODULE:FUNCTION`"
    )
    return 0


async def _resume(steps: Steps, args: argparse.Namespace) -> int:
    run = _run_id(args.operands[0])
    try:
        result = await steps.resume(run)
    except (StepError, LeaseHeldError) as exc:
        raise _Exit(1, str(exc)) from None
    print(f"{run} resumed: {json.dumps(result, ensure_ascii=False)}")
    return 0


async def _sweep(steps: Steps, args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise _Exit(2, "--interval must be a positive number of seconds")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    failed = False
    reclaim = bool(args.reclaim_own)
    if reclaim and not args.instance:
        raise _Exit(2, "--reclaim-own takes over the leases of --instance NAME: name it")
    try:
        while True:
            report = await steps.sweeper().drain(reclaim_own=reclaim)
            reclaim = False  # once, at start: later sweeps take only lapsed leases
            failed |= _report(report)
            if not args.forever or stop.is_set():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.interval)
            if stop.is_set():
                break
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    return 1 if failed and not args.forever else 0


def _report(report: SweepReport) -> bool:
    """Print one sweep; whether any run stopped on an error or was damaged."""
    for resumed in report.resumed:
        if resumed.error is None:
            print(f"{resumed.run_id}  resumed   {json.dumps(resumed.result, ensure_ascii=False)}")
        else:
            print(f"{resumed.run_id}  stopped   {resumed.error}")
    for run in report.concluded:
        print(f"{run}  concluded (sealed at its recorded conclusion)")
    for run in report.emptied:
        print(f"{run}  emptied   (never admitted; its lease released)")
    for run, error in report.damaged:
        print(f"{run}  damaged   {error} (agentplane-journal verify {run})")
    print(
        f"swept: {len(report.resumed)} resumed, {len(report.concluded)} concluded, "
        f"{len(report.emptied)} emptied, {len(report.skipped)} skipped, "
        f"{len(report.damaged)} damaged",
        flush=True,
    )
    return bool(report.damaged) or any(r.error is not None for r in report.resumed)


async def _list(args: argparse.Namespace) -> int:
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
