"""Conversations and LangGraph threads busy with another turn, or moved."""

from __future__ import annotations

from agentplane_journal.core.error_groups import (
    ConflictError,
)
from agentplane_journal.core.ids import RunId
from agentplane_journal.errors.advice import _run


class ConversationBusyError(ConflictError):
    """Another writer kept a conversation claimed for longer than this change would wait.

    The framework adapters (:mod:`agentplane_journal.adapters`) change a conversation under a
    claim taken for that one change, so writers take turns instead of interleaving or forking
    its history. Nothing of this change was written. ``owner`` and ``epoch`` name the claim
    that was in the way; ``remaining_secs`` is how long it has left if its writer died.
    """

    def __init__(self, key: str, run: RunId, owner: str, epoch: int, remaining_secs: int) -> None:
        self.key = key
        self.run = _run(run)
        self.owner = owner
        self.epoch = epoch
        self.remaining_secs = remaining_secs
        super().__init__(
            f"conversation {key!r} (run {self.run}) is being changed by {owner!r} (claim "
            f"epoch {epoch}); nothing of this change was written. Retry it: a live writer "
            f"finishes in moments, a dead one's claim lapses in {remaining_secs}s"
        )


class ThreadBusyError(ConflictError):
    """A LangGraph thread is being written by another saver: refused, nothing written.

    The thread's run is leased by another writer (another process, or another
    :class:`~agentplane_journal.langgraph.JournalSaver`), or its lease was taken over while
    this saver was writing. LangGraph's own savers would have let both write and forked the
    thread's history (langchain-ai/langgraph#8796); the journal keeps one writer.
    """

    def __init__(
        self, thread_id: str, owner: str, epoch: int, remaining_secs: int, *, waited: float = 0
    ) -> None:
        self.thread_id = thread_id
        self.owner = owner
        self.epoch = epoch
        self.remaining_secs = remaining_secs
        #: How long this write waited for the thread (the saver's ``wait``).
        self.waited = waited
        after = f" after waiting {waited:g}s" if waited else ""
        super().__init__(
            f"LangGraph thread {thread_id!r} is being written by another saver ({owner!r}, "
            f"lease epoch {epoch}, {remaining_secs}s left): refused{after}, nothing written, "
            "so its history stays one line. Retry when that saver releases the thread "
            "(saver.arelease(thread_id) at the end of each request, or closing it) or its "
            "lease lapses; JournalSaver(..., wait=SECONDS) waits for it"
        )


class ThreadMovedError(ConflictError):
    """A LangGraph thread was written by someone else since this saver last read it.

    The saver read the thread at ``seen`` records, and it now has ``found``: writing on
    would fork its history from a stale state. Nothing was written; read the thread again
    (invoke the graph again) and the next write goes on from the new state.
    """

    def __init__(self, thread_id: str, seen: int, found: int) -> None:
        self.thread_id = thread_id
        self.seen = seen
        self.found = found
        super().__init__(
            f"LangGraph thread {thread_id!r} was written by another saver since this one read "
            f"it (it read {seen} records, the thread now has {found}): refused, nothing "
            "written, since writing on would fork its history. Invoke the graph again: it "
            "reads the thread's current state first"
        )
