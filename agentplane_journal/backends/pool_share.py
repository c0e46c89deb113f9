"""Sharing the engine's pool fairly: when a hot-append writer gives its connection back.

Both append writers (in their shared skeleton,
:class:`~agentplane_journal.backends.writer.GroupWriter`) keep one of the engine's pooled
connections checked out while appends keep arriving, which saves the pool's checkout and
checkin per append. The pool is shared with everything else: the store's other calls (a
run's first append, ``acquire``, ``seal``, reads) and, for a host application, the host's
own sessions. On a pool with nothing left to hand out, a writer that kept its connection
under a steady stream of appends would starve them into the pool's timeout. So after each
statement the writer asks :func:`is_short`; if so it gives the connection back and lets
:func:`hand_over` pass it to whoever waits before queueing for it again (an asyncio queue
hands a freed item to the first caller that *runs*, not to the first that waited).
"""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import QueuePool

__all__ = ["hand_over", "is_short"]

#: Event-loop turns a freed connection is left for a waiter before the writer queues again.
_HAND_OVER_TURNS = 8


def _queue_pool(bind: AsyncEngine) -> QueuePool | None:
    pool = getattr(getattr(bind, "sync_engine", bind), "pool", None)
    return pool if isinstance(pool, QueuePool) else None


def is_short(bind: AsyncEngine) -> bool:
    """Whether a checkout from ``bind``'s pool would wait now: none checked in, and no
    overflow left. Pools that never make a caller wait (``NullPool``...) are never short."""
    pool = _queue_pool(bind)
    if pool is None:
        return False
    limit = pool._max_overflow  # SQLAlchemy's own attribute since 0.x; -1: no limit
    # Cheapest first: the overflow count is an attribute, ``checkedin`` takes the pool's lock.
    return limit >= 0 and pool.overflow() >= limit and pool.checkedin() == 0


async def hand_over(bind: AsyncEngine) -> None:
    """After giving a connection back to a short pool: let a waiting caller take it."""
    pool = _queue_pool(bind)
    for _ in range(_HAND_OVER_TURNS):
        await asyncio.sleep(0)
        if pool is None or pool.checkedin() == 0:
            return  # somebody took it (or there is no pool to watch)
