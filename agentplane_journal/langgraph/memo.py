"""The verified threads a process keeps: what lets a saver resume a thread without replaying it.

A thread's records are append-only and each read checks what it reads against what was
verified before (the last verified record is read again and must be unchanged; the records
after it must chain onto it, and a seal must match). So once one saver of a process has
verified a thread up to seq ``n``, any saver of that process can go on from there: read the
records from ``n`` on (one statement), check those, and replay only them. The memo holds
that verified point and the thread's state replayed up to it (a :class:`ThreadView`).

**Bounded.** At most :attr:`VerifiedThreads.capacity` threads, least recently used out
first; an evicted thread is read whole again the next time (its cost, not its safety).

**Keyed by what was checked.** The database (backend, host, port, name), the schema, the
tenant, the thread's run, and the trust the records were checked under (the verifier
object and whether a signature was required): a saver that requires signatures never takes
a view checked without them.

**Owned while used.** A saver takes a view out (:meth:`VerifiedThreads.take`) and gives it
back once it has checked and applied the new records (:meth:`VerifiedThreads.give`); two
savers reading one thread at once find it taken, and the second reads the thread whole.

What a memo cannot see (the trust model in docs/guides/langgraph.md): an edit made at rest
to the records *before* the verified point after they were verified. They are never read
again, so no read from the memo resumes from the edit (it goes on from the true state it
verified), but none reports it either: a saver without the memo (``share_verified=False``,
the default), another process, ``averify_thread`` and ``agentplane-journal verify`` do.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from agentplane_journal.langgraph.records import ThreadView

__all__ = ["THREADS", "VerifiedThreads"]


class VerifiedThreads:
    """A bounded LRU of verified thread views, shared by the savers of a process."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._views: OrderedDict[Hashable, ThreadView] = OrderedDict()

    def take(self, key: Hashable) -> ThreadView | None:
        """The view kept for ``key``, now the caller's (``None``: none, or in use)."""
        return self._views.pop(key, None)

    def give(self, key: Hashable, view: ThreadView) -> None:
        """Keep ``view`` (verified up to its head) for ``key``, evicting the least recently
        used beyond :attr:`capacity`."""
        if self.capacity <= 0:
            return
        self._views[key] = view
        self._views.move_to_end(key)
        while len(self._views) > self.capacity:
            self._views.popitem(last=False)

    def forget(self, key: Hashable) -> None:
        """Drop ``key``'s view (a read found the thread damaged: nothing to go on from)."""
        self._views.pop(key, None)

    def __len__(self) -> int:
        return len(self._views)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._views


#: The process's memo (``JournalSaver(share_verified=True)`` uses it).
THREADS = VerifiedThreads()
