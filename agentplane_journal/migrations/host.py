"""The journal inside a host application's own Alembic environment.

A host made its ``env.py`` with ``alembic init -t async``; it adds three things:

* ``run_journal_migrations(context)`` right after each ``context.configure(...)`` (offline
  and online), so ``alembic upgrade head`` migrates the journal's history too, in its own
  version table, and commits it, and ``alembic upgrade head --sql`` prints its DDL;
* ``include_name=host_include_name, include_object=host_include_object`` in the online
  ``context.configure(...)``, so the host's autogenerate neither drops nor alters our tables.

``run_journal_migrations`` acts only for ``upgrade`` and ``downgrade``: ``current``,
``check``, ``history``, ``heads``, ``stamp`` and ``revision --autogenerate`` never touch
the journal. ``downgrade`` takes the journal down only with the host's ``downgrade base``
(the whole database is being torn down); any other host downgrade leaves it as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agentplane_journal.db.dialect import dialect_for
from agentplane_journal.db.models import TABLE_NAMES
from agentplane_journal.db.models import metadata as _our_metadata
from agentplane_journal.errors import SchemaConflictError

if TYPE_CHECKING:
    from alembic.runtime.environment import NameFilterParentNames, NameFilterType
    from sqlalchemy.schema import SchemaItem

__all__ = [
    "host_include_name",
    "host_include_object",
    "include_name",
    "include_object",
    "run_journal_migrations",
]

# The names of the functions alembic.command hands the environment for these commands;
# tests run every command through a real host env.py, so a rename in Alembic shows up.
_UPGRADE = "upgrade"
_DOWNGRADE = "downgrade"


def run_journal_migrations(
    context: Any, *, schema: str | None = None, join_transaction: bool = False
) -> None:
    """The journal's part of the host's ``alembic upgrade``/``downgrade``; nothing otherwise.

    Call it in the host's ``env.py`` right after ``context.configure(...)`` and before
    ``context.begin_transaction()``, in both ``run_migrations_offline`` and
    ``do_run_migrations``. Online it upgrades on the host's connection and commits before
    the host's own migrations begin
    (:func:`~agentplane_journal.migrations.commands.upgrade_connection`).
    Offline (``--sql``) it writes the journal's DDL into the host's script, from an empty
    database; a ranged script (``start:end``) or an offline downgrade gets a comment instead.

    ``schema``: the PostgreSQL schema the journal lives in (give the stores the same).
    ``join_transaction``: the host's connection is already inside a transaction that the
    host will commit (Alembic's "sharing a connection" recipe).
    """
    from agentplane_journal.migrations.commands import (
        downgrade_connection,
        upgrade_connection,
        upgrade_sql,
    )

    try:
        migration = context.get_context()
    except Exception as exc:  # Alembic: "No context has been configured yet"
        raise RuntimeError(
            "run_journal_migrations(context) goes right after context.configure(...) in "
            "the host's env.py"
        ) from exc
    env = migration.environment_context
    # For the autogenerate filters: where our tables are, so that a host table of the same
    # name elsewhere stays the host's; and a host model that *is* in our place is refused
    # now, at every command, rather than silently left out of the host's autogenerate.
    setattr(migration, _SCHEMA_ATTR, schema)
    refuse_host_models_in_our_place(migration.opts.get("target_metadata"), schema, migration)
    fn = env.context_opts.get("fn")
    command = getattr(fn, "__name__", None)
    if command not in (_UPGRADE, _DOWNGRADE):
        return  # current, check, history, revision --autogenerate, stamp: hands off
    destination = env.context_opts.get("destination_rev")
    if migration.as_sql:
        if command == _UPGRADE and env.context_opts.get("starting_rev") is None:
            dialect = dialect_for(migration, any_driver=True).name
            upgrade_sql(dialect, schema=schema, output=migration.output_buffer)
        else:
            migration.impl.static_output(
                "-- agentplane_journal: not part of this script (only a full upgrade "
                "script carries it); see `agentplane-journal upgrade --sql`\n"
            )
        return
    connection = migration.connection
    if command == _UPGRADE:
        upgrade_connection(connection, schema=schema, join_transaction=join_transaction)
    elif destination == "base":
        said = str(env.get_x_argument(as_dictionary=True).get("drop_records", "")).lower()
        downgrade_connection(
            connection,
            "base",
            schema=schema,
            join_transaction=join_transaction,
            drop_records=said in ("1", "yes", "true"),
        )


# -- autogenerate filters ---------------------------------------------------------------

# On the MigrationContext: the schema run_journal_migrations(context, schema=...) was given.
_SCHEMA_ATTR = "_agentplane_journal_schema"


def _journal_schema() -> str | None:
    """The journal's schema in the host's env.py now running (``None``: the default one)."""
    try:
        from alembic import context

        return getattr(context.get_context(), _SCHEMA_ATTR, None)
    except Exception:  # outside an env.py, or before configure(): the default schema
        return None


def _ours(table: str | None, schema: str | None) -> bool:
    """Whether ``schema.table`` is where one of the journal's tables lives."""
    return table in TABLE_NAMES and schema == _journal_schema()


def refuse_host_models_in_our_place(
    target_metadata: Any, schema: str | None, migration: Any = None
) -> None:
    """Raise :class:`SchemaConflictError` if the host's metadata has a table where one of
    ours lives (same name, same schema): its autogenerate could neither create it nor tell
    it from ours. A host table of our name in *another* schema is the host's, and is seen."""
    if target_metadata is None:
        return
    metadatas: Iterable[Any] = (
        target_metadata if isinstance(target_metadata, list | tuple) else [target_metadata]
    )
    schemas = _has_schemas(migration)
    for md in metadatas:
        if md is _our_metadata:
            continue
        for table in md.tables.values():
            if table.name in TABLE_NAMES and table.schema == schema:
                raise SchemaConflictError(
                    table.name,
                    schema or "(default)",
                    [c.name for c in table.columns],
                    schemas,
                    model=True,
                )


def _has_schemas(migration: Any) -> bool:
    """Whether the migration's database has schemas, for the advice of a
    :class:`SchemaConflictError`: without a migration context (an autogenerate filter
    calls without one) or on a backend the package does not know, the advice for a
    database without them, as before the dialect was asked."""
    bound = getattr(migration, "dialect", None)
    try:
        return bound is not None and dialect_for(bound, any_driver=True).schemas
    except ValueError:
        return False


def include_name(
    name: str | None, type_: NameFilterType, parent_names: NameFilterParentNames
) -> bool:
    """For this package's env: only our tables (never a host's tables in the same database)."""
    if type_ == "table":
        return name in TABLE_NAMES
    table = parent_names.get("table_name")
    return table is None or table in TABLE_NAMES


def include_object(
    obj: SchemaItem,
    name: str | None,
    type_: NameFilterType,
    reflected: bool,
    compare_to: SchemaItem | None,
) -> bool:
    """For this package's env: only objects of our tables."""
    table = getattr(getattr(obj, "table", None), "name", None)
    if type_ == "table":
        return name in TABLE_NAMES
    return table is None or table in TABLE_NAMES


def host_include_name(
    name: str | None, type_: NameFilterType, parent_names: NameFilterParentNames
) -> bool:
    """For a host's env: everything except our tables (by name *and* schema: a host table
    of the same name in another schema is the host's), so autogenerate leaves ours alone."""
    schema = parent_names.get("schema_name")
    if type_ == "table":
        return not _ours(name, schema)
    table = parent_names.get("table_name")
    return table is None or not _ours(table, schema)


def host_include_object(
    obj: SchemaItem,
    name: str | None,
    type_: NameFilterType,
    reflected: bool,
    compare_to: SchemaItem | None,
) -> bool:
    """For a host's env: everything except objects of our tables. A host *model* in our
    place is refused (:class:`SchemaConflictError`), never silently skipped."""
    if type_ == "table":
        schema = getattr(obj, "schema", None)
        if not reflected and getattr(obj, "metadata", None) is not _our_metadata:
            if _ours(name, schema):
                refuse_host_models_in_our_place(getattr(obj, "metadata", None), schema)
            return True
        return not _ours(name, schema)
    table = getattr(obj, "table", None)
    if table is None:
        return True
    return not _ours(getattr(table, "name", None), getattr(table, "schema", None))
