"""The host-application guide's whole files run here as written (docs/host-guide.md).

Its host application, its Alembic lines and its sync pattern, marked ``tested-by`` this
file in the guide. The README's own example runs with every runnable block of the docs
(tests/test_docs_examples.py).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations.commands import current_revision, upgrade

from support.host_project import HOST_OWN, add_journal, make_host
from support.host_project import edit as edit
from support.migration_tools import alembic_ok, query, table_names

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
HOST_GUIDE = ROOT / "docs" / "host-guide.md"


@pytest.fixture
def url(dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]) -> str:
    """A fresh, never-migrated database of each dialect."""
    if dialect == "sqlite":
        return sqlite_database(migrated=False)
    return request.getfixturevalue("pg_database")(migrated=False)


def block(page: Path, first_line: str) -> str:
    """The code block of ``page`` whose first line is ``first_line``."""
    text = page.read_text(encoding="utf-8")
    for match in re.finditer(r"```(?:python|sh|ini)\n(.*?)```", text, re.S):
        if match.group(1).startswith(first_line):
            return match.group(1)
    raise AssertionError(f"no code block starting {first_line!r} in {page.name}")


INSIDE = HOST_GUIDE  # the README's "Inside your application", now a docs page


def test_the_readme_shows_exactly_the_env_py_lines_the_host_test_adds(tmp_path: Path) -> None:
    """Every line of the README's env.py excerpt is in the env.py the host tests run."""
    excerpt = block(INSIDE, "# migrations/env.py")
    root = make_host(tmp_path / "shop", "sqlite+aiosqlite:///unused.db")
    add_journal(root)
    tested = {line.strip() for line in (root / "migrations" / "env.py").read_text().splitlines()}
    for line in excerpt.splitlines()[1:]:
        code = line.split("  # ")[0].strip()
        if code:
            assert code in tested, f"README env.py line not in the tested env.py: {line!r}"
    added = [line for line in excerpt.splitlines() if "# added" in line]
    assert len(added) == 5


async def test_the_readme_host_example_runs_as_written(tmp_path: Path, url: str) -> None:
    """shop/models.py and shop/app.py from the README, alembic init, the README's commands."""
    root = tmp_path / "project"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "models.py").write_text(block(INSIDE, "# shop/models.py"))
    (root / "shop" / "app.py").write_text(block(INSIDE, "# shop/app.py"))

    commands = block(INSIDE, "alembic init -t async migrations")
    steps = [line.split("#")[0].split() for line in commands.splitlines() if line.strip()]
    assert steps[0] == ["alembic", "init", "-t", "async", "migrations"]
    alembic_ok(*steps[0][1:], cwd=root)
    # The host's own edits: its URL in alembic.ini, its models as target_metadata; then ours.
    edit(root / "alembic.ini", [("driver://user:pass@localhost/dbname", url.replace("%", "%%"))])
    edit(root / "migrations" / "env.py", HOST_OWN)
    add_journal(root)
    for step in steps[1:]:
        assert step[0] == "alembic"
        alembic_ok(*step[1:], cwd=root)
    assert await current_revision(url) == HEAD_REVISION
    assert "orders" in await table_names(url)

    env = {**os.environ, "DATABASE_URL": url}  # an async URL, as create_async_engine needs
    for placed in (1, 2):  # the guide's command, and the same again: a reader runs it twice
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "shop.app"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        printed = r"run run_[0-9A-Z]{26}: 2 records; declined orders kept: 0\n"
        assert re.fullmatch(printed, result.stdout), result.stdout
        assert await query(url, "SELECT count(*) FROM orders") == [(placed,)]
        assert await query(url, "SELECT count(*) FROM journal") == [(2 * placed,)]


async def test_the_readme_sync_pattern_runs_and_asyncio_run_per_call_does_not(
    tmp_path: Path, url: str
) -> None:
    await upgrade(url)
    code = block(INSIDE, "import asyncio\nimport threading")
    assert 'Journal("sqlite:///journal.db")' in code
    code = code.replace('Journal("sqlite:///journal.db")', f"Journal({url!r})")
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1\n"
    if url.startswith("postgresql"):
        broken = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", ASYNCIO_RUN_PER_CALL, url],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "attached to a different loop" in broken.stdout + broken.stderr, broken


# What the README says is not supported: a store kept across asyncio.run() calls.
ASYNCIO_RUN_PER_CALL = """
import asyncio, sys
from agentplane_journal import RunId, SqlJournalStore

store = asyncio.run(SqlJournalStore.connect(sys.argv[1]))
asyncio.run(store.acquire(RunId.generate(), "web", 30))
"""


def test_the_readme_host_snippets_type_check_under_mypy_strict(tmp_path: Path) -> None:
    """The host's own code as the README writes it (models, app, the env.py with our lines,
    the sync helper) passes ``mypy --strict``, as a host running mypy in CI would need."""
    root = make_host(tmp_path / "shop", "sqlite+aiosqlite:///unused.db")
    add_journal(root)
    (root / "shop" / "models.py").write_text(block(INSIDE, "# shop/models.py"))
    (root / "shop" / "app.py").write_text(block(INSIDE, "# shop/app.py"))
    sync = block(HOST_GUIDE, "import asyncio\nimport threading")
    (root / "shop" / "journal_sync.py").write_text(sync)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "shop/models.py",
            "shop/app.py",
            "shop/journal_sync.py",
            "migrations/env.py",
        ],
        cwd=root,
        env={**os.environ, "MYPYPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
