"""Erasing a conversation: the OpenAI Agents session's and the Pydantic AI store's.

A conversation whose store is a :class:`~agentplane_journal.keyring.store.SealingStore`
(``JournalSession(SealingStore(store, keyring), ...)``) has its items, saved records and
messages sealed under the conversation's scope (its run's: ``{tenant}/{run}``), and its ids,
revisions and tombstones clear (:func:`~agentplane_journal.core.sealed.sealed_fields`).

:func:`erase_conversation` first appends the adapter's tombstone (``SessionCleared``,
``ConversationDeleted``) under the conversation's claim, in the clear, so every reader
replays the conversation as empty; then erases the scope (the key destroyed, the erasure
journaled, a late write refused with :class:`~agentplane_journal.keyring.ScopeErasedError`).
A retry after a crash in between finds the tombstone (or the erasure) and completes. A
conversation whose scope was erased without a tombstone reads as
:class:`~agentplane_journal.errors.PayloadsErasedError`, typed, never tampering.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentplane_journal.adapters.conversation import ConversationRun
from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import RunId
from agentplane_journal.keyring.journal import Erasure
from agentplane_journal.keyring.store import SealingStore

__all__ = ["erase_conversation"]

#: What a conversation's tombstone is, computed from its verified, opened state (none: it
#: reads as empty already).
Tombstone = Callable[[RunId, Any], Sequence[Append]]


async def erase_conversation(
    conversation: ConversationRun[Any], tombstone: Tombstone, *, by: str, reason: str
) -> Erasure | None:
    """Tombstone then erase ``conversation``'s scope; ``None`` when it was never written.

    Refused (``TypeError``, nothing written) unless the conversation's store seals: a
    conversation written in the clear has no key to destroy.
    """
    store = conversation.store
    if not isinstance(store, SealingStore):
        raise TypeError(
            "erasing a conversation needs a store that seals: pass SealingStore(store, "
            "keyring) to the session or conversation store; this one writes in the clear, so "
            "there is no key to destroy (nothing was written)"
        )
    if not by or not isinstance(by, str):
        raise ValueError("by must name who asked for the erasure (a person or a service)")
    run = await conversation.run_id()
    if run is None:
        return None
    scope = store.scope_of(run)
    if await store.erasure(scope) is None:

        async def compute(run: RunId, state: Any) -> tuple[Sequence[Append], None]:
            return tombstone(run, state), None

        await conversation.change(compute, {})
    return await store.erase(scope, by=by, reason=reason)
