"""The database's part of an erasure: the scope lock, and the run an erasure is journaled in.

An erasure is journaled as a run of its own, whose id is derived from the tenant and the
scope (:func:`erasure_run`), so "is this scope erased?" is one indexed read any instance can
make inside its write transaction, with no table beyond the journal's own. The scope lock
(:func:`lock_scope`) is what makes that read decisive: a sealing write holds it shared from
its check to its commit, an erasure exclusive, so an erasure waits for the writes in flight
and every write after it sees it (``keyring/journal.py``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from ulid import ULID

from agentplane_journal.core.ids import RunId
from agentplane_journal.db.dialect import scope_lock

__all__ = ["erasure_run", "lock_scope", "scope_key"]


def scope_key(tenant: str, scope: str) -> int:
    """The 32-bit lock key of ``scope`` in ``tenant`` (collisions only serialise more)."""
    digest = hashlib.sha256(f"{tenant}\0{scope}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def erasure_run(tenant: str, scope: str) -> RunId:
    """The run an erasure of ``scope`` in ``tenant`` is journaled in: one per scope, the
    same on every instance, so the erasure is found without an index of its own."""
    digest = hashlib.sha256(f"agentplane-journal erasure\0{tenant}\0{scope}".encode()).digest()
    return RunId.parse(str(ULID.from_bytes(digest[:16])))


async def lock_scope(store: Any, session: AsyncSession, scope: str, *, exclusive: bool) -> None:
    """Take ``scope``'s lock in ``session``'s transaction (``store``: the SqlJournalStore)."""
    conn = await session.connection()
    await scope_lock(store.dialect, conn, scope_key(store.tenant, scope), exclusive=exclusive)
