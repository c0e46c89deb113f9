"""What every part of :class:`~agentplane_journal.langgraph.JournalSaver` shares: its
state (declared here, set by ``JournalSaver.__init__``) and the plumbing from a LangGraph
config to a store, a thread and its key. The saver is put together from the parts named for
what they hold: ``thread_reads`` (verified views of a thread), ``thread_writes`` (the lease
and the append), ``edits`` (deletion, copy, prune), ``bridge`` (the sync interface)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Hashable
from typing import TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
)

from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.signing import Verifier
from agentplane_journal.db.dialect import database_key
from agentplane_journal.errors import (
    StoreError,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.langgraph.lean import Names
from agentplane_journal.langgraph.records import (
    ThreadView,
)

__all__ = ["Recent", "SaverBase"]

#: What the saver keeps per thread is keyed by ``(tenant, thread_id)``: two texts, whose
#: hashes Python keeps (a ``RunId`` in the key was hashed anew at each of the dozen
#: look-ups a put makes).
_Key = tuple[str, str]
#: Runs read per statement when ``list`` or ``delete_for_runs`` walks every thread.
_SCAN_PAGE = 200
#: Threads whose blob records a saver remembers to name in their next checkpoint.
_NAMES = 1024
_log = logging.getLogger(__name__)
_K = TypeVar("_K")
_V = TypeVar("_V")


class Recent(OrderedDict[_K, _V]):
    """A dict holding the ``capacity`` keys set most recently (the least recently set goes
    first): what a saver remembers per thread stays bounded however many threads it served."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def __setitem__(self, key: _K, value: _V) -> None:
        _set(self, key, value)
        self.move_to_end(key)
        while len(self) > self.capacity:
            self.popitem(last=False)


_set = OrderedDict.__setitem__


class SaverBase(BaseCheckpointSaver[int]):
    """The saver's state and plumbing (see the module)."""

    store: SqlJournalStore
    lease_ttl: int
    owner: str
    wait: float
    cache_threads: int
    share_verified: bool
    lean_resume: bool
    erase_on_delete: bool
    damaged: list[tuple[RunId, StoreError]]
    loop: asyncio.AbstractEventLoop | None
    _verifier: Verifier | None
    _require: bool
    _tenant: str
    _owns_store: bool
    _stores: dict[str, SqlJournalStore]
    #: The threads a saver remembers what it read or wrote of (``_seen``: the last seq it
    #: read, ``_known``: the head it wrote), least recently used out first, so its memory
    #: is flat however many threads it served (never below ``cache_threads``). A thread
    #: it no longer remembers is written as by a saver that never read it: the "moved
    #: under it" check then needs a read first, which a graph makes at each invocation.
    remember_threads: int = 4096
    _leases: dict[_Key, tuple[int, float]]
    _seen: Recent[_Key, int]
    _known: Recent[_Key, tuple[int, Digest]]
    _locks: dict[_Key, tuple[asyncio.Lock, int]]
    _cache: OrderedDict[_Key, ThreadView]
    _names: Recent[_Key, Names]

    def _store(self, tenant: str | None) -> SqlJournalStore:
        name = self._tenant if tenant is None else tenant
        found = self._stores.get(name)
        if found is None:
            found = self._stores[name] = self.store.for_tenant(name)
        return found

    def _target(self, config: RunnableConfig) -> tuple[SqlJournalStore, str, str]:
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if not isinstance(thread_id, str) or not thread_id:
            raise ValueError("a LangGraph config needs configurable['thread_id'] (a string)")
        ns = configurable.get("checkpoint_ns") or ""
        tenant = configurable.get("tenant")
        store = self._stores.get(self._tenant) if tenant is None else None
        return store or self._store(tenant), str(thread_id), str(ns)

    def _memo_key(self, store: SqlJournalStore, run: RunId) -> Hashable:
        """What a shared verified point is kept under: the database, the schema, the
        tenant, the run, and the trust its records were checked under."""
        engine = store.engine.sync_engine
        return (
            database_key(engine),
            store.schema,
            store.tenant,
            run,
            self._verifier,
            self._require,
        )
