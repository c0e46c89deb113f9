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

from collections.abc import Mapping
from typing import Any

from agentplane_journal.db.models import TABLE_NAMES

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
    fn = env.context_opts.get("fn")
    command = getattr(fn, "__name__", None)
    if command not in (_UPGRADE, _DOWNGRADE):
        return  # current, check, history, revision --autogenerate, stamp: hands off
    destination = env.context_opts.get("destination_rev")
    if migration.as_sql:
        if command == _UPGRADE and env.context_opts.get("starting_rev") is None:
            upgrade_sql(migration.dialect.name, schema=schema, output=migration.output_buffer)
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
        downgrade_connection(connection, "base", schema=schema, join_transaction=join_transaction)


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
