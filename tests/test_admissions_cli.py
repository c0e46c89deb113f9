"""The admission-key commands, in process, on both dialects: ``forget-admissions``,
``reindex-admissions``, and the check of ``run_admission`` that ``verify --all`` runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentplane_journal import SqlJournalStore

from support.admissions import admit, sql
from support.clock import FakeClock
from support.tamper import tamper_cli

pytestmark = pytest.mark.slow

DAY = 86_400


def common(store: SqlJournalStore, url: str) -> list[str]:
    return ["--url", url, "--tenant", store.tenant]


async def test_forget_admissions_retires_what_is_older_than_the_window(
    make_store: Callable[..., Any], database_url: str, clock: FakeClock
) -> None:
    store: SqlJournalStore = await make_store()
    clock.now = float(int(time.time()) - 10 * DAY)
    old = await admit(store, "old")
    clock.now = float(int(time.time()))
    new = await admit(store, "new")

    result = await tamper_cli(
        "forget-admissions", "--older-than-days", "30", *common(store, database_url)
    )
    assert result.returncode == 0, result.stderr
    assert f"retired 0 admission key(s) of tenant {store.tenant!r}" in result.stdout

    result = await tamper_cli(
        "forget-admissions", "--older-than-days", "5", "--json", *common(store, database_url)
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["retired"], report["older_than_days"]) == (1, 5)
    assert report["older_than"] <= int(time.time()) - 5 * DAY
    assert await store.admitted_as("old") is None
    assert await store.admitted_as("new") == new
    assert len(await store.read(old)) == 1  # the run stays


@pytest.mark.parametrize("days", [["0"], ["-3"], ["soon"], []])
async def test_forget_admissions_needs_a_window_of_at_least_a_day(
    make_store: Callable[..., Any], database_url: str, days: list[str]
) -> None:
    store: SqlJournalStore = await make_store()
    run = await admit(store, "kept")
    flag = ["--older-than-days", *days] if days else []
    result = await tamper_cli("forget-admissions", *flag, *common(store, database_url))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--older-than-days" in result.stderr
    assert await store.admitted_as("kept") == run


async def test_reindex_admissions_claims_lost_rows_and_fails_on_what_it_cannot_repair(
    make_store: Callable[..., Any], database_url: str
) -> None:
    store: SqlJournalStore = await make_store()
    run = await admit(store, "lost")
    await sql(store, "DELETE FROM run_admission WHERE tenant = :t")
    result = await tamper_cli("reindex-admissions", "--json", *common(store, database_url))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["claimed"] == 1 and report["unclaimed"] == 1
    assert await store.admitted_as("lost") == run

    again = await tamper_cli("reindex-admissions", *common(store, database_url))
    assert again.returncode == 0, again.stderr
    assert "0 key(s) claimed, 0 row(s) no record backs removed" in again.stdout

    await sql(
        store,
        "UPDATE journal SET raw = :raw WHERE tenant = :t AND run_id = :r",
        raw=b"{}",
        r=str(run),
    )
    broken = await tamper_cli("reindex-admissions", *common(store, database_url))
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"FAILED admission ({run} seq 1, bad-record)" in broken.stdout
    assert "unchecked-row" in broken.stdout and "FAILED" in broken.stderr
    assert await store.admitted_as("lost") == run  # kept


async def test_verify_all_checks_the_admission_keys(
    make_store: Callable[..., Any], database_url: str
) -> None:
    store: SqlJournalStore = await make_store()
    held = await admit(store, "held")
    unkeyed = await admit(store, None)
    ok = await tamper_cli("verify", "--all", *common(store, database_url))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "admission keys: 1 rows, 1 keyed admissions; the table matches the records" in ok.stdout

    await sql(store, "UPDATE run_admission SET run_id = :r WHERE tenant = :t", r=str(unkeyed))
    bad = await tamper_cli("verify", "--all", *common(store, database_url))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"FAILED admission key 'held' ({unkeyed}, orphan-row)" in bad.stdout
    as_json = await tamper_cli("verify", "--all", "--json", *common(store, database_url))
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["failed"] == 0 and report["log"]["ok"]  # the runs and the log are fine
    admissions = report["admissions"]
    assert not admissions["ok"] and [f["what"] for f in admissions["findings"]] == ["orphan-row"]

    assert (await tamper_cli("reindex-admissions", *common(store, database_url))).returncode == 0
    assert await store.admitted_as("held") == held
    assert (await tamper_cli("verify", "--all", *common(store, database_url))).returncode == 0

    # Retired keys are reported, not failed: retiring is what forget-admissions is for.
    assert await store.forget_admissions(2**40) == 1
    retired = await tamper_cli("verify", "--all", *common(store, database_url))
    assert retired.returncode == 0, retired.stdout + retired.stderr
    assert "1 key(s) held by no row" in retired.stdout
