"""docs/host-guide.md's Alembic recipe, in a host made by ``alembic init -t async``, both dialects.

Each test builds the host as its developers would: ``alembic init -t async migrations`` run
for real in a temporary directory, the host's own models (``shop/models.py``: its own
``DeclarativeBase``, an ``orders`` table) and its own revisions, its URL in ``alembic.ini``.
The database is first brought to the host's head *without* the journal. Then exactly the
lines the host guide documents are added to the generated ``env.py`` (:data:`ADDITIONS`; a
test in test_readme.py checks it shows these very lines), and:

* ``alembic current`` / ``check`` / ``history`` / ``revision --autogenerate`` leave the
  journal alone (nothing created, no journal operation in the generated revision);
* ``alembic upgrade head --sql`` carries the journal's DDL, and touches nothing;
* ``alembic upgrade head`` adopts the journal on the database already at the host's head,
  and commits it (on SQLite too: the version row is there, a second run is a no-op);
* a host downgrade to one of its own revisions leaves the journal; ``downgrade base``
  takes everything down, and ``upgrade head`` brings everything back.

And the no-longer-documented alternative (our versions folder in the host's
``version_locations``): databases set up that way keep working.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.db.models import TABLE_NAMES, VERSION_TABLE
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations.commands import current_revision, versions_location

from support.helpers import admitted, concluded
from support.host_project import (
    ADDITIONS,
    HOST_MODELS,
    REV_1,
    REV_2,
    add_journal,
    edit,
    make_host,
)
from support.migration_tools import alembic_ok, output, query, run_alembic, table_names

pytestmark = pytest.mark.slow


def host(root: Path, *args: str) -> str:
    return alembic_ok(*args, cwd=root)


async def _journal_state(url: str) -> tuple[set[str], str | None]:
    return (await table_names(url)) & TABLE_NAMES, await current_revision(url)


@pytest.fixture
def url(dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]) -> str:
    if dialect == "sqlite":
        return sqlite_database(migrated=False)
    return request.getfixturevalue("pg_database")(migrated=False)


async def test_the_hosts_env_adopts_the_journal_only_on_upgrade_and_commits_it(
    tmp_path: Path, url: str
) -> None:
    root = make_host(tmp_path / "shop", url)
    host(root, "upgrade", "head")  # the shop in production, before it takes the journal in
    host_tables = {"orders", "alembic_version"}
    assert await table_names(url) == host_tables
    add_journal(root)

    # Read-only commands leave the journal alone: nothing is created or migrated.
    assert REV_2 in host(root, "current")
    assert "No new upgrade operations detected" in host(root, "check")
    host(root, "history", "--indicate-current")
    host(root, "heads")
    assert await table_names(url) == host_tables
    generated = host(root, "revision", "--autogenerate", "-m", "nothing to do")
    [script] = [p for p in (root / "migrations" / "versions").glob("*.py") if "nothing" in p.name]
    body = script.read_text()
    assert "op." not in body.split("def upgrade()")[1], body  # no journal table proposed
    script.unlink()
    assert await table_names(url) == host_tables, generated

    # The SQL a DBA reviews carries the journal's DDL, and running it touches nothing.
    sql = host(root, "upgrade", "head", "--sql")
    for table in ("journal", "run_seal", "push_delivery", "journal_counter", VERSION_TABLE):
        assert f"CREATE TABLE {table}" in sql or f"CREATE TABLE IF NOT EXISTS {table}" in sql, sql
    assert f"INSERT INTO {VERSION_TABLE} (version_num) VALUES (" in sql
    assert f"version_num='{HEAD_REVISION}'" in sql or f"VALUES ('{HEAD_REVISION}')" in sql
    assert "CREATE TABLE alembic_version" in sql and "CREATE TABLE orders" in sql
    assert await table_names(url) == host_tables

    # Adoption: one `alembic upgrade head`, with nothing of the host's own pending.
    said = host(root, "upgrade", "head")
    assert await _journal_state(url) == (set(TABLE_NAMES), HEAD_REVISION), said
    assert await query(url, "SELECT version_num FROM alembic_version") == [(REV_2,)]
    host(root, "upgrade", "head")  # a second deployment: nothing to do for either history
    assert await query(url, f"SELECT version_num FROM {VERSION_TABLE}") == [(HEAD_REVISION,)]
    assert "No new upgrade operations detected" in host(root, "check")

    store = await SqlJournalStore.connect(url)
    try:
        run = RunId.generate()
        lease = await store.acquire(run, "shop", 60)
        await store.append(lease.epoch, [admitted(run), concluded(run, "succeeded")])
        head = await store.seal(run, lease.epoch, "succeeded")
        assert await store.verify(run) == head
    finally:
        await store.close()

    # A host downgrade to one of its own revisions is the host's business only...
    host(root, "downgrade", REV_1)
    assert await _journal_state(url) == (set(TABLE_NAMES), HEAD_REVISION)
    assert await query(url, "SELECT count(*) FROM journal") == [(2,)]
    # ... `downgrade base` would drop the journal's records: refused, nothing dropped ...
    refused = run_alembic("downgrade", "base", cwd=root)
    assert refused.returncode != 0 and "the journal holds records" in refused.stderr
    assert await _journal_state(url) == (set(TABLE_NAMES), HEAD_REVISION)
    assert await query(url, "SELECT version_num FROM alembic_version") == [(REV_1,)]
    # ... and when told, takes the whole database down; `upgrade head` brings it back.
    host(root, "-x", "drop_records=yes", "downgrade", "base")
    # (as Alembic leaves them: both version tables, empty)
    assert await table_names(url) == {"alembic_version", VERSION_TABLE}
    assert await current_revision(url) is None
    host(root, "upgrade", "head")
    assert await _journal_state(url) == (set(TABLE_NAMES), HEAD_REVISION)
    assert await query(url, "SELECT version_num FROM alembic_version") == [(REV_2,)]
    assert "No new upgrade operations detected" in host(root, "check")


async def test_a_pending_journal_migration_is_not_applied_by_current_or_check(
    tmp_path: Path, url: str
) -> None:
    root = make_host(tmp_path / "shop", url)
    add_journal(root)
    # A fresh database: everything is pending, and only upgrade may apply it.
    for args in (("current",), ("check",), ("history", "-i"), ("heads",)):
        result = run_alembic(*args, cwd=root)
        assert await _journal_state(url) == (set(), None), output(result)
    host(root, "upgrade", "head")
    assert await _journal_state(url) == (set(TABLE_NAMES), HEAD_REVISION)


async def test_the_hosts_version_locations_can_carry_our_revisions_instead(
    tmp_path: Path, url: str
) -> None:
    """Our revisions in the host's own history (`alembic upgrade heads`): no longer
    documented (two heads, site-packages paths), but databases set up so keep working."""
    root = make_host(tmp_path / "shop", url)
    # Only the autogenerate filters in env.py, and our folder in version_locations.
    edit(root / "migrations" / "env.py", [ADDITIONS[0], ADDITIONS[2]])
    edit(root / "migrations" / "env.py", [("    run_journal_migrations(context)\n", "")])
    ours = versions_location()
    assert " " not in str(ours)
    # (Alembic >= 1.16 says `path_separator`, older ones `version_path_separator`.)
    ini = root / "alembic.ini"
    text = re.sub(r"(?m)^((?:version_)?path_separator) = os\b.*$", r"\1 = space", ini.read_text())
    text, found = re.subn(
        r"(?m)^# version_locations = .*$",
        f"version_locations = %(here)s/migrations/versions {ours}",
        text,
    )
    assert found == 1 and "path_separator = space" in text, text
    ini.write_text(text)
    heads = host(root, "heads")
    assert REV_2 in heads and HEAD_REVISION in heads
    host(root, "upgrade", "heads")
    rows = {r[0] for r in await query(url, "SELECT version_num FROM alembic_version")}
    assert rows == {REV_2, HEAD_REVISION}
    assert VERSION_TABLE not in await table_names(url)
    assert await current_revision(url) == HEAD_REVISION  # the store finds it there
    assert "No new upgrade operations detected" in host(root, "check")
    store = await SqlJournalStore.connect(url)
    try:
        assert (await store.checkpoint()).size == 0
    finally:
        await store.close()


def test_alembic_init_is_the_one_this_test_ran(tmp_path: Path) -> None:
    """The generated env.py is Alembic's own async template (not a copy kept in tests/)."""
    alembic_ok("init", "-t", "async", "m", cwd=tmp_path)
    env = (tmp_path / "m" / "env.py").read_text()
    assert "async_engine_from_config" in env and "await connection.run_sync" in env
    assert "commit" not in env  # the template never commits: why the journal commits itself


