"""The append hot path: one round trip on PostgreSQL, one thread hop on SQLite.

Part of the repository (it speaks SQL, through the engine's own pooled connections and their
drivers, below SQLAlchemy's statement handling). :meth:`SqlJournalStore.append` comes here
when it is not in a host's transaction; every other write, and any append this path cannot
settle, goes through the general unit of work (``store.py``), which is the reference for
what an append means. Nothing here weakens a guarantee:

* **PostgreSQL: the whole append is one autocommitted statement.** The lease holder is the
  run's only writer and knows the head it wrote last (:class:`HeadCache`, filled only
  after a commit). One statement takes the run mutex and the lease row's lock, checks the
  fence, the seal and that the head is still the one it knows (the mutex row's version
  proves the statement's snapshot current), and only then inserts the pre-chained records
  (:mod:`agentplane_journal.backends.postgresql.sql` says how). When it cannot tell, nothing is
  written and
  the append runs as a general unit of work. The store's
  :class:`~agentplane_journal.backends.postgresql.writer.Writer` runs the statements on a
  connection it keeps
  while appends keep arriving and, with group commit, lets concurrent appends to other runs
  share one statement. A connection lost during the statement is
  :class:`CommitUnknownError`, since an autocommitted statement may have committed.
* **SQLite: one thread hop per append.** aiosqlite runs each call on its connection's
  thread and wakes the event loop for each result; the general path makes one such hop per
  statement. Here the whole transaction (``BEGIN IMMEDIATE``, fence, seal, activity and
  head in one statement, records, ``COMMIT``) is one function run on that thread, with
  ``synchronous`` as the connection has it (the store sets ``FULL``). ``BEGIN IMMEDIATE``
  holds the database's write lock throughout, so every read in it is current. The head is
  the known one (:class:`HeadCache`) when its row's ``seq`` and ``hash`` columns say so,
  else re-hashed from its row (:mod:`agentplane_journal.backends.sqlite.writer`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from agentplane_journal.backends.postgresql import writer as pgpath
from agentplane_journal.backends.sqlite import writer as sqlitepath
from agentplane_journal.core.append import EFFECT_STARTED, RUN_SEALED, Append
from agentplane_journal.core.batch import seal_batch
from agentplane_journal.core.ids import Digest, EffectKey, RunId
from agentplane_journal.core.record import Record

__all__ = ["HeadCache", "append"]


class HeadCache:
    """The head each run had after this process's last commit to it, at most ``size`` runs.

    Only a hint: the append statement checks it under the run mutex, and a wrong or missing
    entry costs one general unit of work, never a wrong record. Filled only after a commit
    (never after an unknown one), dropped on any failure.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._heads: OrderedDict[tuple[str, str], tuple[int, Digest]] = OrderedDict()

    def get(self, tenant: str, run_id: str) -> tuple[int, Digest] | None:
        key = (tenant, run_id)
        head = self._heads.get(key)
        if head is not None:
            self._heads.move_to_end(key)
        return head

    def put(self, tenant: str, run_id: str, seq: int, hash_: Digest) -> None:
        self._heads[(tenant, run_id)] = (seq, hash_)
        self._heads.move_to_end((tenant, run_id))
        if len(self._heads) > self._size:
            self._heads.popitem(last=False)

    def drop(self, tenant: str, run_id: str) -> None:
        self._heads.pop((tenant, run_id), None)


# -- the append, end to end ---------------------------------------------------------------


async def append(
    store: Any,
    run: RunId,
    epoch: int,
    items: list[Append],
    general: Callable[[], Awaitable[list[Record]]],
) -> list[Record]:
    """Append ``items`` to ``run`` by this module's path, or by ``general()`` when it cannot.

    ``store`` is the :class:`SqlJournalStore` (its engine, tenant, signer and clock);
    ``general`` is the same append as a unit of work, whose answers are the reference.
    """
    keys = [i.effect_key for i in items if i.kind == EFFECT_STARTED and i.effect_key is not None]
    if len(set(keys)) != len(keys) or any(i.kind == RUN_SEALED for i in items):
        return await general()  # rare batches: a duplicate in the batch, or a conclusion
    await store._ready()
    shared = store._shared
    if shared.dialect.name == "sqlite":
        return await sqlitepath.append(store, run, epoch, items, keys, general)
    tenant, run_id = store.tenant, str(run)
    head = shared.heads.get(tenant, run_id)
    if head is None or not shared.pg_writer.usable:
        records = await general()
    else:
        records = await _postgres(store, run, epoch, items, keys, head, general)
    if records:
        shared.heads.put(tenant, run_id, records[-1].seq, records[-1].hash)
    return records


async def _postgres(
    store: Any,
    run: RunId,
    epoch: int,
    items: list[Append],
    keys: list[EffectKey],
    head: tuple[int, Digest],
    general: Callable[[], Awaitable[list[Record]]],
) -> list[Record]:
    """Chain the batch onto the known head here, in the caller's task, and hand it to the
    store's :class:`~agentplane_journal.backends.postgresql.writer.Writer`; ``general()`` if it
    says so."""
    tenant, run_id = store.tenant, str(run)
    records, rows, _ = seal_batch(tenant, run_id, epoch, head[0], head[1], items, store._signer)
    future = asyncio.get_running_loop().create_future()
    request = pgpath.Request(tenant, run, epoch, store._now(), head, records, rows, keys, future)
    answer = await store._shared.pg_writer.append(request)
    if answer is pgpath.GENERAL:
        return await general()
    return answer  # type: ignore[no-any-return]
