"""Schema versioning: upgrade a database, read its revision, refuse one that is out of date.

The schema is created by Alembic and only by Alembic. The migrations travel inside the
wheel (``agentplane_journal/_alembic``; ``alembic/`` in a source tree), so an installed
package upgrades a database without the source tree. The package keeps its own version
table, ``agentplane_journal_alembic_version``, beside any host application's.

Host applications: call :func:`upgrade_connection` from your own ``env.py`` so one
``alembic upgrade head`` upgrades both histories, and pass :func:`host_include_name` /
:func:`host_include_object` to your ``context.configure`` so your autogenerate neither drops
nor alters our tables.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import alembic.context
import alembic.op
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, literal, pool, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .engine import create_engine
from .errors import SchemaOutOfDateError
from .models import TABLE_NAMES, VERSION_TABLE, metadata

__all__ = [
    "HEAD_REVISION",
    "alembic_config",
    "check_revision",
    "current_revision",
    "host_include_name",
    "host_include_object",
    "include_name",
    "include_object",
    "script_location",
    "tables_with_rows",
    "upgrade",
    "upgrade_connection",
]

#: The revision this version of the package works against. A test pins it to the script
#: directory's single head, so it cannot drift from the migrations.
HEAD_REVISION = "0002_log_tree"


def script_location() -> Path:
    """Where the migrations are: inside the installed wheel, else the source tree's ``alembic/``."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_alembic", here.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(
        "agentplane_journal's migrations are missing from this installation "
        f"(looked in {here / '_alembic'} and {here.parent / 'alembic'}); reinstall the package"
    )


def alembic_config(url: str | None = None, **attributes: Any) -> Config:
    """An Alembic ``Config`` for this package's history, without needing an ``alembic.ini``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes.update(attributes)
    return cfg


# -- autogenerate filters ---------------------------------------------------------------


def include_name(name: str | None, type_: str, parent_names: Mapping[str, Any]) -> bool:
    """For this package's env: only our tables (never a host's tables in the same database)."""
    if type_ == "table":
        return name in TABLE_NAMES
    table = parent_names.get("table_name")
    return table is None or table in TABLE_NAMES


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """For this package's env: only objects of our tables."""
    table = getattr(getattr(obj, "table", None), "name", None)
    if type_ == "table":
        return name in TABLE_NAMES
    return table is None or table in TABLE_NAMES


def host_include_name(name: str | None, type_: str, parent_names: Mapping[str, Any]) -> bool:
    """For a host's env: everything except our tables, so autogenerate leaves them alone."""
    if type_ == "table":
        return name not in TABLE_NAMES
    table = parent_names.get("table_name")
    return table is None or table not in TABLE_NAMES


def host_include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """For a host's env: everything except objects of our tables."""
    if type_ == "table":
        return name not in TABLE_NAMES
    table = getattr(getattr(obj, "table", None), "name", None)
    return table is None or table not in TABLE_NAMES


# -- upgrading and checking ------------------------------------------------------------


def upgrade_connection(connection: Connection, revision: str = "head") -> None:
    """Upgrade through a synchronous connection the caller holds (a host's ``env.py``)."""
    with _host_alembic_preserved():
        command.upgrade(alembic_config(connection=connection), revision)


@contextmanager
def _host_alembic_preserved() -> Iterator[None]:
    """Keep a host's ``alembic.context`` and ``alembic.op`` working around our command.

    Alembic publishes the running environment through module-level proxies that each
    command installs on entry and *removes* on exit. Run inside a host's ``env.py``, our
    command would leave the host's ``context`` pointing at nothing (its next
    ``context.configure`` fails, and so does the host command's own exit), so whatever
    proxies were installed before are put back afterwards.
    """
    saved = [getattr(module, "_proxy", None) for module in (alembic.context, alembic.op)]
    try:
        yield
    finally:
        for proxy in saved:
            if proxy is not None:
                proxy._install_proxy()


def _current(connection: Connection) -> str | None:
    ctx = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return ctx.get_current_revision()


async def _with_connection(url_or_engine: str | AsyncEngine, fn: Any, *args: Any) -> Any:
    engine = url_or_engine
    if isinstance(url_or_engine, str):
        engine = create_engine(url_or_engine, poolclass=pool.NullPool)
    if not isinstance(engine, AsyncEngine):
        raise TypeError(
            f"expected a database URL or an AsyncEngine, got {type(url_or_engine).__name__}"
        )
    try:
        async with engine.connect() as conn:
            result = await conn.run_sync(fn, *args)
            await conn.commit()
            return result
    finally:
        if isinstance(url_or_engine, str):
            await engine.dispose()


async def upgrade(url_or_engine: str | AsyncEngine, revision: str = "head") -> None:
    """Migrate the database to ``revision`` (default: this package's head)."""
    await _with_connection(url_or_engine, upgrade_connection, revision)


async def current_revision(url_or_engine: str | AsyncEngine) -> str | None:
    """The database's revision of this package's history, ``None`` if never migrated."""
    return await _with_connection(url_or_engine, _current)


def _tables_with_rows(connection: Connection) -> list[str]:
    present = set(inspect(connection).get_table_names())
    return [
        table.name
        for table in metadata.sorted_tables
        if table.name in present
        and connection.execute(select(literal(1)).select_from(table).limit(1)).first() is not None
    ]


async def tables_with_rows(url_or_engine: str | AsyncEngine) -> list[str]:
    """Which of this package's tables exist and hold at least one row, in any tenant.

    Read-only (a table that does not exist is simply not listed). ``demo`` asks this before
    writing anything, so it never mixes its made-up runs into a real journal.
    """
    return await _with_connection(url_or_engine, _tables_with_rows)  # type: ignore[no-any-return]


async def check_revision(connection: AsyncConnection) -> None:
    """Refuse a database not at :data:`HEAD_REVISION`, touching nothing.

    Read-only: a missing version table reads as "never migrated" and is not created.
    """
    current = await connection.run_sync(_current)
    if current != HEAD_REVISION:
        raise SchemaOutOfDateError(current, HEAD_REVISION)


@cache
def script_heads() -> tuple[str, ...]:
    """The heads of the shipped script directory (for tests and diagnostics)."""
    from alembic.script import ScriptDirectory

    return tuple(ScriptDirectory.from_config(alembic_config()).get_heads())