CLASHING_MODEL = '''

class Ledger(Base):
    """The shop's own table that happens to have the journal's name."""

    __tablename__ = "journal"
    __table_args__ = {"schema": None}

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    entry: Mapped[str] = mapped_column(Text, nullable=False)
'''


async def test_a_host_model_where_a_journal_table_lives_is_refused_loudly(
    tmp_path: Path, url: str
) -> None:
    """Same name, same schema: not silently left out of the host's autogenerate."""
    root = make_host(tmp_path / "shop", url)
    host(root, "upgrade", "head")  # the shop before it takes the journal and a `journal`
    (root / "shop" / "models.py").write_text(HOST_MODELS.lstrip() + CLASHING_MODEL)
    add_journal(root)
    for args in (("check",), ("revision", "--autogenerate", "-m", "ledger"), ("upgrade", "head")):
        result = run_alembic(*args, cwd=root)
        assert result.returncode != 0, output(result)
        assert "SchemaConflictError" in result.stderr, output(result)
        assert "your model's table 'journal'" in result.stderr, output(result)
    assert await _journal_state(url) == (set(), None)


@pytest.mark.postgres
async def test_postgresql_a_host_table_of_our_name_in_another_schema_is_seen(
    tmp_path: Path, pg_database: Callable[..., str]
) -> None:
    """The journal in schema `journal`, the host's own `journal` in `public`: the host's
    autogenerate and `alembic check` see the host's table (they used to hide it by name)."""
    url = pg_database(migrated=False)
    root = make_host(tmp_path / "shop", url)
    (root / "shop" / "models.py").write_text(HOST_MODELS.lstrip() + CLASHING_MODEL)
    add_journal(root, schema="journal")
    host(root, "upgrade", "head")  # the host's revisions, and the journal in its schema
    result = run_alembic("check", cwd=root)
    assert result.returncode != 0 and "add_table" in output(result), output(result)
    assert "journal" in output(result)
    host(root, "revision", "--autogenerate", "-m", "ledger")
    [script] = (root / "migrations" / "versions").glob("*ledger*.py")
    assert "op.create_table('journal'" in script.read_text() or 'op.create_table("journal"' in (
        script.read_text()
    )
    host(root, "upgrade", "head")
    assert "No new upgrade operations detected" in host(root, "check")
    rows = await query(
        url,
        "SELECT table_schema FROM information_schema.tables WHERE table_name = 'journal' "
        "ORDER BY 1",
    )
    assert rows == [("journal",), ("public",)]
