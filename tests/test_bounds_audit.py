"""A stored counter or instant below its CHECK's floor is a finding, never skipped or a crash.

An attacker with write access drops the constraints (PostgreSQL: ``ALTER TABLE .. DROP
CONSTRAINT``; SQLite: the table rewritten without them) and plants values no store writes,
in every bounded table of one tenant. Then, on both dialects:

* ``audit_bounds`` names each column, its floor, how many rows and the first of them, for
  that tenant only (another tenant's audit is clean);
* ``verify --all`` fails (exit 1) with one ``bounds: FAILED`` line per finding, and its
  ``--json`` carries them; the other tenant's ``verify --all`` passes;
* the reads that meet these rows answer without a traceback: ``recent_runs`` hands the
  instant back, ``acquire`` takes the lapsed lease, ``due`` reports the registrations in
  ``.unavailable`` instead of serving them.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import traceback
from collections.abc import Callable

import pytest

from agentplane_journal import RunId, SqlJournalStore, SqlPushStore
from agentplane_journal.cli.main import main as cli_main
from agentplane_journal.db.models import COLUMN_FLOORS
from agentplane_journal.journal.bounds import BoundsFinding

from support.admissions import admitted_under
from support.checks_tools import drop_checks
from support.helpers import admitted, concluded
from support.migration_tools import execute


@pytest.fixture
def url(dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]) -> str:
    """A migrated database of the test's own (its constraints are about to be dropped)."""
    if dialect == "sqlite":
        return sqlite_database()
    return request.getfixturevalue("pg_database")()


def _main(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(args)
        except BaseException:
            traceback.print_exc()
            code = 70
    return code, out.getvalue(), err.getvalue()


async def _honest(store: SqlJournalStore, url: str) -> dict[str, RunId]:
    """A sealed run (admitted under a key; released lease, outcome, seal), an open leased
    one with a stop request, and two push registrations."""
    sealed, open_ = RunId.generate(), RunId.generate()
    lease = await store.acquire(sealed, "worker", 60)
    await store.append(lease.epoch, [admitted_under(sealed, "k-1"), concluded(sealed, "succeeded")])
    await store.seal(sealed, lease.epoch, "succeeded")
    await store.release_lease(sealed, lease.epoch)
    other = await store.acquire(open_, "worker", 60)
    await store.append(other.epoch, [admitted(open_)])
    await store.request_cancel(open_, "ops", "stop")
    await execute(
        url,
        "INSERT INTO push_delivery (tenant, task_id, config_id, url, next_seq) "
        f"VALUES ('{store.tenant}', '{open_}', 'cfg-a', 'https://h.example/a', 1), "
        f"('{store.tenant}', '{open_}', 'cfg-b', 'https://h.example/b', 1)",
    )
    return {"sealed": sealed, "open": open_}


async def test_rows_below_a_floor_are_findings_of_the_audit_and_of_verify_all(url: str) -> None:
    acme = await SqlJournalStore.connect(url, tenant="acme")
    other = acme.for_tenant("other")
    try:
        runs = await _honest(acme, url)
        await _honest(other, url)
        assert await acme.audit_bounds() == []

        for table in COLUMN_FLOORS:
            await drop_checks(url, table)
        sealed, open_ = str(runs["sealed"]), str(runs["open"])
        t = "tenant = 'acme'"
        await execute(
            url,
            f"UPDATE run_activity SET updated_at = -1 WHERE {t} AND run_id = '{open_}'",
            f"UPDATE run_lease SET expires_at = -5 WHERE {t}",  # both of acme's leases
            f"UPDATE run_seal SET sealed_at = -2 WHERE {t}",
            f"UPDATE run_outcome SET ordinal = 0 WHERE {t}",
            f"UPDATE run_admission SET admitted_at = -3 WHERE {t}",
            f"UPDATE run_cancel SET requested_at = -4 WHERE {t}",
            f"UPDATE push_delivery SET attempts = -1 WHERE {t} AND config_id = 'cfg-a'",
            f"UPDATE push_delivery SET next_attempt_at = -9 WHERE {t} AND config_id = 'cfg-b'",
        )
        first_lease = min(sealed, open_)
        expected = [
            BoundsFinding("run_activity", "updated_at", 0, 1, open_),
            BoundsFinding("run_lease", "expires_at", 0, 2, first_lease),
            BoundsFinding("run_seal", "sealed_at", 0, 1, sealed),
            BoundsFinding("run_outcome", "ordinal", 1, 1, sealed),
            BoundsFinding("run_admission", "admitted_at", 0, 1, "k-1"),
            BoundsFinding("run_cancel", "requested_at", 0, 1, open_),
            BoundsFinding("push_delivery", "attempts", 0, 1, f"{open_}/cfg-a"),
            BoundsFinding("push_delivery", "next_attempt_at", 0, 1, f"{open_}/cfg-b"),
        ]
        assert await acme.audit_bounds() == expected
        assert await other.audit_bounds() == []

        # verify --all fails on them, by name; the other tenant's passes.
        code, out, err = await asyncio.to_thread(
            _main, ["verify", "--all", "--url", url, "--tenant", "acme"]
        )
        assert "Traceback" not in err, err
        assert code == 1, out + err
        lines = [line for line in out.splitlines() if line.startswith("bounds:")]
        assert lines[0] == (
            f"bounds: FAILED run_activity.updated_at: 1 row(s) below 0 (first: {open_}); its "
            "CHECK was dropped and the row(s) edited around the store"
        )
        assert len(lines) == len(expected)
        assert "verified 2 runs of tenant 'acme': all intact" in out  # the records are fine

        code, out, err = await asyncio.to_thread(
            _main, ["verify", "--all", "--json", "--url", url, "--tenant", "acme"]
        )
        assert code == 1 and "Traceback" not in err, err
        assert json.loads(out)["bounds"] == [
            {
                "table": f.table,
                "column": f.column,
                "floor": f.floor,
                "rows": f.rows,
                "first": f.first,
            }
            for f in expected
        ]

        code, out, err = await asyncio.to_thread(
            _main, ["verify", "--all", "--url", url, "--tenant", "other"]
        )
        assert code == 0, out + err
        assert "bounds: every counter and instant is at or above its floor" in out

        # The reads that meet these rows answer, and say what they cannot serve.
        assert (runs["open"], -1) in await acme.recent_runs()
        taken = await acme.acquire(runs["open"], "rescuer", 60)  # expired at -5: lapsed
        assert taken.epoch == 2
        push = await SqlPushStore.connect(url, tenant="acme")
        try:
            listing = await push.due(2**40, 10)
            assert list(listing) == []
            assert sorted(u.config_id for u in listing.unavailable) == ["cfg-a", "cfg-b"]
        finally:
            await push.close()
    finally:
        await acme.close()


async def test_a_journal_row_below_a_floor_fails_its_run_and_the_bounds_audit(
    url: str,
) -> None:
    store = await SqlJournalStore.connect(url, tenant="acme")
    try:
        run = RunId.generate()
        await store.append(0, [admitted(run)])
        await drop_checks(url, "journal")
        await execute(url, f"UPDATE journal SET epoch = -1 WHERE run_id = '{run}'")
        assert await store.audit_bounds() == [BoundsFinding("journal", "epoch", 0, 1, str(run))]
    finally:
        await store.close()
    code, out, err = await asyncio.to_thread(
        _main, ["verify", "--all", "--url", url, "--tenant", "acme"]
    )
    assert code == 1 and "Traceback" not in err, err
    assert f"FAILED {run} seq 1" in out  # the column disagrees with the hashed body
    assert "bounds: FAILED journal.epoch: 1 row(s) below 0" in out
