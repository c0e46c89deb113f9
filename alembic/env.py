"""Alembic environment for agentplane_journal (async, and embeddable in a host's deployment).

Where the database comes from, first match wins:

1. ``config.attributes["connection"]``: a synchronous ``Connection`` handed in by a caller
   that already holds one (``agentplane_journal.migrate`` and tests do this);
2. ``config.attributes["engine"]``: an ``AsyncEngine`` or ``Engine`` (a host application's);
3. the ``AGENTPLANE_JOURNAL_URL`` environment variable;
4. ``alembic -x url=...``;
5. ``sqlalchemy.url`` in ``alembic.ini`` (a local SQLite file by default).

The package's version table is ``agentplane_journal_alembic_version`` and autogenerate only
looks at the package's own tables, so this history lives beside a host's without touching it.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from agentplane_journal.engine import create_engine
from agentplane_journal.migrate import include_name, include_object
from agentplane_journal.models import VERSION_TABLE, metadata

config = context.config


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
        include_name=include_name,
        include_object=include_object,
        compare_type=True,
        compare_server_default=True,
        render_as_batch=True,
        **kwargs,
    )


def _run_sync(connection: Connection) -> None:
    _configure(connection=connection)
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
    _configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
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
