"""One conversation as one run: what the framework adapters share.

A conversation (an OpenAI Agents SDK session, a Pydantic AI conversation) is a run of the
journal. It is found by an *admission key*, ``"<namespace>:<conversation id>"``, which the
run's first record (``RunAdmitted``) claims in the same append that writes it: one
conversation id names one run in a tenant, whichever process asks first, and a second
process creating the same conversation at the same moment finds the first one's run
(``DuplicateAdmissionError`` names it) instead of starting a fork of its own.

**Every change is one transaction** (the store's guarded append,
:mod:`agentplane_journal.journal.guarded`): it takes the run mutex, so writers of one
conversation take turns rather than interleave, and a change computed from the
conversation's state lands only if the run still ends at the record that state was read up
to; otherwise nothing is written, the new records are read and verified, and the change is
computed again (a Pydantic AI save from a revision another writer moved on from then fails
its revision check: ``ConversationConflict``). A change that does not depend on the state
(adding items) lands wherever the run ends. A live claim of the run (an older version of
these adapters, or :meth:`ConversationRun.seal`) is waited for, with backoff, up to ``wait``
seconds, then :class:`~agentplane_journal.errors.ConversationBusyError`; a lapsed one is
fenced for good by the change that finds it.

**Reads are verified, and a handle remembers what it verified.** Its first read re-hashes
every record and checks the run as a chain (seqs from 1, links, exactly-once, signatures
when a verifier is given) and that the run begins with this conversation's admission. Each
later read fetches, in one statement, the seal and the records from the last one it
verified on: that record must still be there, unchanged, and the rest must chain onto it. For
a sealed run the records must end exactly at the sealed head, whose leaf in the tenant's
Merkle tree is checked. What that catches, and what only a new handle, a seal or a signature
can, is in the adapters' documentation page.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from agentplane_journal.contracts import JournalStore
from agentplane_journal.core.admission import IDEMPOTENCY_KEY, RUN_ADMITTED, check_admission_key
from agentplane_journal.core.append import Append
from agentplane_journal.core.chain import RunCheck
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
from agentplane_journal.journal.guarded import HeadMovedError, Tail

__all__ = ["ConversationRun", "Change", "setup_store"]

S = TypeVar("S")


class _Guarded(Protocol):
    """A store's guarded appends (:mod:`agentplane_journal.journal.guarded`)."""

    async def guarded_read(self, run: RunId, from_seq: int = 1) -> Tail: ...

    async def guarded_read_admitted(self, key: str) -> tuple[RunId | None, Tail]: ...

    async def guarded_append(
        self, run: RunId, batch: Sequence[Append], *, expected: tuple[int, Digest] | None
    ) -> list[Record]: ...


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


#: What a change computes from the conversation's verified state: the appends to write (none:
#: the change writes nothing) and the value the caller gets back.
Change = Callable[[RunId, S], Awaitable[tuple[Sequence[Append], Any]]]


@dataclass
class _Verified(Generic[S]):
    """What a handle verified of its run: the chain check up to its last record, and the
    state the adapter folded from the records (they are not kept)."""

    check: RunCheck
    state: S


