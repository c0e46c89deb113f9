"""The database as it stands: a commit in doubt, a schema at another revision or not ours,
a statement refused, another wire profile, a pooler that misrouted a statement."""

from __future__ import annotations

from agentplane_journal.core.error_groups import (
    RefusedError,
    StoreError,
    UnavailableError,
)
from agentplane_journal.errors.advice import Database, command


class CommitUnknownError(UnavailableError):
    """The connection was lost during COMMIT: the transaction may or may not have landed."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(
            "the transaction's outcome is unknown: COMMIT may or may not have been applied "
            f"({detail}); read the journal back before retrying"
        )


class SchemaOutOfDateError(RefusedError):
    """The database is not at the schema revision this package version expects.

    ``newer`` is true when the database's revision is one this package does not ship: a
    newer version of the package migrated it, and the fix is upgrading the package.
    """

    def __init__(
        self,
        current: str | None,
        expected: str,
        *,
        newer: bool = False,
        elsewhere: list[str] | None = None,
        database: Database | None = None,
    ) -> None:
        self.current = current
        self.expected = expected
        self.newer = newer
        #: Other PostgreSQL schemas that hold a journal (a forgotten ``schema=``).
        self.elsewhere = list(elsewhere or [])
        #: The database the store was opened on, for the advice (``None``: not known).
        self.database = database
        if self.elsewhere:
            names = ", ".join(self.elsewhere)
            message = (
                f"no journal in this schema, but there is one in schema {names}: pass "
                f"`--schema {self.elsewhere[0]}` (schema={self.elsewhere[0]!r} to the stores and "
                "migrations); running `upgrade` here would create a second, empty journal"
            )
        elif newer:
            message = (
                f"the database is at revision {current}, newer than this version of "
                f"agentplane_journal knows (it needs revision {expected}): a newer version "
                "migrated it; upgrade the package (pip install -U agentplane-journal), "
                "not the database"
            )
        else:
            where = "has never been migrated" if current is None else f"is at revision {current}"
            message = (
                f"the database {where}, but this version of agentplane_journal needs "
                f"revision {expected}; migrate it first: {command('upgrade', database)}, or "
                "`await upgrade(url)` at start-up (a host that runs our migrations in its own "
                "Alembic environment: `alembic upgrade head`)"
            )
        super().__init__(message)

    def naming(self, database: Database) -> SchemaOutOfDateError:
        """This error, its advice naming ``database`` (the store that met it knows it)."""
        if self.database is not None:
            return self
        return SchemaOutOfDateError(
            self.current,
            self.expected,
            newer=self.newer,
            elsewhere=self.elsewhere,
            database=database,
        )


class SchemaConflictError(RefusedError):
    """A table the journal would create already exists and is not the journal's.

    Raised by the upgrade before it creates anything, so a host's own ``journal`` table
    is never half-adopted (and no version row claims a schema that is not there).
    """

    def __init__(
        self, table: str, schema: str, columns: list[str], schemas: bool, *, model: bool = False
    ) -> None:
        self.table = table
        self.schema = schema
        self.columns = list(columns)
        way_out = (  # ``schemas``: whether the database has them (the dialect's ``schemas``)
            "put the journal in a schema of its own (schema=..., --schema NAME) or rename "
            "your table"
            if schemas
            else "give the journal a database file of its own or rename your table"
        )
        if model:  # the host's Alembic metadata, before anything ran
            said = (
                f"your model's table {table!r} in schema {schema!r} is where the journal's "
                f"table of that name lives: your autogenerate could not tell them apart"
            )
        else:
            said = (
                f"table {table!r} already exists in schema {schema!r} and is not the "
                f"journal's (its columns: {', '.join(columns)}); nothing was created"
            )
        super().__init__(f"{said}: {way_out}")


class BackendError(UnavailableError):
    """The database refused or failed a statement for a reason the contract does not name."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"backend: {detail}")


class WireProfileError(RefusedError):
    """A store was opened in a wire profile other than the one its tenant's journal is in.

    ``recorded`` is the journal's profile (``agentplane-0.4`` when none was ever recorded and
    the tenant holds records), ``requested`` the one the store was opened with. Refused before
    anything was written: a journal never mixes the two byte formats by accident. Open it with
    its own profile (or ``profile=None``: the journal's own), or migrate it explicitly with
    ``SqlJournalStore.migrate_profile`` (``agentplane-journal migrate-profile``).
    """

    def __init__(
        self,
        tenant: str,
        recorded: str,
        requested: str,
        detail: str = "",
        database: Database | None = None,
    ) -> None:
        self.tenant = tenant
        self.recorded = recorded
        self.requested = requested
        self.detail = detail
        self.database = database
        super().__init__(
            f"tenant {tenant!r}'s journal is in wire profile {recorded}, but the store was "
            f"opened with profile {requested}{detail}; nothing was written. Open it with "
            f"profile={recorded!r} (or profile=None, the journal's own), or migrate it "
            f"explicitly: `await store.migrate_profile({requested!r})` "
            f"({command(f'migrate-profile {requested}', database)})"
        )

    def naming(self, database: Database) -> WireProfileError:
        """This error, its advice naming ``database`` (the store that met it knows it)."""
        if self.database is not None:
            return self
        return WireProfileError(self.tenant, self.recorded, self.requested, self.detail, database)


class PoolerError(BackendError):
    """A connection pooler ran a statement on a server connection that does not hold it.

    PgBouncer in transaction-pooling mode, reached without ``?pgbouncer=true`` on the URL:
    asyncpg's prepared statements live on one server connection, and the pooler hands the
    next transaction to another. The store names its statements uniquely per client
    connection, so such a statement is only ever *missing* there: the server refused it and
    nothing of the call was written (it is never another client's statement). Add
    ``?pgbouncer=true`` to the URL (a host's own engine:
    ``connect_args=pgbouncer_connect_args()``). ``detail`` is the driver's error.
    """

    def __init__(self, detail: str) -> None:
        self.detail = detail
        StoreError.__init__(
            self,
            "backend: a transaction-pooling connection pooler (PgBouncer, pool_mode = "
            "transaction) ran this client's statement on a server connection that does not "
            "hold it: add ?pgbouncer=true to the database URL (a host's own engine: "
            "connect_args=agentplane_journal.pgbouncer_connect_args()). The server refused "
            f"the statement, so nothing of this call was written ({detail})",
        )
