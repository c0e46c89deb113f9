"""Opening engines from URLs, including the one option a connection pooler needs.

PgBouncer in transaction-pooling mode hands each *transaction* to whichever server
connection is free, so nothing that lives in a server session survives from one
transaction to the next. For the store that is fine (it keeps no session state: no ``SET``,
no advisory locks, no ``LISTEN``, no temporary tables; ``SET LOCAL`` in a host's
``append_atomic`` work is transaction-scoped and fine too), but asyncpg's named prepared
statements are session state: asyncpg caches them per client connection and names them
``__asyncpg_stmt_<n>__``, so behind the pooler a statement is missing on the next server
connection, or a second client's statement of the same name already exists there.

``?pgbouncer=true`` on a ``postgresql+asyncpg://`` URL (accepted everywhere a URL is: the
stores' ``connect``, :func:`agentplane_journal.migrations.commands.upgrade`, the CLI's ``--url`` and
``AGENTPLANE_JOURNAL_URL``) is removed from the URL before it reaches the driver and turns
on :func:`pgbouncer_connect_args`: no statement cache in asyncpg or in SQLAlchemy's dialect,
and a unique name for every statement SQLAlchemy prepares (the recipe of SQLAlchemy's asyncpg
dialect documentation, "Prepared Statement Name with PGBouncer"). A host application that
builds its own engine passes the same dict as ``connect_args``.

:func:`async_url` is the one place the library, the migrations and the command line turn
``postgresql://``, ``postgres://`` or ``sqlite://`` into the async drivers.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from agentplane_journal.db.dialect import Dialect, dialect_for
from agentplane_journal.errors import Database

__all__ = [
    "PGBOUNCER_OPTION",
    "async_url",
    "create_engine",
    "database_named",
    "shown_url",
    "open_engine",
    "pgbouncer_connect_args",
    "split_url",
]

#: The URL query option that asks for pooler-safe connections.
PGBOUNCER_OPTION = "pgbouncer"

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


_URL_EXAMPLES = "postgresql+asyncpg://user@host/db or sqlite+aiosqlite:///path/to/journal.db"


def async_url(url: str | URL) -> URL:
    """``url`` with the async driver this package runs on (``postgresql://`` -> asyncpg).

    Refuses, with ``ValueError``, what is not a database URL or names another database or
    driver (``postgresql+psycopg://``: the store's guarantees are tested on asyncpg only).
    The message never repeats the URL, which may carry a password.
    """
    if isinstance(url, URL):
        parsed = url
    elif isinstance(url, str):
        try:
            parsed = make_url(url)
        except (ArgumentError, ValueError):
            raise ValueError(f"not a database URL; expected {_URL_EXAMPLES}") from None
    else:
        raise TypeError(f"url must be a string or an sqlalchemy URL, not {type(url).__name__}")
    # A bare backend name (and Heroku-style ``postgres``) gets the async driver, so one URL
    # works for the library, the migrations and the CLI; another driver is refused.
    dialect = _dialect(parsed)
    if dialect is None:
        raise ValueError(
            f"unsupported database {parsed.drivername!r}: agentplane_journal runs on "
            "postgresql+asyncpg:// and sqlite+aiosqlite:// (postgresql:// and sqlite:// "
            "get those drivers)"
        )
    return parsed.set(drivername=dialect.url_scheme)


def _dialect(url: URL) -> Dialect | None:
    try:
        return dialect_for(url)
    except ValueError:
        return None


def _statement_name() -> str:
    # Unique across every client sharing a server connection, so two clients' statements
    # never collide there (asyncpg's own names are a per-client counter).
    return f"__apj_{uuid.uuid4().hex}__"


def pgbouncer_connect_args() -> dict[str, Any]:
    """``connect_args`` for an asyncpg engine behind PgBouncer's transaction pooling.

    Each statement is prepared and run inside one transaction (hence on one server
    connection), under a name no other client uses, and never reused afterwards.
    """
    return {
        "statement_cache_size": 0,  # asyncpg's per-connection cache
        "prepared_statement_cache_size": 0,  # SQLAlchemy's asyncpg dialect's cache
        "prepared_statement_name_func": _statement_name,
    }


def split_url(url: str | URL) -> tuple[URL, dict[str, Any]]:
    """The URL without this package's options, and the engine options they ask for.

    Refuses (``ValueError``) a ``pgbouncer`` value that is not a boolean, or the option on a
    database other than PostgreSQL through asyncpg.
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ValueError(f"not a database URL: {exc}") from None
    if PGBOUNCER_OPTION not in parsed.query:
        return parsed, {}
    raw = parsed.query[PGBOUNCER_OPTION]
    value = (raw[-1] if isinstance(raw, tuple) else raw).strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(f"?{PGBOUNCER_OPTION}= must be true or false, not {value!r}")
    parsed = parsed.difference_update_query([PGBOUNCER_OPTION])
    if value in _FALSE:
        return parsed, {}
    dialect = _dialect(parsed)
    if dialect is None or not dialect.pgbouncer or parsed.drivername != dialect.url_scheme:
        raise ValueError(
            f"?{PGBOUNCER_OPTION}=true is for postgresql+asyncpg:// URLs (PgBouncer pools "
            f"PostgreSQL connections), not {parsed.drivername}://"
        )
    return parsed, {"connect_args": pgbouncer_connect_args()}


# On an engine made here: the URL as the caller gave it (with its options, which the engine's
# own URL no longer carries), for advice that names the database.
_GIVEN_URL = "_agentplane_journal_given_url"


def shown_url(url: str | URL) -> tuple[str, bool]:
    """``url`` as advice may print it, and whether anything was masked: the password (in
    the authority or a ``?password=`` option) replaced by ``***``, and a SQLite file's path
    made absolute, so that a command naming it works from any directory."""
    parsed = make_url(url) if isinstance(url, str) else url
    masked = bool(parsed.password)
    if "password" in parsed.query:
        parsed = parsed.update_query_dict({"password": "***"})
        masked = True
    try:
        path = dialect_for(parsed).database_file(parsed)
    except ValueError:
        path = None
    if path is not None and not os.path.isabs(path):
        parsed = parsed.set(database=os.path.abspath(path))
    return parsed.render_as_string(hide_password=True), masked


def database_named(
    engine: AsyncEngine, schema: str | None = None, tenant: str | None = None
) -> Database:
    """The database ``engine`` reaches, for an error's advice (:class:`Database`)."""
    given = getattr(engine.sync_engine, _GIVEN_URL, None)
    url, masked = shown_url(given if given is not None else engine.url)
    return Database(url, masked, schema, tenant)


def create_engine(url: str | URL, **options: Any) -> AsyncEngine:
    """``create_async_engine`` that understands ``?pgbouncer=true`` (see the module docs).

    Any URL the command line takes: ``postgresql://`` and ``sqlite://`` get the async
    drivers (:func:`async_url`).

    ``options`` win over the URL's, except ``connect_args``, which are merged (the caller's
    keys win).
    """
    parsed, implied = split_url(async_url(url))
    # libpq's query parameters (?sslmode=require, ...) become the driver's connect_args.
    parsed, libpq = dialect_for(parsed).connect_options(parsed)
    connect_args = {
        **implied.pop("connect_args", {}),
        **libpq,
        **options.pop("connect_args", {}),
    }
    if connect_args:
        options["connect_args"] = connect_args
    engine = create_async_engine(parsed, **{**implied, **options})
    setattr(engine.sync_engine, _GIVEN_URL, url)
    # Statement names unique to each connection, whether or not the URL asks for the pooler.
    dialect_for(engine).name_statements(engine)
    return engine


def open_engine(url: str, options: dict[str, Any] | None) -> AsyncEngine:
    """A store's own engine for ``url`` (``connect``): refuses what is not a database URL,
    hides bound parameters, sizes the PostgreSQL pool; ``options`` win."""
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(
            "url must be a database URL such as postgresql+asyncpg://user@host/db or "
            "sqlite+aiosqlite:///path/to/journal.db"
        )
    target = async_url(url)  # the CLI's URLs: postgresql:// and sqlite:// get async drivers
    # Bound parameters stay out of error messages and logs: they can hold push secrets.
    opts: dict[str, Any] = {"hide_parameters": True}
    opts.update(dialect_for(target).engine_options)  # PostgreSQL: a pool sized for appends
    opts.update(options or {})
    try:
        engine = create_engine(target, **opts)
    except Exception as exc:  # a malformed URL the parser let through
        raise ValueError(f"cannot open a {target.drivername}:// database: {exc}") from exc
    setattr(engine.sync_engine, _GIVEN_URL, url)  # as given: with its options
    return engine
