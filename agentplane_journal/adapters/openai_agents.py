"""An OpenAI Agents SDK ``Session`` whose items are journal records.

``JournalSession(store, session_id)`` implements the SDK's session protocol (``get_items``,
``add_items``, ``pop_item``, ``clear_session``) over one conversation run
(:mod:`agentplane_journal.adapters.conversation`). Nothing is erased: ``add_items`` appends a
``SessionItemsAdded`` record, ``pop_item`` a ``SessionItemPopped`` record naming the item it
removed (its record's seq and its index there), ``clear_session`` a ``SessionCleared``
record; ``get_items`` replays them over the verified records. So the history an agent saw at
any point, and who removed what, stays provable, and a conversation can be sealed into the
tenant's Merkle log (:meth:`JournalSession.seal`) when it ends.

The SDK's types are imported only for type checkers: this module does not import ``agents``
at run time (it only checks that it is installed, and says which extra to install if not),
and the core install stays free of it (the ``openai-agents`` extra installs the SDK).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from agentplane_journal.adapters.conversation import ConversationRun, setup_store
from agentplane_journal.adapters.erasure import erase_conversation
from agentplane_journal.contracts import JournalStore
from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.sealed import still_sealed
from agentplane_journal.core.signing import Verifier
from agentplane_journal.errors import CorruptRecordError, PayloadsErasedError


def _sdk_installed() -> bool:
    try:
        return importlib.util.find_spec("agents") is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken stub
        return False


if not _sdk_installed():
    # Asked without importing it (a second of start-up): a session nobody can hand to
    # Runner.run is a mistake to report now, naming the extra, not at the first run.
    raise ImportError(
        "agentplane_journal.adapters.openai_agents needs the OpenAI Agents SDK: "
        'pip install "agentplane_journal[openai-agents]"'
    )

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings

    from agentplane_journal.keyring.journal import Erasure

__all__ = ["ITEMS_ADDED", "ITEM_POPPED", "SESSION_CLEARED", "JournalSession"]

ITEMS_ADDED = "SessionItemsAdded"
ITEM_POPPED = "SessionItemPopped"
SESSION_CLEARED = "SessionCleared"
NAMESPACE = "openai-agents"

#: A live item: the seq of the record that added it, its index there, and the item.
_Live = tuple[int, int, Any]


def replay(records: Sequence[Record]) -> list[_Live]:
    """The items a session's records leave, oldest first (see :func:`fold`)."""
    live: list[_Live] = []
    fold(live, records)
    return live


def fold(live: list[_Live], records: Sequence[Record]) -> None:
    """Apply a session's records, in order, to the items ``live`` holds.

    A pop must name the newest live item: the writer computed it from exactly these records
    (its append landed only if the session still ended there), so a pop naming anything else
    was not written by this adapter, and the history is reported as corrupt rather than
    guessed at.
    """
    unreadable: tuple[int, list[str]] | None = None  # items not opened: erased, or no key
    for record in records:
        body = record.body
        left = still_sealed(record.kind, body)
        if left or (unreadable is not None and record.kind == ITEM_POPPED):
            unreadable = unreadable or (record.seq, left)
            continue
        if record.kind == ITEMS_ADDED:
            items = body.get("items")
            if not isinstance(items, list):
                raise CorruptRecordError(record.seq, "a SessionItemsAdded record has no item list")
            live.extend((record.seq, index, item) for index, item in enumerate(items))
        elif record.kind == ITEM_POPPED:
            named = (body.get("item_seq"), body.get("item_index"))
            if not live or live[-1][:2] != named:
                raise CorruptRecordError(
                    record.seq, f"the pop names item {named}, which was not the newest one"
                )
            live.pop()
        elif record.kind == SESSION_CLEARED:
            live.clear()
            unreadable = None
    if unreadable is not None:
        key = records[0].body.get("idempotency_key") if records else None
        raise PayloadsErasedError(f"OpenAI Agents session {key!r}", *unreadable)


def _copy(value: Any) -> Any:
    """A copy of a JSON value (dicts and lists copied, the rest immutable), cheaper than
    ``copy.deepcopy`` for the same result on JSON."""
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


