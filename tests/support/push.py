"""The push store battery's values (secrets, keys, configs) and raw-row helpers, shared by the push
tests (test_push*, and the battery's PgBouncer run)."""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import text

from agentplane_journal import RunId
from agentplane_journal.push.store import SqlPushStore
from agentplane_journal.push.values import (
    PushAuthentication,
    PushConfig,
)

from support import logcheck

URL = "https://receiver.example/hook"


TOKEN = "opaque-a2a-token-7f3e"


CREDENTIALS = "the-receivers-token-91ac"


#: Every secret the battery stores: none may reach a log.
SECRETS = [TOKEN, CREDENTIALS, "new-token", "attackers-own", "hunter2", "swapped-in"]


#: Every key the battery uses (see :func:`key`): no form of one may reach a log.
KEYS: list[bytes] = [bytes(range(32))]


def config(
    task: RunId,
    id: str = "cfg",
    *,
    url: str = URL,
    token: str | None = None,
    auth: tuple[str, str] | None = None,
) -> PushConfig:
    authentication = None if auth is None else PushAuthentication(*auth)
    return PushConfig(id, task, url, token=token, authentication=authentication)


def full(task: RunId, id: str = "cfg", **kw: Any) -> PushConfig:
    return config(task, id, token=TOKEN, auth=("Bearer", CREDENTIALS), **kw)


async def sql(store: SqlPushStore, statement: str, **params: Any) -> list[Any]:
    """Plain SQL on the store's engine, committed (an operator, or agentplane itself).

    Its own log records are not the store's and are not checked (it reads secrets back).
    """
    with logcheck.current().paused():
        async with store.engine.begin() as conn:
            result = await conn.execute(text(statement), params)
            return list(result.all()) if result.returns_rows else []


async def raw_row(store: SqlPushStore, task: RunId, id: str = "cfg") -> Any:
    rows = await sql(
        store,
        "SELECT url, token, auth_scheme, auth_credentials, next_seq, attempts, "
        "next_attempt_at, last_error FROM push_delivery "
        "WHERE tenant = :tenant AND task_id = :task AND config_id = :id",
        tenant=store.tenant,
        task=str(task),
        id=id,
    )
    return rows[0] if rows else None


async def state(store: SqlPushStore, task: RunId, id: str = "cfg") -> tuple[int, int, int, Any]:
    """(next_seq, attempts, next_attempt_at, last_error) of one registration."""
    row = await raw_row(store, task, id)
    assert row is not None, f"registration {id} is missing"
    return (row.next_seq, row.attempts, row.next_attempt_at, row.last_error)


def key() -> bytes:
    k = os.urandom(32)
    KEYS.append(k)
    return k


async def insert_plaintext_row(store: SqlPushStore, task: RunId, id: str = "cfg") -> None:
    """A row as agentplane itself writes it, secrets in the clear."""
    await sql(
        store,
        "INSERT INTO push_delivery (tenant, task_id, config_id, url, token, auth_scheme, "
        "auth_credentials, next_seq) VALUES (:t, :task, :id, :url, :tok, 'Bearer', :cred, 4)",
        t=store.tenant,
        task=str(task),
        id=id,
        url=URL,
        tok=TOKEN,
        cred=CREDENTIALS,
    )
