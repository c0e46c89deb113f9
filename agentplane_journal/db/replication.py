"""The asynchronous window, made visible: what a failover could lose at this moment.

With asynchronous streaming replication a commit is acknowledged once the *primary* has it;
a standby receives it a moment later. Promote that standby in between and the commits of the
gap are gone, and their sequence numbers may be handed out again. That is replication's
documented contract, but an operator cannot see the gap from the application. Two tools:

* :func:`replication` reads, on the primary, where its WAL ends now and how far each
  standby has flushed (received durably) and replayed it: the bytes of acknowledged writes
  a failover to that standby would lose *now* (``agentplane-journal replication``).
* :func:`wait_received` waits until some standby has flushed the WAL up to a position (the
  primary's WAL end read just after a checkpoint, so every seal the checkpoint covers), so a
  checkpoint is handed out only once a failover can no longer lose it
  (``agentplane-journal checkpoint --require-standby``). The positions are PostgreSQL's
  ``pg_lsn`` strings; on SQLite there is no replication and nothing to wait for.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from agentplane_journal.db.dialect import Dialect

__all__ = ["ReplicationState", "Standby", "replication", "wait_received"]

#: How often :func:`wait_received` asks the primary again.
POLL_SECONDS = 0.1


@dataclass(frozen=True)
class Standby:
    """One streaming standby as the primary sees it, against the primary's WAL end."""

    name: str
    state: str
    #: ``async``, ``sync``, ``quorum`` or ``potential`` (PostgreSQL's ``sync_state``).
    sync_state: str
    #: Bytes of WAL up to the primary's end that it has not flushed: what a failover to it
    #: would lose now (0: nothing acknowledged so far). ``None``: the primary does not say.
    unflushed: int | None
    #: Bytes it has not replayed yet: how far behind its readers are.
    unreplayed: int | None
    #: PostgreSQL's ``replay_lag`` in seconds (``None`` when idle or unknown).
    replay_lag: float | None


@dataclass(frozen=True)
class ReplicationState:
    """The primary's WAL end (``None`` without replication: SQLite) and its standbys."""

    position: str | None
    standbys: tuple[Standby, ...]

    @property
    def safe(self) -> bool:
        """Whether some standby has flushed everything acknowledged so far (a failover to
        it loses nothing now)."""
        return any(s.unflushed == 0 for s in self.standbys)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _state(position: str, rows: list[dict[str, Any]]) -> ReplicationState:
    return ReplicationState(
        position,
        tuple(
            Standby(
                name=str(r["name"] or ""),
                state=str(r["state"] or ""),
                sync_state=str(r["sync_state"] or ""),
                unflushed=_int(r["unflushed"]),
                unreplayed=_int(r["unreplayed"]),
                replay_lag=None if r["replay_lag"] is None else float(r["replay_lag"]),
            )
            for r in rows
        ),
    )


async def replication(dialect: Dialect, conn: AsyncConnection) -> ReplicationState:
    """The replication state seen from the primary ``conn`` is connected to."""
    position = await dialect.wal_position(conn)
    if position is None:
        return ReplicationState(None, ())
    return _state(position, await dialect.standbys(conn, position))


async def wait_received(
    dialect: Dialect, conn: AsyncConnection, position: str, within: float
) -> ReplicationState:
    """Wait up to ``within`` seconds until a standby has flushed the WAL up to
    ``position``; the last state read (its :attr:`~ReplicationState.safe` against
    ``position`` says whether one did)."""
    deadline = time.monotonic() + within
    while True:
        at = _state(position, await dialect.standbys(conn, position))
        if at.safe or time.monotonic() >= deadline:
            return at
        await asyncio.sleep(POLL_SECONDS)
