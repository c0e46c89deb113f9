"""Faults the database injects on purpose: a trigger refuses one kind of record, or (on
PostgreSQL) sleeps while a watcher cancels the query or kills the connection, as an operator
or a failover would. Shared by the durable steps' hiccup and commit tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text

from agentplane_journal import SqlJournalStore


@asynccontextmanager
async def refused(store: SqlJournalStore, kind: str, mode: str = "raise") -> AsyncIterator[None]:
    """While inside, the database refuses to journal a ``kind`` record of ``store``'s tenant.

    ``raise``: a trigger raises (a refused statement, both dialects). PostgreSQL only:
    ``cancel``/``terminate``: the trigger sleeps and a watcher cancels the query or kills the
    connection from another session, as an operator or a failover would.
    """
    name = f"fault_{uuid.uuid4().hex[:8]}"
    tenant = store.tenant.replace("'", "''")
    postgres = store.engine.dialect.name == "postgresql"
    body = "PERFORM pg_sleep(30);" if mode != "raise" else "RAISE EXCEPTION 'injected fault';"
    async with store.engine.begin() as conn:
        if postgres:
            await conn.execute(
                text(
                    f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                    f"$$ BEGIN {body} RETURN NEW; END $$"
                )
            )
            await conn.execute(
                text(
                    f"CREATE TRIGGER {name} BEFORE INSERT ON journal FOR EACH ROW WHEN "
                    f"(NEW.kind = '{kind}' AND NEW.tenant = '{tenant}') "
                    f"EXECUTE FUNCTION {name}()"
                )
            )
        else:
            assert mode == "raise"
            await conn.execute(
                text(
                    f"CREATE TRIGGER {name} BEFORE INSERT ON journal WHEN "
                    f"NEW.kind = '{kind}' AND NEW.tenant = '{tenant}' "
                    "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
                )
            )
    watcher = None
    if mode != "raise":
        verb = "pg_cancel_backend" if mode == "cancel" else "pg_terminate_backend"

        async def watch() -> None:
            while True:
                async with store.engine.connect() as conn:
                    hit = await conn.execute(
                        text(
                            f"SELECT {verb}(pid) FROM pg_stat_activity "
                            "WHERE wait_event = 'PgSleep' AND pid <> pg_backend_pid()"
                        )
                    )
                    if hit.first() is not None:
                        return
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
    try:
        yield
    finally:
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        async with store.engine.begin() as conn:
            await conn.execute(text(f"DROP TRIGGER {name}" + (" ON journal" if postgres else "")))
            if postgres:
                await conn.execute(text(f"DROP FUNCTION {name}()"))
