"""The journal a command names, and the commands that migrate, list or show it.

Opening the store from ``--url``/``--read-url``/``--tenant``/``--origin``/``--schema``,
finding the runs a command is about (one named run, or every run with a record or a seal),
and the commands ``upgrade``, ``runs``, ``show`` and ``demo``. Imported by ``cli.main`` once
the command line has parsed (it imports the store, hence SQLAlchemy).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli.base import PROG, _Exit, _redact, _Target
from agentplane_journal.cli.demo import DemoRefused, run_demo
from agentplane_journal.core.ids import RunId
from agentplane_journal.db.dialect import dialect_for
from agentplane_journal.db.engine import async_url, shown_url
from agentplane_journal.errors import CorruptRecordError
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.migrations.commands import current_revision, upgrade, upgrade_sql

_PAGE = 500


def _target(raw: str, *, must_exist: bool) -> _Target:
    try:
        url = async_url(raw)  # the library's own normalisation: one set of accepted URLs
    except ValueError as exc:
        raise _Exit(2, f"{_redact(raw)!r}: {exc}") from None
    shown = url.render_as_string(hide_password=True)
    database = dialect_for(url).database_file(url)  # a SQLite file's path
    if must_exist and database is not None:
        path = Path(database)
        if not path.exists():
            raise _Exit(
                2,
                f"no database file at {path.resolve()}; create one with `{PROG} upgrade "
                f"--url {shlex.quote(shown_url(url)[0])}`, or try `{PROG} demo`",
            )
    return _Target(url.render_as_string(hide_password=False), shown, url.password)


@asynccontextmanager
async def _store(args: argparse.Namespace) -> AsyncIterator[SqlJournalStore]:
    # Tenant "default" names its log plain ORIGIN, any other ORIGIN/TENANT (as the store does).
    read = getattr(args, "read_target", None)
    store = await SqlJournalStore.connect(
        args.target.url,
        tenant=args.tenant,
        origin=args.origin,
        schema=args.schema,
        read_url=None if read is None else read.url,
    )
    try:
        yield store
    finally:
        await store.close()


def _run_id(text: str) -> RunId:
    try:
        return RunId.parse(text)
    except ValueError as exc:
        raise _Exit(2, str(exc)) from None


async def _existing(store: SqlJournalStore, text: str) -> RunId:
    run = _run_id(text)
    try:
        seq = (await store.head(run)).seq
    except CorruptRecordError:
        return run  # it exists; verification will name what is wrong with it
    if seq == 0 and await store.inclusion_proof(run) is None:
        raise _Exit(
            2, f"no records for {run} in tenant {store.tenant!r} (check --tenant and --url)"
        )
    return run


async def _all_runs(store: SqlJournalStore) -> list[RunId | str]:
    """Every run with a record or a seal, by run id, paged (``SqlJournalStore.audit_runs``).

    From the journal and the log themselves, not from ``run_activity``: a run whose
    activity row is gone is still audited, and so is a sealed run whose records are gone.
    A stored id that is not a canonical run id is kept, as text, to be reported as a
    failure. Runs first written after the listing passed their place are not included.
    """
    runs: list[RunId | str] = []
    after = None
    while True:
        page = await store.audit_runs(after, _PAGE)
        runs.extend(_stored_run(value) for value in page)
        if len(page) < _PAGE:
            return runs
        # As stored; audit_runs refuses (TypeError) a value that is not text.
        after = cast("RunId | str", page[-1])


def _stored_run(value: object) -> RunId | str:
    if isinstance(value, str):
        try:
            run = RunId.parse(value)
        except ValueError:
            return value
        if str(run) == value:
            return run
        return value
    return repr(value)


def _not_a_run(text: str) -> dict[str, Any]:
    return {
        "run": text,
        "ok": False,
        "seq": 0,
        "error": "rows are stored under this run id, which is not a canonical run id "
        "(run_<ULID>): the table was edited",
    }


# -- commands ----------------------------------------------------------------------------


async def cmd_upgrade(args: argparse.Namespace) -> int:
    if args.sql:
        # Offline: the script a DBA reviews and runs, from an empty database; no connection.
        dialect = dialect_for(async_url(args.target.url))
        upgrade_sql(dialect.name, schema=args.schema, output=sys.stdout)
        return 0
    before = await current_revision(args.target.url, schema=args.schema)
    await upgrade(args.target.url, schema=args.schema)
    after = await current_revision(args.target.url, schema=args.schema)
    verb = "already at" if before == after else f"upgraded from {before or 'no revision'} to"
    print(f"{args.target.shown}: {verb} revision {after}")
    return 0


async def _records(store: SqlJournalStore, run: RunId) -> int | str:
    """How many records a run has, or where it is corrupt (a listing must not stop there)."""
    try:
        return (await store.head(run)).seq
    except CorruptRecordError as exc:
        return f"corrupt at seq {exc.seq}"


async def cmd_runs(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        rows: list[dict[str, Any]] = []
        if args.outcome:
            for run in await store.runs_by_outcome(args.outcome, args.limit):
                records = await _records(store, run)
                rows.append({"run": str(run), "outcome": args.outcome, "records": records})
        else:
            for run, updated in await store.recent_runs(None, args.limit):
                records = await _records(store, run)
                updated_at = fmt.iso_time(updated)
                rows.append({"run": str(run), "updated_at": updated_at, "records": records})
    if args.json:
        fmt.print_json(rows)
    else:
        fmt.print_runs(rows, args.outcome, store.tenant)
    return 0


async def cmd_show(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        run = await _existing(store, args.run)
        try:
            records = await store.read(run)
        except CorruptRecordError as exc:
            raise _Exit(1, f"FAILED {run} seq {exc.seq}: {exc.detail}") from None
        cancel = await store.cancellation(run)
        inc = await store.inclusion_proof(run)
    if args.json:
        fmt.print_json(
            {
                "run": str(run),
                "tenant": store.tenant,
                "sealed": None if inc is None else fmt.inclusion_json(inc),
                "cancellation": None if cancel is None else asdict(cancel),
                "records": [fmt.record_json(r) for r in records],
            }
        )
        return 0
    fmt.print_show(run, store.tenant, records, inc, cancel)
    return 0


async def cmd_demo(args: argparse.Namespace) -> int:
    target = args.target
    if target is None:
        return await run_demo(Path(args.dir or "."))
    if args.dir is not None:
        raise _Exit(2, "give --dir (for a new SQLite file) or a database URL, not both")
    try:
        return await run_demo(Path("."), target.url, shown=target.shown, from_env=args.url is None)
    except DemoRefused as exc:
        raise _Exit(2, str(exc)) from None
