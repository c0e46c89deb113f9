"""A host application carrying the journal inside its own SQLAlchemy app and Alembic env.

The host here is written out for real into a temporary directory: its own models (its own
``DeclarativeBase`` and ``MetaData``, an ``invoice`` table), its own ``alembic.ini``, an
async ``env.py`` and one revision of its own. Its ``env.py`` does the two things the host guide
asks of a host: call :func:`agentplane_journal.migrations.commands.upgrade_connection` in its online
migration, and pass ``host_include_name``/``host_include_object`` to ``context.configure``.

On both SQLite and PostgreSQL: one ``alembic upgrade head`` in the host directory creates
the host's tables (tracked in ``alembic_version``) and ours (tracked in
``agentplane_journal_alembic_version``); the host's ``alembic check`` finds nothing to do;
the store works on that database, also atomically with the host's own rows. And without the
filters the host's autogenerate would drop our tables, so the helpers are what make the
difference.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import pool, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.db.models import TABLE_NAMES, VERSION_TABLE, metadata
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations.commands import current_revision
from agentplane_journal.migrations.host import host_include_name, host_include_object

from support.helpers import admitted, concluded, note
from support.migration_tools import alembic_ok, output, query, run_alembic, table_names

pytestmark = pytest.mark.slow

HOST_REVISION = "h0001_invoices"

HOST_MODELS = '''
"""The host application's own models: its own base, its own metadata."""

from sqlalchemy import BigInteger, Integer, MetaData, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "pk": "pk_%(table_name)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ix": "ix_%(table_name)s_%(column_0_name)s",
        }
    )


class Invoice(Base):
    __tablename__ = "invoice"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    number: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    amount_cents: Mapped[int] = mapped_column(BigInteger, nullable=False)
    run_id: Mapped[str | None] = mapped_column(Text, index=True)
'''

HOST_INI = """
[alembic]
script_location = %(here)s/migrations
prepend_sys_path = .
path_separator = os

[loggers]
keys = root

[handlers]
keys = console

[formatters]
keys = generic

[logger_root]
level = WARNING
handlers = console

[handler_console]
class = StreamHandler
args = (sys.stderr,)
level = NOTSET
formatter = generic

[formatter_generic]
format = %(levelname)-5.5s [%(name)s] %(message)s
"""

HOST_ENV = '''
"""The host's Alembic environment: async, and carrying agentplane_journal's history too."""

import asyncio
import os

from alembic import context
from sqlalchemy import pool
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal.migrations.commands import upgrade_connection
from agentplane_journal.migrations.host import host_include_name, host_include_object
from host_models import Base

config = context.config
URL = os.environ["HOST_DATABASE_URL"]
# Only so a test can show what happens without the filters; a real host always passes them.
FILTERS = os.environ.get("HOST_WITHOUT_JOURNAL_FILTERS") != "1"


def run_migrations(connection):
    # The journal's own history first, in its own version table, on the same connection.
    upgrade_connection(connection)
    filters = (
        {"include_name": host_include_name, "include_object": host_include_object}
        if FILTERS
        else {}
    )
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        compare_type=True,
        compare_server_default=True,
        **filters,
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations():
    engine = create_async_engine(URL, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run_migrations)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("this host does not generate offline SQL")
asyncio.run(run_async_migrations())
'''

HOST_REVISION_SCRIPT = f'''
"""invoices

Revision ID: {HOST_REVISION}
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "{HOST_REVISION}"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "invoice",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Text(), nullable=False),
        sa.Column("amount_cents", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_invoice"),
        sa.UniqueConstraint("number", name="uq_invoice_number"),
    )
    op.create_index("ix_invoice_run_id", "invoice", ["run_id"])


def downgrade():
    op.drop_index("ix_invoice_run_id", table_name="invoice")
    op.drop_table("invoice")
'''


def write_host_app(root: Path) -> Path:
    """The host application's project directory, as its developers would have it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "host_models.py").write_text(HOST_MODELS.lstrip())
    (root / "alembic.ini").write_text(HOST_INI.lstrip())
    migrations = root / "migrations"
    (migrations / "versions").mkdir(parents=True)
    (migrations / "env.py").write_text(HOST_ENV.lstrip())
    mako = Path(__file__).resolve().parents[1] / "alembic" / "script.py.mako"
    (migrations / "script.py.mako").write_text(mako.read_text())
    (migrations / "versions" / f"{HOST_REVISION}.py").write_text(HOST_REVISION_SCRIPT.lstrip())
    return root


def load_host_models(root: Path) -> ModuleType:
    """Import the host's models module in this process (under a unique name)."""
    name = f"host_models_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, root / "host_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return write_host_app(tmp_path / "host_app")


@pytest.fixture
def host_url(
    dialect: str, request: pytest.FixtureRequest, sqlite_database: Callable[..., str]
) -> str:
    """The host's database: fresh and empty (the host's one deployment step creates all)."""
    if dialect == "sqlite":
        return sqlite_database(migrated=False)
    return request.getfixturevalue("pg_database")(migrated=False)


def host_alembic(host: Path, url: str, *args: str, filters: bool = True) -> Any:
    env = {"HOST_DATABASE_URL": url}
    if not filters:
        env["HOST_WITHOUT_JOURNAL_FILTERS"] = "1"
    return run_alembic(*args, cwd=host, env=env)


def host_ok(host: Path, url: str, *args: str) -> str:
    return alembic_ok(*args, cwd=host, env={"HOST_DATABASE_URL": url})


