"""Advice that works verbatim: an error's command, run as printed, fixes what it reports.

An error naming a command names the database the application used (its URL with the
password masked, a SQLite path made absolute, ``--schema``/``--tenant`` when not the
defaults), so the command acts on that database from any directory, and never on the
command line's default ``./agentplane_journal.db``. Each test takes the command out of the
message, splits it with ``shlex`` as a shell would, runs it in another directory with no
``AGENTPLANE_JOURNAL_URL`` set, and shows the application then works. Seen red before:
``SchemaOutOfDateError`` said ``agentplane-journal upgrade``, which, run as written,
migrated ``./agentplane_journal.db``, exited 0, and left the application failing.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from agentplane_journal import (
    CorruptLogError,
    RunId,
    SchemaOutOfDateError,
    SqlJournalStore,
    WireProfileError,
)
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations.commands import current_revision

from support.helpers import admitted
from support.migration_tools import execute

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def commands_in(message: str) -> list[str]:
    """The ``agentplane-journal ...`` commands a message gives, as written between backticks."""
    return [c for c in re.findall(r"`([^`]+)`", message) if c.startswith("agentplane-journal ")]


def run_literally(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``command`` as a shell would split it, the console script being this checkout's."""
    argv = shlex.split(command)
    assert argv[0] == "agentplane-journal"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTPLANE_JOURNAL_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "agentplane_journal.cli.main", *argv[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """Another directory than the application's, to run the advice from."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path


@pytest.fixture
def fresh_url(
    dialect: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """A never-migrated database, named as an application would: SQLite by a path relative
    to the application's directory, PostgreSQL with a password (the test cluster trusts it)."""
    if dialect == "sqlite":
        app = tmp_path / "app"
        app.mkdir()
        monkeypatch.chdir(app)
        return "sqlite+aiosqlite:///graph.db"
    url = make_url(request.getfixturevalue("pg_database")(migrated=False))
    return url.set(password="s3cret-pw").render_as_string(hide_password=False)


async def test_the_schema_hint_run_as_printed_migrates_the_database_the_app_uses(
    fresh_url: str, elsewhere: Path
) -> None:
    with pytest.raises(SchemaOutOfDateError) as caught:
        await SqlJournalStore.connect(fresh_url)
    message = str(caught.value)
    assert "s3cret-pw" not in message  # never a secret
    [command] = commands_in(message)
    if make_url(fresh_url).password:
        assert ":***@" in command and "password in place of ***" in message
        command = command.replace("***", "s3cret-pw")  # what the advice asks of its reader

    result = run_literally(command, elsewhere)

    assert result.returncode == 0, result.stderr
    assert not (elsewhere / "agentplane_journal.db").exists()
    store = await SqlJournalStore.connect(fresh_url)  # the application now works
    try:
        run = RunId.generate()
        await store.append(0, [admitted(run)])
        assert (await store.head(run)).seq == 1
    finally:
        await store.close()


async def test_the_schema_hint_names_the_schema_the_store_was_opened_with(
    pg_database: Callable[..., str], elsewhere: Path
) -> None:
    url = pg_database(migrated=False)
    with pytest.raises(SchemaOutOfDateError) as caught:
        await SqlJournalStore.connect(url, schema="journal_x")
    [command] = commands_in(str(caught.value))
    assert "--schema journal_x" in command

    assert run_literally(command, elsewhere).returncode == 0
    assert await current_revision(url, schema="journal_x") == HEAD_REVISION
    store = await SqlJournalStore.connect(url, schema="journal_x")
    await store.close()


async def test_the_wire_profile_hint_run_as_printed_lets_the_store_open(
    dialect: str,
    request: pytest.FixtureRequest,
    sqlite_database: Callable[..., str],
    elsewhere: Path,
) -> None:
    url = (
        sqlite_database() if dialect == "sqlite" else str(request.getfixturevalue("pg_database")())
    )
    old = await SqlJournalStore.connect(url, tenant="acme", profile="agentplane-0.4")
    run = RunId.generate()
    await old.append(0, [admitted(run)])
    await old.close()
    with pytest.raises(WireProfileError) as caught:
        await SqlJournalStore.connect(url, tenant="acme", profile="agentplane-0.22")
    [command] = commands_in(str(caught.value))
    assert "--tenant acme" in command

    result = run_literally(command, elsewhere)

    assert result.returncode == 0, result.stderr
    store = await SqlJournalStore.connect(url, tenant="acme", profile="agentplane-0.22")
    try:
        run2 = RunId.generate()
        await store.append(0, [store.profile.append(run2, "Note", {"text": "now in 0.22"})])
        assert (await store.head(run2)).seq == 1
    finally:
        await store.close()


def test_the_langgraph_guides_upgrade_command_works_as_written(tmp_path: Path) -> None:
    # docs/guides/langgraph.md: a positional URL, as LangGraph users write it.
    result = run_literally("agentplane-journal upgrade sqlite+aiosqlite:///graph.db", tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "graph.db").exists()
    assert "upgraded from no revision" in result.stdout


def test_a_url_given_twice_differently_is_refused(tmp_path: Path) -> None:
    result = run_literally(
        "agentplane-journal upgrade sqlite+aiosqlite:///a.db --url sqlite+aiosqlite:///b.db",
        tmp_path,
    )
    assert result.returncode == 2
    assert "give the URL once" in result.stderr
    assert not (tmp_path / "a.db").exists() and not (tmp_path / "b.db").exists()


def test_the_clis_missing_file_hint_runs_as_printed(tmp_path: Path, elsewhere: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    result = run_literally("agentplane-journal runs --url sqlite:///journal.db", app)
    assert result.returncode == 2
    command = commands_in(result.stderr)[0]  # then "or try `agentplane-journal demo`"
    assert command.startswith("agentplane-journal upgrade --url ")

    assert run_literally(command, elsewhere).returncode == 0
    assert run_literally("agentplane-journal runs --url sqlite:///journal.db", app).returncode == 0


async def _sealed(store: SqlJournalStore) -> RunId:
    run = RunId.generate()
    lease = await store.acquire(run, "advice", 30)
    await store.append(lease.epoch, [admitted(run)])
    await store.seal(run, lease.epoch, "done")
    return run


async def test_the_corrupt_log_hints_run_as_printed_find_and_repair_the_log(
    make_store: Callable[..., Any], database_url: str, elsewhere: Path
) -> None:
    store: SqlJournalStore = await make_store()
    runs = [await _sealed(store) for _ in range(3)]
    await execute(  # a hostile log_index: the next position cannot be handed out
        database_url,
        f"UPDATE run_seal SET log_index = 9223372036854775807 "
        f"WHERE tenant = '{store.tenant}' AND run_id = '{runs[-1]}'",
    )
    with pytest.raises(CorruptLogError) as caught:
        await _sealed(store)
    verify, reindex = commands_in(str(caught.value))
    assert verify.startswith("agentplane-journal verify --all --url ")
    assert reindex.startswith("agentplane-journal reindex-log --url ")

    found = run_literally(verify, elsewhere)
    assert found.returncode == 1, found.stdout + found.stderr  # a finding, on this database
    assert "FAILED" in found.stdout + found.stderr
    repaired = run_literally(reindex, elsewhere)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr

    await _sealed(store)  # the application seals again
    assert (await store.checkpoint()).size == 4
