"""Prepared-statement names no other client can hold, and the pooler's errors read as one.

Why: asyncpg names its prepared statements ``__asyncpg_stmt_<n>__`` from a counter global to
the *process*, so two processes that started alike hand out the same names. Behind a
transaction-pooling PgBouncer, client connections share server connections, and a name this
client prepared may already exist there, prepared by another client for another statement:
executing it runs *that* statement with this client's parameters ("bind message supplies N
parameters", or worse, an ``INSERT`` into the wrong table that the server accepts). Seen
from outside in a run without ``?pgbouncer=true``.

What this module installs on every PostgreSQL engine the package opens or configures
(:meth:`PostgresDialect.configure <agentplane_journal.db.dialect.PostgresDialect.configure>`,
:func:`agentplane_journal.db.engine.create_engine`), whatever the URL says: asyncpg
connections of a subclass that prefixes each name with a random 128-bit id of its own
connection (:func:`unique_names`). A statement name then means one statement text of one
client connection, so a missing option can only make a statement *missing* on the server
connection the pooler picked: the server refuses it and nothing runs. That refusal, and its
relatives, are then read as one error naming the option (:func:`pooler_misrouted`).
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["install", "pooler_misrouted", "unique_names"]

_INSTALLED = "_agentplane_journal_unique_statement_names"
_SUBCLASSES: dict[type, type] = {}

# SQLSTATEs of a statement name that the server connection does not hold (26000,
# invalid_sql_statement_name) or already holds (42P05, duplicate_prepared_statement).
_MISROUTED_STATES = ("26000", "42P05")
# 08P01 (protocol_violation) is also a statement of another text under the same name; only
# its "bind message supplies" form is the pooler's, the rest are protocol failures.
_BIND_MISMATCH = "bind message supplies"


def unique_names(connection_class: type) -> type:
    """``connection_class`` (asyncpg's ``Connection`` or a subclass) with statement names
    unique to each connection: ``__apj_<32 hex>_<kind>_<n>__``."""
    found = _SUBCLASSES.get(connection_class)
    if found is None:

        def _get_unique_id(self: Any, prefix: str) -> str:
            # asyncpg's Connection has __slots__; the subclass has a __dict__ for these two.
            state = self.__dict__
            base = state.get("_apj_prefix")
            if base is None:
                base = state["_apj_prefix"] = f"__apj_{uuid.uuid4().hex}"
            state["_apj_n"] = n = state.get("_apj_n", 0) + 1
            return f"{base}_{prefix}_{n:x}__"

        found = type(
            f"UniqueNames{connection_class.__name__}",
            (connection_class,),
            {"_get_unique_id": _get_unique_id, "__module__": __name__},
        )
        _SUBCLASSES[connection_class] = found
    return found


def install(engine: AsyncEngine) -> None:
    """Have every new asyncpg connection of ``engine`` name its statements uniquely
    (idempotent). A caller's own ``connection_class`` is kept, subclassed. Connections the
    engine pooled before this call keep asyncpg's names: configure an engine before use."""
    sync = getattr(engine.sync_engine, "_proxied", engine.sync_engine)
    if getattr(sync, _INSTALLED, False):
        return

    @event.listens_for(sync, "do_connect")
    def _on_connect(dialect: Any, conn_rec: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        import asyncpg

        cparams["connection_class"] = unique_names(
            cparams.get("connection_class") or asyncpg.Connection
        )

    setattr(sync, _INSTALLED, True)


def pooler_misrouted(exc: BaseException) -> bool:
    """Whether ``exc`` (SQLAlchemy's error or asyncpg's) is a prepared statement missing
    from, or clashing on, the server connection: what a transaction pooler does to a client
    without ``?pgbouncer=true``. Always a refusal: the statement did not run."""
    seen: list[BaseException] = []
    todo: list[Any] = [exc]
    while todo:
        e = todo.pop()
        if e is None or not isinstance(e, BaseException) or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [getattr(e, "orig", None), getattr(e, "driver_exception", None), e.__cause__]
    for e in seen:
        state = getattr(e, "sqlstate", None)
        if state in _MISROUTED_STATES:
            return True
        if state == "08P01" and _BIND_MISMATCH in str(e):
            return True
    return False
