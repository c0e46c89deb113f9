"""One conversation as one run: what the framework adapters share.

A conversation (an OpenAI Agents SDK session, a Pydantic AI conversation) is a run of the
journal. It is found by an *admission key*, ``"<namespace>:<conversation id>"``, which the
run's first record (``RunAdmitted``) claims in the same append that writes it: one
conversation id names one run in a tenant, whichever process asks first, and a second
process creating the same conversation at the same moment finds the first one's run
(``DuplicateAdmissionError`` names it) instead of starting a fork of its own.

Every change is **one append under a claim taken for that change alone**: ``acquire`` (a pure
claim, a new epoch), read the run, append at that epoch, ``release_lease``. So writers of one
conversation take turns rather than interleave, a change computed from a state that another
writer has since changed cannot land (the store fences an append whose epoch is not the
lease's), and a writer that dies mid-change holds the conversation only until its claim's TTL
lapses: the next writer's ``acquire`` takes it over at a higher epoch, which fences the dead
one for good. A claim is held for milliseconds, so a busy conversation is waited for (with
backoff, up to ``wait`` seconds) before :class:`~agentplane_journal.errors.ConversationBusyError`.

Reads are verified: the run's records are re-hashed as they are read
(:meth:`~agentplane_journal.journal.store.SqlJournalStore.read`), then checked together as a
chain (seqs from 1 without a gap, every link, exactly-once, signatures when a verifier is
given, and, for a sealed run, that the records end exactly at the head its seal put in the
Merkle log). What that catches, and what only a seal or a signature can, is in the adapters'
documentation page.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.contracts import JournalStore
from agentplane_journal.core.admission import IDEMPOTENCY_KEY, RUN_ADMITTED, check_admission_key
from agentplane_journal.core.append import Append
from agentplane_journal.core.chain import verify_run
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Verifier
from agentplane_journal.errors import (
    ConversationBusyError,
    CorruptRecordError,
    DuplicateAdmissionError,
    LeaseHeldError,
    StoreError,
    command,
    database_of,
)

__all__ = ["ConversationRun", "Change", "setup_store"]


async def setup_store(store: JournalStore) -> None:
    """The adapters' ``setup()``: migrate a SQL store's database to this package's schema.

    Safe when every worker calls it at start-up (the migration takes a lock; the later ones
    find the schema at head and do nothing). A store with no database schema (an in-memory
    one) needs nothing.
    """
    from agentplane_journal.journal.store import SqlJournalStore
    from agentplane_journal.migrations.commands import upgrade

    if isinstance(store, SqlJournalStore):
        await upgrade(store.engine, schema=store.schema)


#: What a change computes from the run's verified records: the appends to write (none: the
#: change writes nothing) and the value the caller gets back.
Change = Callable[[RunId, list[Record]], Awaitable[tuple[Sequence[Append], Any]]]


@dataclass
class ConversationRun:
    """The run behind one conversation, and the claimed change that is the only way to write it.

    ``store`` is any journal store (a tenant's handle: ``store.for_tenant(name)``);
    ``namespace`` keeps one framework's conversation ids apart from another's and from the
    runtime's own admission keys. ``ttl`` is a claim's lifetime in whole seconds (how long a
    writer that died mid-change blocks the conversation), ``wait`` how long a change waits
    for a busy conversation. ``verifier``/``require_signature`` are passed to the chain check
    of every read: with a store that signs, requiring signatures is what makes a forged record
    at the end of an unsealed conversation detectable.
    """

    store: JournalStore
    namespace: str
    conversation_id: str
    ttl: int = 30
    wait: float = 10.0
    verifier: Verifier | None = None
    require_signature: bool = False
    owner_prefix: str = "conversation"
    _run: RunId | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.conversation_id, str) or not self.conversation_id:
            raise ValueError("a conversation id must be a non-empty string")
        if self.require_signature and self.verifier is None:
            raise ValueError("require_signature needs a verifier that trusts the signers' keys")
        check_admission_key(self.key, "the conversation's admission key")

    def append(self, run: RunId, kind: str, payload: dict[str, Any]) -> Append:
        """An append in the store's wire profile (a store without one writes agentplane 0.4's)."""
        profile = getattr(self.store, "profile", None)
        if profile is None:
            return Append(run, kind, payload)
        made: Append = profile.append(run, kind, payload)
        return made

    @property
    def key(self) -> str:
        """The admission key that names this conversation's run in its tenant."""
        return f"{self.namespace}:{self.conversation_id}"

    async def run_id(self) -> RunId | None:
        """The conversation's run, or ``None`` while nothing was ever written to it.

        Found once and remembered: a key never moves to another run (forgetting admission
        keys retires the index row, not the run; a conversation found before still works).
        """
        if self._run is None:
            self._run = await self.store.admitted_as(self.key)
        return self._run

    async def records(self, run: RunId | None = None) -> list[Record]:
        """The run's records, verified as a whole chain; ``[]`` for a conversation not yet written.

        The seal is read first: once a run is sealed nothing more is appended, so the records
        read next are exactly the sealed ones and must end at the sealed head (a truncated
        or extended sealed conversation fails here, ``CorruptRecordError``).
        """
        if run is None:
            run = await self.run_id()
            if run is None:
                return []
        inclusion = await self.store.inclusion_proof(run)
        sealed: Digest | None = None if inclusion is None else inclusion.seal
        records = await self.store.read(run)
        verify_run(records, sealed, self.verifier, self.require_signature)
        # The run was found through run_admission, a side table anyone with write access can
        # point elsewhere: the run is this conversation's only if its hashed first record
        # claims this key.
        first = records[0] if records else None
        if first is None or first.kind != RUN_ADMITTED or first.idempotency_key != self.key:
            raise CorruptRecordError(
                first.seq if first is not None else 0,
                f"run {run} does not begin with the admission of {self.key!r}: the admission "
                "index points this conversation at another run (see "
                f"{command('verify --all', database_of(self.store))} and "
                f"{command('reindex-admissions', database_of(self.store))})",
            )
        return records

    async def change(self, compute: Change, admission: dict[str, Any]) -> Any:
        """Run ``compute`` on the verified records under a claim and append what it returns.

        ``admission`` is the payload of the ``RunAdmitted`` record that starts the run when
        the conversation is new (the admission key is added to it). Returns what ``compute``
        returned with its appends. Nothing is written when ``compute`` raises or returns no
        appends; the claim is released on every path (a release that cannot reach the database
        leaves the claim to lapse after ``ttl``).
        """
        run = await self.run_id()
        if run is None:
            created = await self._create(compute, admission)
            if created is not None:
                return created[0]
            run = await self.run_id()
            assert run is not None  # _create found the holder or raised
        epoch = await self._claim(run)
        try:
            appends, value = await compute(run, await self.records(run))
            if appends:
                await self.store.append(epoch, list(appends))
            return value
        finally:
            await self._release(run, epoch)

    async def _create(self, compute: Change, admission: dict[str, Any]) -> tuple[Any] | None:
        """Start the conversation's run with the first change; ``None`` if another writer did.

        The admission key is claimed by the same append that writes the change, so either
        this run becomes the conversation (and nothing else can) or the append is refused
        with the holder named, nothing of it written, and the change goes to that run.
        """
        run = RunId.generate()
        lease = await self.store.acquire(run, self._owner(), self.ttl)
        try:
            appends, value = await compute(run, [])
            head = self.append(run, RUN_ADMITTED, {**admission, IDEMPOTENCY_KEY: self.key})
            try:
                await self.store.append(lease.epoch, [head, *appends])
            except DuplicateAdmissionError as taken:
                self._run = taken.run
                return None
            self._run = run
            return (value,)
        finally:
            await self._release(run, lease.epoch)

    async def seal(self, outcome: str) -> Digest | None:
        """Seal the run into the tenant's Merkle log; ``None`` if it was never written.

        A sealed conversation takes no more changes (``RunSealedError``), and from then on a
        deletion of its newest records, which no chain check can see, fails every read.
        """
        run = await self.run_id()
        if run is None:
            return None
        epoch = await self._claim(run)
        try:
            return await self.store.seal(run, epoch, outcome)
        finally:
            await self._release(run, epoch)

    def _owner(self) -> str:
        # Unique per claim: fencing tells writers apart by (owner, epoch), and a retried
        # claim whose answer was lost must not pass for its own predecessor.
        return f"{self.owner_prefix}-{uuid.uuid4().hex}"

    async def _claim(self, run: RunId) -> int:
        """Claim the run for one change, waiting with backoff while another change holds it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        pause = 0.005
        while True:
            try:
                return (await self.store.acquire(run, self._owner(), self.ttl)).epoch
            except LeaseHeldError as held:
                if loop.time() + pause > deadline:
                    raise ConversationBusyError(
                        self.key, run, held.owner, held.epoch, held.remaining_secs
                    ) from held
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.25)

    async def _release(self, run: RunId, epoch: int) -> None:
        try:
            await self.store.release_lease(run, epoch)
        except StoreError:
            pass  # the claim lapses after ttl; the change's own outcome is what the caller hears
