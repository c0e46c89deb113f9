"""pytest fixtures for a host's own test suite: a throwaway, migrated journal database.

In the host's ``conftest.py``::

    pytest_plugins = ["agentplane_journal.testing"]

then a test asks for ``journal_database`` (the async URL of a fresh database at this
package's head revision, for ``SqlJournalStore.connect``, ``create_async_engine`` or the
host's own Alembic): a SQLite file in the test's ``tmp_path`` by default. With
``AGENTPLANE_JOURNAL_TEST_URL`` set to a PostgreSQL URL whose user may ``CREATE DATABASE``,
each test gets a new PostgreSQL database on that server instead, dropped afterwards.

The fixture is synchronous (it runs the migration on a private event loop), so it works
with any async test plugin, or none. Importing this module imports pytest: it is for
tests only, and the runtime never imports it.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentplane_journal.db.engine import async_url
from agentplane_journal.migrations.commands import upgrade

__all__ = ["TEST_URL_VARIABLE", "journal_database"]

#: The environment variable naming a PostgreSQL server (any database on it) for the tests.
TEST_URL_VARIABLE = "AGENTPLANE_JOURNAL_TEST_URL"


async def _admin(url: str, statement: str) -> None:
    import asyncpg

    target = async_url(url).set(drivername="postgresql")
    conn = await asyncpg.connect(target.render_as_string(hide_password=False))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture
def journal_database(tmp_path: Path) -> Iterator[str]:
    """The async URL of a new database migrated to this package's head, for one test."""
    server = os.environ.get(TEST_URL_VARIABLE)
    if not server:
        url = f"sqlite+aiosqlite:///{tmp_path / 'journal.db'}"
        asyncio.run(upgrade(url))
        yield url
        return
    name = f"journal_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(server, f'CREATE DATABASE "{name}"'))
    try:
        url = async_url(server).set(database=name).render_as_string(hide_password=False)
        asyncio.run(upgrade(url))
        yield url
    finally:
        asyncio.run(_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