async def test_one_host_upgrade_creates_the_hosts_tables_and_ours_each_in_its_own_history(
    host: Path, host_url: str
) -> None:
    host_ok(host, host_url, "upgrade", "head")

    tables = await table_names(host_url)
    assert tables == {"invoice", "alembic_version", *TABLE_NAMES}
    assert await query(host_url, "SELECT version_num FROM alembic_version") == [(HOST_REVISION,)]
    assert await query(host_url, f"SELECT version_num FROM {VERSION_TABLE}") == [(HEAD_REVISION,)]
    assert await current_revision(host_url) == HEAD_REVISION
    assert HOST_REVISION in host_ok(host, host_url, "current")

    # A second deployment is a no-op for both histories.
    host_ok(host, host_url, "upgrade", "head")
    assert await table_names(host_url) == tables
    assert await query(host_url, f"SELECT count(*) FROM {VERSION_TABLE}") == [(1,)]


async def test_the_hosts_alembic_check_leaves_our_tables_alone(host: Path, host_url: str) -> None:
    host_ok(host, host_url, "upgrade", "head")
    assert "No new upgrade operations detected" in host_ok(host, host_url, "check")


async def test_without_the_filters_the_hosts_autogenerate_would_drop_our_tables(
    host: Path, host_url: str
) -> None:
    host_ok(host, host_url, "upgrade", "head")

    # The host's own `alembic check`, with the filters taken out of its env.py.
    unfiltered = host_alembic(host, host_url, "check", filters=False)
    assert unfiltered.returncode != 0, output(unfiltered)
    text = unfiltered.stdout + unfiltered.stderr
    dropped = set(re.findall(r"\('remove_table', Table\('(\w+)'", text))
    assert dropped == set(TABLE_NAMES), output(unfiltered)

    # The same comparison in-process, to name every operation exactly.
    models = load_host_models(host)
    engine = create_async_engine(host_url, poolclass=pool.NullPool)

    def diff(sync_conn: Any, filtered: bool) -> list[Any]:
        opts: dict[str, Any] = {"compare_type": True, "compare_server_default": True}
        if filtered:
            opts.update(include_name=host_include_name, include_object=host_include_object)
        return compare_metadata(
            MigrationContext.configure(sync_conn, opts=opts), models.Base.metadata
        )

    try:
        async with engine.connect() as conn:
            without = await conn.run_sync(diff, False)
            with_filters = await conn.run_sync(diff, True)
    finally:
        await engine.dispose()

    assert with_filters == []
    removed = {op[1].name for op in without if op[0] == "remove_table"}
    assert removed == set(TABLE_NAMES)
    # ... and their indexes; nothing else (the host's own table matches its models).
    for op in without:
        assert op[0] in {"remove_table", "remove_index"}, op
        table = op[1] if op[0] == "remove_table" else op[1].table
        assert table.name in TABLE_NAMES, op


async def test_the_store_works_on_the_hosts_database_and_commits_with_the_hosts_rows(
    host: Path, host_url: str
) -> None:
    host_ok(host, host_url, "upgrade", "head")
    Invoice = load_host_models(host).Invoice

    store = await SqlJournalStore.connect(host_url, tenant="shop")
    try:
        run = RunId.generate()
        lease = await store.acquire(run, "checkout", 60)

        async def bill(session: AsyncSession) -> list[Any]:
            session.add(Invoice(number="INV-1", amount_cents=4200, run_id=str(run)))
            return [admitted(run), note(run, "invoice INV-1 issued")]

        written = await store.append_atomic(run, lease.epoch, bill)
        assert [r.seq for r in written] == [1, 2]

        # A failing unit writes neither the host's row nor the records.
        async def fail(session: AsyncSession) -> list[Any]:
            session.add(Invoice(number="INV-2", amount_cents=1, run_id=str(run)))
            raise RuntimeError("payment declined")

        with pytest.raises(RuntimeError, match="payment declined"):
            await store.append_atomic(run, lease.epoch, fail)

        await store.append(lease.epoch, [concluded(run, "succeeded")])
        head = await store.seal(run, lease.epoch, "succeeded")
        assert await store.verify(run) == head
        checkpoint = await store.checkpoint()
        assert checkpoint.size == 1
        inclusion = await store.inclusion_proof(run)
        assert inclusion is not None and inclusion.verify(checkpoint.root)
    finally:
        await store.close()

    engine = create_async_engine(host_url, poolclass=pool.NullPool)
    try:
        async with AsyncSession(engine) as session:
            numbers = (await session.execute(select(Invoice.number))).scalars().all()
    finally:
        await engine.dispose()
    assert numbers == ["INV-1"]
    # The host's history and ours are still where the deployment put them.
    assert await query(host_url, "SELECT version_num FROM alembic_version") == [(HOST_REVISION,)]
    assert await current_revision(host_url) == HEAD_REVISION


def test_host_filters_exclude_exactly_our_tables_and_their_objects() -> None:
    assert TABLE_NAMES == frozenset(metadata.tables) | {VERSION_TABLE}
    for name in TABLE_NAMES:
        assert not host_include_name(name, "table", {})
        assert not host_include_name("journal_x_idx", "index", {"table_name": name})
    assert host_include_name("invoice", "table", {})
    assert host_include_name("ix_invoice_run_id", "index", {"table_name": "invoice"})
    journal = metadata.tables["journal"]
    assert not host_include_object(journal, "journal", "table", False, None)
    index = next(iter(journal.indexes))
    assert not host_include_object(index, index.name, "index", False, None)
    assert not host_include_object(journal.c.seq, "seq", "column", False, None)