class JournalSession:
    """A session of the OpenAI Agents SDK kept in the journal: ``Runner.run(..., session=s)``.

    ``store`` is a journal store (a tenant's handle); ``session_id`` names the conversation in
    that tenant, across processes. Writers take turns (each change is one guarded append; see
    :class:`~agentplane_journal.adapters.conversation.ConversationRun` for ``ttl``, ``wait``,
    ``verifier`` and ``require_signature``). Every read is verified: an edited, reordered or
    removed record is a ``CorruptRecordError`` naming its seq, never a history the agent is
    given (what a handle that read the session before sees: the module of ``ConversationRun``).
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        store: JournalStore,
        session_id: str,
        *,
        ttl: int = 30,
        wait: float = 10.0,
        verifier: Verifier | None = None,
        require_signature: bool = False,
    ) -> None:
        self.session_id = session_id
        self.conversation: ConversationRun[list[_Live]] = ConversationRun(
            store,
            NAMESPACE,
            session_id,
            list,
            fold,
            ttl=ttl,
            wait=wait,
            verifier=verifier,
            require_signature=require_signature,
            owner_prefix="openai-agents-session",
        )

    async def setup(self) -> None:
        """Migrate the store's database to this package's schema (safe from every worker at
        once; see :func:`~agentplane_journal.adapters.conversation.setup_store`)."""
        await setup_store(self.conversation.store)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, only the newest ``limit``."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be None or at least 0, not {limit}")
        live = await self.conversation.state()
        if limit is not None:
            live = live[len(live) - limit :] if limit else []
        # Copies: the caller may change what it is given, never what this handle verified.
        return cast("list[TResponseInputItem]", [_copy(item) for _seq, _index, item in live])

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items as one record (all of them or none)."""
        # Copies: the caller goes on holding its items and may change them after this call;
        # what the handle folds from its own record must be what was stored.
        batch = [_copy(dict(item)) for item in items]
        if not batch:
            return

        async def compute(run: RunId, _live: list[_Live]) -> tuple[list[Append], None]:
            return [self.conversation.append(run, ITEMS_ADDED, {"items": batch})], None

        await self.conversation.change(compute, self._admission(), guarded=False)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; ``None`` for an empty session (nothing written).

        The removal is a record naming the item, and it lands only if the session still ends
        where the item was found newest, so two concurrent pops remove two different items.
        """

        async def compute(run: RunId, live: list[_Live]) -> tuple[list[Append], Any]:
            if not live:
                return [], None
            seq, index, item = live[-1]
            return [
                self.conversation.append(run, ITEM_POPPED, {"item_seq": seq, "item_index": index})
            ], _copy(item)

        if not await self.conversation.exists():
            return None
        return cast("TResponseInputItem | None", await self.conversation.change(compute, {}))

    async def clear_session(self) -> None:
        """Record that the session was cleared: it reads empty from now on; nothing is erased."""

        async def compute(run: RunId, _live: list[_Live]) -> tuple[list[Append], None]:
            return [self.conversation.append(run, SESSION_CLEARED, {})], None

        if not await self.conversation.exists():
            return
        await self.conversation.change(compute, {}, guarded=False)

    async def seal(self, outcome: str = "closed") -> Digest | None:
        """Seal the conversation into the tenant's Merkle log; ``None`` if it was never written
        (see :meth:`ConversationRun.seal`)."""
        return await self.conversation.seal(outcome)

    async def erase(self, *, by: str, reason: str = "") -> Erasure | None:
        """Clear the session, then erase its scope for good (the store must be a
        ``SealingStore``; see :mod:`agentplane_journal.adapters.erasure`): it reads empty,
        its items are unrecoverable, and it takes no more items. ``None``: never written."""

        def tombstone(run: RunId, _state: Any) -> list[Append]:
            return [self.conversation.append(run, SESSION_CLEARED, {})]

        return await erase_conversation(self.conversation, tombstone, by=by, reason=reason)

    def _admission(self) -> dict[str, Any]:
        return {"adapter": NAMESPACE, "conversation": self.session_id}
