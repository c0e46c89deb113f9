"""Pydantic AI conversations in the journal: a ``ConversationStore`` backend.

``JournalConversationStore(store)`` implements the five storage primitives of Pydantic AI's
``ConversationStore`` (``read_record``, ``read_records``, ``write_record``, ``delete_record``,
``read_entry``), so ``load``, ``save``, ``branch``, ``fork``, ``list_conversations`` and
``delete`` work as Pydantic AI documents them, with its message format
(``ModelMessagesTypeAdapter``) inside each record.

Each conversation is one run (:mod:`agentplane_journal.adapters.conversation`). A save is one
``ConversationSaved`` record holding the conversation's record *and* the entries it adds, so
the two are stored together or not at all, and its revision check is made on the state the
save lands on (a guarded append): a save computed from a revision another writer has moved on
from is ``ConversationConflict``, as Pydantic AI's contract says, and never lands. A delete is a
``ConversationDeleted`` record: the conversation no longer loads or lists, and **every entry is
kept** (forks that point into it keep working, and what was said stays provable); creating the
conversation again continues the same run under a new revision. Entries are read back
verified, through the records that hold them, and cached by id (they never change).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from copy import copy, deepcopy
from typing import Any

try:
    from pydantic import TypeAdapter, ValidationError
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import (
        ConversationConflict,
        ConversationEntry,
        ConversationRecord,
        ConversationStore,
    )
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai.run import AgentRunResult
except ImportError as exc:  # the extra is not installed: say which one
    raise ImportError(
        "agentplane_journal.adapters.pydantic_ai needs Pydantic AI: "
        'pip install "agentplane_journal[pydantic-ai]"'
    ) from exc

from agentplane_journal.adapters.conversation import ConversationRun, setup_store
from agentplane_journal.adapters.erasure import erase_conversation
from agentplane_journal.contracts import JournalStore
from agentplane_journal.core.admission import IDEMPOTENCY_KEY, RUN_ADMITTED
from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.sealed import still_sealed
from agentplane_journal.core.signing import Verifier
from agentplane_journal.errors import CorruptRecordError, PayloadsErasedError
from agentplane_journal.keyring.journal import Erasure

__all__ = ["CONVERSATION_DELETED", "CONVERSATION_SAVED", "JournalConversationStore"]

CONVERSATION_SAVED = "ConversationSaved"
CONVERSATION_DELETED = "ConversationDeleted"
NAMESPACE = "pydantic-ai"

#: Conversations whose verified state a store keeps (least recently used dropped first).
KEPT = 1024

_RECORD = TypeAdapter(ConversationRecord)

#: The conversation a ``save`` in this task is saving, and the revision it saves from.
_SAVING: ContextVar[tuple[str, str | None] | None] = ContextVar("_SAVING", default=None)


def _entries_json(entries: Sequence[ConversationEntry]) -> list[dict[str, Any]]:
    """The entries as a save stores them (their messages serialised in one call)."""
    messages = ModelMessagesTypeAdapter.dump_python([e.message for e in entries], mode="json")
    return [
        {"id": e.id, "parent_id": e.parent_id, "kind": e.kind, "message": message}
        for e, message in zip(entries, messages, strict=True)
    ]


def _entries_of(saved: list[dict[str, Any]]) -> list[ConversationEntry]:
    """Fresh entries from what :func:`_entries_json` made (their messages decoded in one call)."""
    messages = ModelMessagesTypeAdapter.validate_python([data["message"] for data in saved])
    return [
        ConversationEntry(id=data["id"], parent_id=data["parent_id"], message=message)
        for data, message in zip(saved, messages, strict=True)
    ]


def _entry(seq: int, data: object) -> ConversationEntry:
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        raise CorruptRecordError(seq, "a conversation entry is not an object with an id")
    parent = data.get("parent_id")
    if parent is not None and not isinstance(parent, str):
        raise CorruptRecordError(seq, "a conversation entry's parent_id is not a string")
    try:
        message = ModelMessagesTypeAdapter.validate_python([data.get("message")])[0]
    except ValidationError as bad:
        raise CorruptRecordError(
            seq, f"a conversation entry's message is unreadable: {bad}"
        ) from None
    return ConversationEntry(id=data["id"], parent_id=parent, message=message)


class _State:
    """What a conversation's records leave: its current record (``None``: deleted or never
    saved). The entries each save stored go to ``entries`` (the store's cache, by id)."""

    def __init__(self, entries: dict[str, ConversationEntry]) -> None:
        self.record: ConversationRecord | None = None
        self.entries = entries

    def fold(self, records: Sequence[Record]) -> None:
        unreadable: tuple[int, list[str]] | None = None  # a save not opened: erased, no key
        for record in records:
            left = still_sealed(record.kind, record.body)
            if left:
                unreadable = unreadable or (record.seq, left)
                continue
            if record.kind == CONVERSATION_SAVED:
                try:
                    saved = _RECORD.validate_python(record.body.get("record"))
                except ValidationError as bad:
                    raise CorruptRecordError(
                        record.seq, f"a saved conversation record is unreadable: {bad}"
                    ) from None
                entries = record.body.get("entries")
                if not isinstance(entries, list):
                    raise CorruptRecordError(record.seq, "a save has no entry list")
                read = [_entry(record.seq, data) for data in entries]
                self.record = saved
                self.entries.update((entry.id, entry) for entry in read)
            elif record.kind == CONVERSATION_DELETED:
                self.record = None
                unreadable = None
        if unreadable is not None:
            key = records[0].body.get(IDEMPOTENCY_KEY)
            raise PayloadsErasedError(f"Pydantic AI conversation {key!r}", *unreadable)

    @property
    def revision(self) -> str | None:
        return None if self.record is None else self.record.revision


class JournalConversationStore(ConversationStore):
    """Pydantic AI's ``ConversationStore`` over a journal store (one tenant's handle).

    ``ttl``, ``wait``, ``verifier`` and ``require_signature`` are the conversation runs'
    (:class:`~agentplane_journal.adapters.conversation.ConversationRun`). ``list_conversations``
    reads every run of the tenant (the journal has no index of conversations by scope): give
    conversations a tenant of their own, or keep the list call off hot paths.
    """

    def __init__(
        self,
        store: JournalStore,
        *,
        ttl: int = 30,
        wait: float = 10.0,
        verifier: Verifier | None = None,
        require_signature: bool = False,
    ) -> None:
        self.store = store
        self._options: dict[str, Any] = {
            "ttl": ttl,
            "wait": wait,
            "verifier": verifier,
            "require_signature": require_signature,
        }
        self._entries: dict[str, ConversationEntry] = {}
        self._runs: dict[str, ConversationRun[_State]] = {}

    async def setup(self) -> None:
        """Migrate the store's database to this package's schema (safe from every worker at
        once; see :func:`~agentplane_journal.adapters.conversation.setup_store`)."""
        await setup_store(self.store)

    def conversation(self, conversation_id: str) -> ConversationRun[_State]:
        """The run behind ``conversation_id`` (to seal it, or to find its run id).

        One per conversation, kept for the :data:`KEPT` most recently used (each remembers
        what it verified, so a read or a save reads only what is new; a conversation dropped
        from here is read whole again, never trusted unread).
        """
        run = self._runs.pop(conversation_id, None)
        if run is None:
            run = ConversationRun(
                self.store,
                NAMESPACE,
                conversation_id,
                lambda: _State(self._entries),
                _State.fold,
                owner_prefix="pydantic-ai-conversation",
                **self._options,
            )
            while len(self._runs) >= KEPT:
                del self._runs[next(iter(self._runs))]
        self._runs[conversation_id] = run  # the newest at the end
        return run

    async def _state(self, conversation_id: str, seen: set[str] | None = None) -> _State:
        """Read a conversation, and the conversations it was forked from, into the entry cache."""
        state = await self.conversation(conversation_id).state()
        seen = {conversation_id} if seen is None else seen
        source = state.record.forked_from if state.record is not None else None
        if source is not None and source not in seen:
            seen.add(source)
            await self._state(source, seen)
        return state

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        saving = _SAVING.get()
        if saving is not None and saving[0] == conversation_id:
            # Inside save (see there): the state this handle verified last, if the save is
            # from its revision. Its write lands only if that state is still the run's.
            known = self.conversation(conversation_id).verified()
            if known is not None and known.revision == saving[1]:
                # Pydantic AI's save only reads this record (its revision, head, scope,
                # forks; it copies the branches list) and hands it to nobody: a shallow copy
                # keeps the handle's own object out of its hands at a fraction of a deep one.
                return copy(known.record)
        # A copy: the caller may change what it is given (a loaded conversation's usage is
        # this record's), never what the handle verified.
        return deepcopy((await self._state(conversation_id)).record)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        found: list[ConversationRecord] = []
        after: tuple[RunId, int] | None = None
        while True:
            page = await self.store.recent_runs(after, 200)
            if not page:
                break
            for run, _updated in page:
                records = await self.store.read(run, 1)
                first = records[0] if records else None
                if first is None or first.kind != RUN_ADMITTED:
                    continue
                key = first.body.get(IDEMPOTENCY_KEY)
                if not isinstance(key, str) or not key.startswith(f"{NAMESPACE}:"):
                    continue
                try:
                    record = (await self._state(key[len(NAMESPACE) + 1 :])).record
                except PayloadsErasedError:
                    continue  # erased without a tombstone: not listable, and not damage
                if record is not None and (scope is None or record.scope == scope):
                    found.append(deepcopy(record))  # the caller's copy, as read_record's
            after = page[-1]
        found.sort(key=lambda record: record.updated_at, reverse=True)
        return found if limit is None else found[:limit]

    async def save(
        self, conversation: Conversation | AgentRunResult[Any], *, scope: str | None = None
    ) -> list[ConversationEntry]:
        """Pydantic AI's ``save``, reading nothing when this store's state of the conversation
        is at the revision being saved from: a save is then one transaction (one pool
        checkout, one hop to SQLite's thread), as the bare store's is.

        Pydantic AI's ``save`` reads the record (``read_record``), checks the revision and
        writes (``write_record``). Here that read answers the state this handle verified
        last, when its revision is the one the conversation says it was loaded at. The write
        is a guarded append that lands only if the run still ends at the record that state
        was verified up to, so the outcome is the one a fresh read would have given: if
        another writer moved the conversation on, nothing is written, what landed is read
        and verified, and the save fails its revision check there (``ConversationConflict``).
        A conversation at another revision than this handle's (saved through another
        process) is read as before.
        """
        held = (
            conversation.conversation if isinstance(conversation, AgentRunResult) else conversation
        )
        token = _SAVING.set((held.conversation_id, held.revision))
        try:
            return await super().save(conversation, scope=scope)
        finally:
            _SAVING.reset(token)

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        conversation_id = record.conversation_id
        if record.forked_from is not None:
            await self._state(record.forked_from)  # a fork's head is one of its source's
        saved = {"record": _RECORD.dump_python(record, mode="json")}
        saved["entries"] = _entries_json(new_entries)
        new_ids = {entry.id for entry in new_entries}
        # The caller goes on holding the entries' messages (its conversation's own objects):
        # what this store keeps of them is a copy, as Pydantic AI's in-memory store keeps, so
        # a change the caller makes after the save never reaches a later load. Decoded from
        # the JSON just encoded for the record (a quarter of a deepcopy's cost), it is also
        # exactly what a later read of the record decodes.
        kept = _entries_of(saved["entries"])

        async def compute(run: RunId, state: _State) -> tuple[list[Append], None]:
            if state.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            head = record.head_id
            if head is not None and head not in self._entries and head not in new_ids:
                raise ConversationConflict(conversation_id)
            return [conversation.append(run, CONVERSATION_SAVED, saved)], None

        def applied(state: _State) -> None:
            # What folding the ConversationSaved back in would do, without decoding its
            # messages again (the entries are the ones just encoded, kept by id below too).
            state.record = _RECORD.validate_python(saved["record"])  # a copy of its own
            state.entries.update((entry.id, entry) for entry in kept)

        conversation = self.conversation(conversation_id)
        await conversation.change(compute, self._admission(record), applied=applied)
        self._entries.update((entry.id, entry) for entry in kept)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        conversation = self.conversation(conversation_id)
        if not await conversation.exists():
            raise ConversationConflict(conversation_id)

        async def compute(run: RunId, state: _State) -> tuple[list[Append], None]:
            if state.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            deleted = {"revision": expected_revision}
            return [conversation.append(run, CONVERSATION_DELETED, deleted)], None

        await conversation.change(compute, {})

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """An entry of a conversation read through this store (a ``LookupError`` otherwise:
        entries are found through the conversation that holds them, as ``load`` reads)."""
        try:
            # A copy: the caller may change what it is given (a loaded conversation's
            # messages), never what this store verified (Pydantic AI's in-memory store too).
            return deepcopy(self._entries[entry_id])
        except KeyError:
            raise LookupError(f"entry {entry_id!r} is not in a conversation read here") from None

    async def seal(self, conversation_id: str, outcome: str = "closed") -> Digest | None:
        """Seal a conversation into the tenant's Merkle log (no more saves; a deleted tail is
        detected from then on); ``None`` if it was never saved."""
        return await self.conversation(conversation_id).seal(outcome)

    async def erase(self, conversation_id: str, *, by: str, reason: str = "") -> Erasure | None:
        """Delete the conversation, then erase its scope for good (the store must be a
        ``SealingStore``; see :mod:`agentplane_journal.adapters.erasure`): it no longer loads
        or lists, its records and messages are unrecoverable (forks lose the entries they
        shared with it), and it cannot be saved again. ``None``: never saved."""

        def tombstone(run: RunId, state: _State) -> list[Append]:
            revision = state.revision
            if revision is None:
                return []  # deleted already
            return [conversation.append(run, CONVERSATION_DELETED, {"revision": revision})]

        conversation = self.conversation(conversation_id)
        return await erase_conversation(conversation, tombstone, by=by, reason=reason)

    @staticmethod
    def _admission(record: ConversationRecord) -> dict[str, Any]:
        return {"adapter": NAMESPACE, "conversation": record.conversation_id}