@dataclass
class ConversationRun(Generic[S]):
    """The run behind one conversation, and the guarded change that is the only way to write it.

    ``store`` is a journal store (a tenant's handle: ``store.for_tenant(name)``) with guarded
    appends (``SqlJournalStore``); ``namespace`` keeps one framework's conversation ids apart
    from another's and from the runtime's own admission keys. ``empty`` makes the state of a
    conversation with no record, and ``fold(state, records)`` applies verified records to it
    in place (raising :class:`CorruptRecordError` for one the adapter did not write). ``ttl``
    is the lifetime of :meth:`seal`'s claim in whole seconds, ``wait`` how long a change waits
    for a claimed conversation. ``verifier``/``require_signature`` are passed to the chain
    check of every read: with a store that signs, requiring signatures is what makes a forged
    record at the end of an unsealed conversation detectable.
    """

    store: JournalStore
    namespace: str
    conversation_id: str
    empty: Callable[[], S]
    fold: Callable[[S, Sequence[Record]], None]
    ttl: int = 30
    wait: float = 10.0
    verifier: Verifier | None = None
    require_signature: bool = False
    owner_prefix: str = "conversation"
    _run: RunId | None = field(default=None, init=False, repr=False)
    _seen: _Verified[S] | None = field(default=None, init=False, repr=False)
    #: One read or change of this handle at a time: each one starts from what the previous
    #: one left verified (two at once would each take the other's records for a rewrite).
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.conversation_id, str) or not self.conversation_id:
            raise ValueError("a conversation id must be a non-empty string")
        if self.require_signature and self.verifier is None:
            raise ValueError("require_signature needs a verifier that trusts the signers' keys")
        check_admission_key(self.key, "the conversation's admission key")
        if not callable(getattr(self.store, "guarded_append", None)):
            raise TypeError(
                "the conversation adapters need a store with guarded appends "
                f"(SqlJournalStore), not {type(self.store).__name__}"
            )

    @property
    def _guarded(self) -> _Guarded:
        return cast(_Guarded, self.store)  # checked in __post_init__

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

    async def exists(self) -> bool:
        """Whether the conversation has a run (read, and verified, if not known yet)."""
        async with self._lock:
            if self._run is None:
                await self._read()
            return self._run is not None

    async def state(self) -> S:
        """The conversation's state, read and verified now; ``empty()`` while it has no run.

        One statement (see the module): the first read finds the run by its admission key
        and reads all of it; a later one, the seal and the records from the last one this
        handle verified. A sealed run's records must end at its sealed head (a truncated or
        extended sealed conversation fails here, ``CorruptRecordError``).
        """
        async with self._lock:
            return await self._read()

    def verified(self) -> S | None:
        """The state this handle last verified (read, or wrote itself), without reading:
        ``None`` when it has none. Possibly stale (another writer may have moved on), so only
        for computing a change, which lands only if the run still ends where this state was
        verified (:meth:`change`): a stale one is refused, read again and computed again."""
        seen = self._seen
        return None if seen is None else seen.state

    async def _read(self) -> S:
        if self._run is None:
            run, tail = await self._guarded.guarded_read_admitted(self.key)
            if run is None:
                return self.empty()
            self._run = run
            self._seen = None
            return self._verify(run, tail).state
        return (await self._refresh(self._run)).state

    async def _refresh(self, run: RunId) -> _Verified[S]:
        """Read what follows what this handle verified (all of the run on its first read)."""
        seen = self._seen
        last = seen.check.last if seen is not None else 0
        return self._verify(run, await self._guarded.guarded_read(run, max(last, 1)))

    def _verify(self, run: RunId, tail: Tail) -> _Verified[S]:
        """Check ``tail`` onto what this handle verified and fold it in (all or nothing)."""
        seen = self._seen
        self._seen = None  # until this read has verified everything it folds in
        records = tail.records
        if seen is None:
            seen = _Verified(RunCheck(self.verifier, self.require_signature), self.empty())
            self._admitted(run, records[0] if records else None)
        else:
            last = seen.check.last
            first = records[0] if records else None
            if first is None or first.seq != last or first.hash != seen.check.head:
                raise CorruptRecordError(
                    last,
                    f"record {last} of run {run}, verified by this process, is gone or changed: "
                    f"see {command('verify --all', database_of(self.store))}",
                )
            records = records[1:]
        seen.check.feed(records)
        seen.check.finish(tail.sealed)
        self.fold(seen.state, records)
        self._seen = seen
        return seen

    def _admitted(self, run: RunId, first: Record | None) -> None:
        # The run was found through run_admission, a side table anyone with write access can
        # point elsewhere: the run is this conversation's only if its hashed first record
        # claims this key.
        if first is None or first.kind != RUN_ADMITTED or first.idempotency_key != self.key:
            raise CorruptRecordError(
                first.seq if first is not None else 0,
                f"run {run} does not begin with the admission of {self.key!r}: the admission "
                "index points this conversation at another run (see "
                f"{command('verify --all', database_of(self.store))} and "
                f"{command('reindex-admissions', database_of(self.store))})",
            )

    async def change(
        self,
        compute: Change[S],
        admission: dict[str, Any],
        *,
        guarded: bool = True,
        applied: Callable[[S], None] | None = None,
    ) -> Any:
        """Compute a change from the verified state and append what it returns, in one
        transaction that lands only if the run still ends where the state was read.

        ``guarded=False``: a change whose appends do not depend on the state (it lands
        wherever the run ends). ``admission`` is the payload of the ``RunAdmitted`` record
        that starts the run when the conversation is new (the admission key is added to it).
        Returns what ``compute`` returned with its appends. Nothing is written when
        ``compute`` raises or returns no appends; a conversation claimed by someone else is
        waited for up to ``wait`` seconds (``ConversationBusyError``).

        ``applied(state)``: what the appends do to the state, when the caller knows it without
        folding the records back in (they hold what it just encoded: decoding it again would
        only cost time); the records still join the handle's chain check.
        """
        async with self._lock:
            return await self._change(compute, admission, guarded, applied)

    async def _change(
        self,
        compute: Change[S],
        admission: dict[str, Any],
        guarded: bool,
        applied: Callable[[S], None] | None,
    ) -> Any:
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + self.wait, 0.005
        fresh = False  # whether the state was read in this call
        while True:
            if self._run is None:
                await self._read()  # the cold read: the run, verified, in one statement
                fresh = True
            run = self._run
            if run is None:
                created = await self._create(compute, admission)
                if created is not None:
                    return created[0]
                continue  # another writer created it: its run is ours now
            seen = self._seen
            if seen is None:
                seen, fresh = await self._refresh(run), True
            try:
                appends, value = await compute(run, seen.state)
            except Exception:
                if fresh:
                    raise
                fresh = True  # refused on a state read earlier: read it and compute again
                await self._refresh(run)
                continue
            if not appends:
                if fresh:
                    return value
                fresh = True  # nothing to do, or a stale state: read it and compute again
                await self._refresh(run)
                continue
            expected = (seen.check.last, seen.check.head) if guarded else None
            try:
                written = await self._guarded.guarded_append(run, list(appends), expected=expected)
            except HeadMovedError:
                # Another writer's change landed first (or what this handle verified is gone:
                # the read names the record). Read on from it and compute again.
                fresh = True
                await self._refresh(run)
                if loop.time() > deadline:
                    raise ConversationBusyError(self.key, run, "other writers", 0, 0) from None
                continue
            except LeaseHeldError as held:
                if loop.time() + pause > deadline:
                    raise ConversationBusyError(
                        self.key, run, held.owner, held.epoch, held.remaining_secs
                    ) from held
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.25)
                continue
            self._absorb(seen, written, applied)
            return value

    def _absorb(
        self,
        seen: _Verified[S],
        written: list[Record],
        applied: Callable[[S], None] | None = None,
    ) -> None:
        """Fold this handle's own records into what it verified, when they follow on from it
        (an unguarded change may land after another writer's: the next read takes both)."""
        if self._seen is not seen or not written:
            return
        if written[0].seq != seen.check.last + 1 or written[0].prev_hash != seen.check.head:
            return
        self._seen = None
        seen.check.feed(written)
        if applied is None:
            self.fold(seen.state, written)
        else:
            applied(seen.state)
        self._seen = seen

    async def _create(self, compute: Change[S], admission: dict[str, Any]) -> tuple[Any] | None:
        """Start the conversation's run with the first change; ``None`` if another writer did.

        The admission key is claimed by the same append that writes the change, so either
        this run becomes the conversation (and nothing else can) or the append is refused
        with the holder named, nothing of it written, and the change goes to that run.
        """
        run = RunId.generate()
        state = self.empty()
        appends, value = await compute(run, state)
        head = self.append(run, RUN_ADMITTED, {**admission, IDEMPOTENCY_KEY: self.key})
        try:
            written = await self._guarded.guarded_append(
                run, [head, *appends], expected=(0, Digest.ZERO)
            )
        except DuplicateAdmissionError as taken:
            self._run = taken.run
            return None
        self._run = run
        check = RunCheck(self.verifier, self.require_signature)
        self._seen = _Verified(check, state)
        self._absorb(self._seen, written)
        return (value,)

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
