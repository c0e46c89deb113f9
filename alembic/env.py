"""Alembic environment for agentplane_journal (async, and embeddable in a host's deployment).

Where the database comes from, first match wins:

1. ``config.attributes["connection"]``: a synchronous ``Connection`` handed in by a caller
   that already holds one (``agentplane_journal.migrations.commands`` and tests do this);
2. ``config.attributes["engine"]``: an ``AsyncEngine`` or ``Engine`` (a host application's);
3. the ``AGENTPLANE_JOURNAL_URL`` environment variable;
4. ``alembic -x url=...``;
5. ``sqlalchemy.url`` in ``alembic.ini`` (a local SQLite file by default).

The package's version table is ``agentplane_journal_alembic_version`` and autogenerate only
looks at the package's own tables, so this history lives beside a host's without touching it.

Where the tables go (PostgreSQL): ``config.attributes["schema"]``, else the
``AGENTPLANE_JOURNAL_SCHEMA`` environment variable, else ``-x schema=...``; none means the
default schema. The revision scripts read it from the ``agentplane_journal_schema`` option.
Offline (``--sql``) without a URL, ``config.attributes["dialect_name"]`` names the dialect.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from agentplane_journal.db.dialect import dialect_for
from agentplane_journal.db.engine import async_url, create_engine
from agentplane_journal.db.models import VERSION_TABLE, metadata
from agentplane_journal.migrations.commands import DROP_RECORDS_OPTION, SCHEMA_OPTION, prepare
from agentplane_journal.migrations.host import include_name, include_object

config = context.config
SCHEMA = (
    config.attributes.get("schema")
    or os.environ.get("AGENTPLANE_JOURNAL_SCHEMA")
    or context.get_x_argument(as_dictionary=True).get("schema")
    or None
)


def _url() -> str:
    return (
        os.environ.get("AGENTPLANE_JOURNAL_URL")
        or context.get_x_argument(as_dictionary=True).get("url")
        or config.get_main_option("sqlalchemy.url")
        or "sqlite+aiosqlite:///agentplane_journal.db"
    )


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        version_table_schema=SCHEMA,
        include_name=include_name,
        include_object=include_object,
        compare_type=True,
        compare_server_default=True,
        render_as_batch=True,
        **{SCHEMA_OPTION: SCHEMA},
        **{DROP_RECORDS_OPTION: bool(config.attributes.get("drop_records"))},
        **kwargs,
    )


def _run_sync(connection: Connection) -> None:
    _configure(connection=connection)
    if "connection" in config.attributes:
        # migrate.upgrade_connection: checked, and in its transaction under the lock.
        with context.begin_transaction():
            context.run_migrations()
        return
    # Run by the alembic CLI itself: under the migration lock (several processes may
    # migrate one database at once), refuse a newer database or a colliding table before
    # creating anything.
    fn = context.get_context().environment_context.context_opts.get("fn")
    with dialect_for(connection, any_driver=True).begin_migration(connection, join=False):
        prepare(connection, SCHEMA, upgrading=getattr(fn, "__name__", None) == "upgrade")
        with context.begin_transaction():
            context.run_migrations()


async def _run_async(engine: AsyncEngine, dispose: bool) -> None:
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_sync)
            await connection.commit()
    finally:
        if dispose:
            await engine.dispose()


def run_migrations_offline() -> None:
    dialect_name = config.attributes.get("dialect_name")
    where = {"dialect_name": dialect_name} if dialect_name else {"url": async_url(_url())}
    _configure(literal_binds=True, dialect_opts={"paramstyle": "named"}, **where)
    if SCHEMA is not None:
        context.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_sync(connection)
        return
    engine = config.attributes.get("engine")
    if isinstance(engine, Engine):
        with engine.connect() as conn:
            _run_sync(conn)
            conn.commit()
        return
    if isinstance(engine, AsyncEngine):
        asyncio.run(_run_async(engine, dispose=False))
        return
    asyncio.run(_run_async(create_engine(_url(), poolclass=pool.NullPool), dispose=True))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
