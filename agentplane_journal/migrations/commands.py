"""Schema versioning: upgrade a database, read its revision, refuse one that is out of date.

The schema is created by Alembic and only by Alembic. The migrations travel inside the
wheel (``agentplane_journal/_alembic``; ``alembic/`` in a source tree), so an installed
package upgrades a database without the source tree. The package keeps its own version
table, ``agentplane_journal_alembic_version``, beside any host application's.

Where the tables go: by default the connection's default schema (agentplane's own layout).
On PostgreSQL, ``schema="name"`` puts every table, index, sequence and the version table in
that schema instead; the stores take the same ``schema=`` and reach their tables through
SQLAlchemy's ``schema_translate_map``. SQLite has no schemas and refuses one.

Host applications: see :mod:`agentplane_journal.migrations.host` (``run_journal_migrations`` for a
host's ``env.py``, and the autogenerate filters). What the runtime needs of the revision,
without importing Alembic, is :mod:`agentplane_journal.db.revision`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TextIO, TypeVar

import alembic.context
import alembic.op
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, literal, pool, select
from sqlalchemy import table as sa_table
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.schema import CreateSchema

from agentplane_journal.db.dialect import configure_engine, dialect_for, dialect_named
from agentplane_journal.db.engine import create_engine
from agentplane_journal.db.models import LATER_COLUMNS, metadata
from agentplane_journal.db.revision import (
    HEAD_REVISION,
    KNOWN_REVISIONS,
    check_schema,
    current,
)
from agentplane_journal.errors import SchemaConflictError, SchemaOutOfDateError

__all__ = [
    "DROP_RECORDS_OPTION",
    "SCHEMA_OPTION",
    "alembic_config",
    "current_revision",
    "downgrade_connection",
    "prepare",
    "script_location",
    "tables_with_rows",
    "upgrade",
    "upgrade_connection",
    "upgrade_sql",
    "versions_location",
]

#: The ``context.configure`` option our revision scripts read their target schema from
#: (our ``env.py`` sets it; a host running our revisions from its ``version_locations``
#: may set it too).
SCHEMA_OPTION = "agentplane_journal_schema"
#: Context option (and ``-x drop_records=yes``): ``downgrade base`` may drop a journal that
#: holds records.
DROP_RECORDS_OPTION = "agentplane_journal_drop_records"


def script_location() -> Path:
    """Where the migrations are: inside the installed wheel, else the source tree's ``alembic/``."""
    here = Path(__file__).resolve().parent.parent  # the package's own folder
    for candidate in (here / "_alembic", here.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(
        "agentplane_journal's migrations are missing from this installation "
        f"(looked in {here / '_alembic'} and {here.parent / 'alembic'}); reinstall the package"
    )


def versions_location() -> Path:
    """The folder of revision scripts, for a host that lists it in its ``version_locations``."""
    return script_location() / "versions"


def alembic_config(url: str | None = None, **attributes: Any) -> Config:
    """An Alembic ``Config`` for this package's history, without needing an ``alembic.ini``.

    ``attributes`` reach our ``env.py``: ``connection`` (a sync ``Connection``), ``engine``,
    ``schema``, ``dialect_name`` (offline SQL without a URL).
    """
    cfg = Config(output_buffer=attributes.pop("output_buffer", None))
    cfg.set_main_option("script_location", str(script_location()))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes.update(attributes)
    return cfg


# -- where the tables go -----------------------------------------------------------------


def _refuse_collisions(connection: Connection, schema: str | None) -> None:
    """Refuse, before creating anything, when a table we would create is someone else's.

    A table of ours that already exists with exactly our columns is agentplane's (0.22.0's,
    or 0.4.0's without the columns a later revision adds: :data:`LATER_COLUMNS`), which the
    revisions adopt; any other shape is a host's table of the same name, which our
    ``CREATE TABLE IF NOT EXISTS`` would silently skip and then fail on.
    """
    inspector = inspect(connection)
    existing = set(inspector.get_table_names(schema=schema))
    for name, table in sorted(metadata.tables.items()):
        if name not in existing:
            continue
        columns = [c["name"] for c in inspector.get_columns(name, schema=schema)]
        ours = {c.name for c in table.columns}
        if not ours - LATER_COLUMNS.get(name, frozenset()) <= set(columns) <= ours:
            where = schema or inspector.default_schema_name or "main"
            schemas = dialect_for(connection, any_driver=True).schemas
            raise SchemaConflictError(name, where, columns, schemas)


# -- upgrading, downgrading and checking ---------------------------------------------------


def upgrade_connection(
    connection: Connection,
    revision: str = "head",
    *,
    schema: str | None = None,
    join_transaction: bool = False,
) -> None:
    """Upgrade through a synchronous connection the caller holds, and commit.

    The connection must not be inside a transaction: the journal's migration begins and
    commits its own, so it is never left to a caller that does not commit (SQLite cannot
    roll DDL back, and a host ``env.py`` made by ``alembic init`` never commits). A caller
    that holds a transaction it will commit itself (Alembic's "sharing a connection"
    recipe) says so with ``join_transaction=True``; the migration then commits or rolls
    back with it.

    Refuses, before creating anything, a database that is newer than this package
    (:class:`SchemaOutOfDateError`) or whose tables collide with ours
    (:class:`SchemaConflictError`).
    """
    _migrate_connection(connection, revision, schema, join_transaction, up=True)


def downgrade_connection(
    connection: Connection,
    revision: str,
    *,
    schema: str | None = None,
    join_transaction: bool = False,
    drop_records: bool = False,
) -> None:
    """Downgrade the journal's history to ``revision`` (``"base"`` drops every table).

    ``"base"`` on a journal that holds records is refused (``ValueError``, nothing dropped)
    unless ``drop_records``.
    """
    _migrate_connection(
        connection, revision, schema, join_transaction, up=False, drop_records=drop_records
    )


def refuse_dropping_records(migration: Any, *, only_to_base: bool = False) -> None:
    """The first revision's ``downgrade``: refuse to drop a journal that holds records.

    Unless told: :data:`DROP_RECORDS_OPTION` in the context (``downgrade_connection(...,
    drop_records=True)``, a host's ``alembic -x drop_records=yes downgrade base``) or
    ``-x drop_records=yes`` on this command. An offline script cannot look, and says so.
    ``only_to_base``: a later revision's downgrade, checking only on the way to ``base``.
    """
    if migration.opts.get(DROP_RECORDS_OPTION):
        return
    if only_to_base:
        destination = migration.environment_context.context_opts.get("destination_rev")
        if destination != "base":
            return
    try:
        from alembic import context

        said = context.get_x_argument(as_dictionary=True).get("drop_records", "")
    except Exception:
        said = ""
    if str(said).lower() in ("1", "yes", "true"):
        return
    if migration.as_sql:
        migration.impl.static_output(
            "-- agentplane_journal: the next statements drop the journal and its records\n"
        )
        return
    journal = sa_table("journal", schema=migration.opts.get(SCHEMA_OPTION))
    if migration.connection.execute(select(literal(1)).select_from(journal).limit(1)).first():
        raise ValueError(
            "the journal holds records: `downgrade base` would drop them, with every run, "
            "lease and seal; nothing was dropped. To drop them anyway: `alembic -x "
            "drop_records=yes downgrade base` (in your project or ours), or "
            "downgrade_connection(..., drop_records=True)"
        )


def _migrate_connection(
    connection: Connection,
    revision: str,
    schema: str | None,
    join: bool,
    *,
    up: bool,
    drop_records: bool = False,
) -> None:
    if not isinstance(connection, Connection):
        raise TypeError(
            f"expected a synchronous sqlalchemy Connection, not {type(connection).__name__} "
            "(from async code use `await migrate.upgrade(engine)`)"
        )
    if schema is not None:
        # Any driver: a host's env.py may migrate through its own (the store runs on
        # asyncpg or aiosqlite, the DDL on whatever the host connected with).
        schema = check_schema(schema, dialect_for(connection, any_driver=True))
    if connection.in_transaction() and not join:
        raise RuntimeError(
            "upgrade_connection() was given a connection inside a transaction it cannot "
            "commit. In a host env.py call run_journal_migrations(context) right after "
            "context.configure(...) and before context.begin_transaction(); if you hold "
            "the transaction and will commit it yourself, pass join_transaction=True"
        )
    # One transaction under the database's migration lock (Dialect.begin_migration), so
    # that workers migrating one database at start-up take turns: the first migrates, the
    # others then read its revision and find nothing to do.
    lock = dialect_for(connection, any_driver=True).begin_migration(connection, join=join)
    with _host_alembic_preserved(), lock:
        _run_command(connection, revision, schema, up=up, drop_records=drop_records)


def _run_command(
    connection: Connection,
    revision: str,
    schema: str | None,
    *,
    up: bool,
    drop_records: bool = False,
) -> None:
    prepare(connection, schema, upgrading=up)
    cfg = alembic_config(connection=connection, schema=schema, drop_records=drop_records)
    if up:
        command.upgrade(cfg, revision)
    else:
        command.downgrade(cfg, revision)


def prepare(connection: Connection, schema: str | None, *, upgrading: bool) -> None:
    """Before any migration: refuse a newer database; before an upgrade creates anything,
    refuse colliding tables, then create the schema the tables go in."""
    found = current(connection, schema)
    if found is not None and found not in KNOWN_REVISIONS:
        raise SchemaOutOfDateError(found, HEAD_REVISION, newer=True)
    if not upgrading:
        return
    if found is None:
        _refuse_collisions(connection, schema)
    if schema is not None:
        connection.execute(CreateSchema(schema, if_not_exists=True))


def upgrade_sql(
    dialect_name: str,
    revision: str = "head",
    *,
    schema: str | None = None,
    starting_revision: str | None = None,
    output: TextIO | None = None,
) -> None:
    """Write the SQL script of an upgrade (Alembic's offline ``--sql`` mode) to ``output``.

    Nothing connects: a DBA reviews (and runs) the script. Without ``starting_revision``
    it starts from an empty database, version table included.
    """
    schema = check_schema(schema, dialect_named(dialect_name))
    target = revision if starting_revision is None else f"{starting_revision}:{revision}"
    cfg = alembic_config(dialect_name=dialect_name, schema=schema, output_buffer=output)
    with _host_alembic_preserved():
        command.upgrade(cfg, target, sql=True)


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


_P = ParamSpec("_P")
_T = TypeVar("_T")


async def _with_connection(
    url_or_engine: str | AsyncEngine,
    fn: Callable[Concatenate[Connection, _P], _T],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> _T:
    engine = url_or_engine
    if isinstance(url_or_engine, str):
        # Configured as a store's engine: on SQLite a write transaction waits its turn
        # (busy_timeout) behind another process's migration instead of failing.
        engine = configure_engine(create_engine(url_or_engine, poolclass=pool.NullPool))
    if not isinstance(engine, AsyncEngine):
        raise TypeError(
            f"expected a database URL or an AsyncEngine, got {type(url_or_engine).__name__}"
        )
    try:
        async with engine.connect() as conn:
            result = await conn.run_sync(fn, *args, **kwargs)
            await conn.commit()
            return result
    finally:
        if isinstance(url_or_engine, str):
            await engine.dispose()


async def upgrade(
    url_or_engine: str | AsyncEngine, revision: str = "head", *, schema: str | None = None
) -> None:
    """Migrate the database to ``revision`` (default: this package's head).

    ``url_or_engine``: any URL the command line takes (``postgresql://`` and ``sqlite://``
    get the async drivers), or an ``AsyncEngine``.
    """
    await _with_connection(url_or_engine, _upgrade_sync, revision, schema)


def _upgrade_sync(connection: Connection, revision: str, schema: str | None) -> None:
    upgrade_connection(connection, revision, schema=schema)


async def current_revision(
    url_or_engine: str | AsyncEngine, *, schema: str | None = None
) -> str | None:
    """The database's revision of this package's history, ``None`` if never migrated."""
    return await _with_connection(url_or_engine, current, schema)


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
    return await _with_connection(url_or_engine, _tables_with_rows)


@cache
def _script() -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def script_heads() -> tuple[str, ...]:
    """The heads of the shipped script directory (for tests and diagnostics)."""
    return tuple(_script().get_heads())


@cache
def known_revisions() -> frozenset[str]:
    """Every revision the shipped script directory holds (a test pins
    :data:`~agentplane_journal.db.revision.KNOWN_REVISIONS` to it)."""
    return frozenset(rev.revision for rev in _script().walk_revisions())
