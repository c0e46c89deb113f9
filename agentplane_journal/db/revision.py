"""The runtime's view of the schema revision: which one a store needs, and a check of it.

Opening a store must not import Alembic (a tenth of a second or more, and a dependency the
runtime does not use): Alembic creates and versions the schema
(:mod:`agentplane_journal.migrations.commands`), while the store only reads the version
table it wrote, here, with plain SQL. A test pins :data:`HEAD_REVISION` and
:data:`KNOWN_REVISIONS` to the shipped script directory, so they cannot drift from the
migrations.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sqlalchemy import column, inspect, select, table
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from agentplane_journal.db.models import VERSION_TABLE
from agentplane_journal.errors import SchemaOutOfDateError

if TYPE_CHECKING:
    from agentplane_journal.db.dialect import Dialect

__all__ = [
    "HEAD_REVISION",
    "KNOWN_REVISIONS",
    "check_revision",
    "check_schema",
    "current",
    "journals_elsewhere",
    "schema_options",
]

#: The revision this version of the package works against (the script directory's head).
HEAD_REVISION = "0007_pooled_append"
#: Every revision this version of the package ships, oldest first.
KNOWN_REVISIONS = (
    "0001_journal_schema",
    "0002_log_tree",
    "0003_contract_0_22",
    "0004_checks",
    "0005_wire_profile",
    "0006_cosignatures",
    "0007_pooled_append",
)
#: The version table a host keeps when it runs our revisions from its own
#: ``version_locations`` (our revision is then one of its heads).
HOST_VERSION_TABLE = "alembic_version"

# A plain PostgreSQL identifier: no quoting surprises in DDL, logs or the CLI.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_schema(schema: object, dialect: Dialect | None = None) -> str | None:
    """A valid schema name (or ``None`` for the default), refusing one on a ``dialect``
    without schemas (SQLite)."""
    if schema is None:
        return None
    if not isinstance(schema, str):
        raise TypeError(f"schema must be a string or None, not {type(schema).__name__}")
    if not _SCHEMA_NAME.fullmatch(schema) or schema.startswith("pg_"):
        raise ValueError(
            f"schema {schema!r} is not a plain PostgreSQL schema name (lower-case letters, "
            "digits and underscores, at most 63, not starting with a digit or pg_)"
        )
    if dialect is not None and not dialect.schemas:
        raise ValueError(
            f"schema={schema!r}: {dialect.name} has no schemas; the journal's tables go in "
            "the database file itself (give the journal its own file to keep it apart)"
        )
    return schema


def schema_options(schema: str | None) -> dict[str, Any]:
    """The execution options that point the package's tables at ``schema`` (none for default)."""
    return {} if schema is None else {"schema_translate_map": {None: schema}}


def _versions(connection: Connection, name: str, schema: str | None) -> list[str]:
    if not inspect(connection).has_table(name, schema=schema):
        return []
    versions = table(name, column("version_num"), schema=schema)
    stored: list[object] = list(connection.execute(select(versions.c.version_num)).scalars())
    return [str(v) for v in stored]


def current(connection: Connection, schema: str | None = None) -> str | None:
    """Our revision: our own version table, else a host's ``alembic_version`` that holds one
    of our revisions among its heads; ``None`` if never migrated (nothing is created)."""
    ours = _versions(connection, VERSION_TABLE, schema)
    if ours:
        return ours[0] if len(ours) == 1 else ",".join(sorted(ours))
    held = [v for v in _versions(connection, HOST_VERSION_TABLE, schema) if v in KNOWN_REVISIONS]
    return held[0] if len(held) == 1 else None


async def check_revision(connection: AsyncConnection, *, schema: str | None = None) -> None:
    """Refuse a database not at :data:`HEAD_REVISION`, touching nothing.

    A revision this package does not know was written by a newer version of it: the error
    then says to upgrade the package, not the database.
    """
    found = await connection.run_sync(current, schema)
    if found != HEAD_REVISION:
        newer = found is not None and found not in KNOWN_REVISIONS
        elsewhere = await connection.run_sync(journals_elsewhere, schema) if found is None else []
        raise SchemaOutOfDateError(found, HEAD_REVISION, newer=newer, elsewhere=elsewhere)


def journals_elsewhere(connection: Connection, schema: str | None) -> list[str]:
    """The other schemas holding our version table: a forgotten ``--schema``, whose "never
    migrated, run upgrade" would create a second, empty journal. Asked of the inspector, so
    a database without schemas (SQLite: only ``main``) simply has none elsewhere."""
    inspector = inspect(connection)
    here = schema or inspector.default_schema_name
    return sorted(
        name
        for name in inspector.get_schema_names()
        if name != here and inspector.has_table(VERSION_TABLE, schema=name)
    )
