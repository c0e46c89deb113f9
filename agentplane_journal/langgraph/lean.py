"""Resuming a thread from its newest checkpoint and the records it names, not the thread.

A checkpoint record written by a saver that knew the thread's state names, in ``uses``, the
record holding each channel blob it does not carry itself (seq and hash), which also says it
was its namespace's newest when written (:class:`Names` is what the writer knows to say so).
A reader with no verified point (``JournalSaver(lean_resume=True)``, a new process) then reads:
the run's head (one statement), the last :data:`TAIL` records with the seal (one statement),
and the named records (one statement, none when the checkpoint carries every blob). So a
resume costs the same at 10 checkpoints as at 1,000.

What it checks (the trust model in docs/guides/langgraph.md): every record read is re-hashed
from its row; the tail is one chain from the checkpoint to the head (links, signatures with a
verifier, the seal when sealed); each named record has the named seq and hash and holds the
named blob. What it cannot see: records it does not read (an edit, deletion or insertion
before the checkpoint, among records it does not use), and, without a seal or a signature,
a tail rewritten whole or cut short. A thread whose newest record is no named checkpoint (an
old journal, a deletion, a copy, a writer that did not know the state) is replayed as before,
and so is a thread of a saver made with ``keyring=`` (its payloads are opened by the reads
that replay).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentplane_journal.core.chain import RunCheck, verify_attested
from agentplane_journal.core.ids import RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Verifier
from agentplane_journal.errors import CorruptRecordError
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.keyring.store import SealingStore
from agentplane_journal.langgraph.records import (
    CHECKPOINT,
    COPIED,
    DELETED,
    WRITES,
    Place,
    ThreadView,
    Use,
    named_uses,
    version_key,
)

__all__ = ["TAIL", "Names", "check_pending", "lean_view", "named_pending"]

#: Records read back from the head to find the newest checkpoint: a put and a few tasks'
#: pending writes. A thread whose last checkpoint is further back is replayed.
TAIL = 8


@dataclass(slots=True)
class Names:
    """What a writer knows of a thread to name a checkpoint's blobs: the thread up to seq
    ``upto``, each namespace's newest checkpoint id (every namespace when ``complete``), and
    where each channel's newest blob is."""

    upto: int
    complete: bool
    newest: dict[str, str] = field(default_factory=dict)
    blob_at: dict[tuple[str, str], Place] = field(default_factory=dict)
    #: Pending writes already written for checkpoints newer than their namespace's newest
    #: (LangGraph writes a task's writes while it puts their checkpoint, and one may land
    #: first): ``(ns, checkpoint id, seq, hash hex)``, seq 0 when the writer saw them in a
    #: view and does not know where (then the checkpoint names nothing). A reader that
    #: reads from the checkpoint on would not see them: the checkpoint names them
    #: (``pending``). Almost always empty.
    early: frozenset[tuple[str, str, int, str]] = frozenset()

    @classmethod
    def of(cls, view: ThreadView) -> Names:
        """What ``view`` (verified) tells: all of it, or one namespace's for a partial one."""
        names = cls(view.head[0], view.partial_ns is None, blob_at=dict(view.blob_at))
        for ns in {n for n, _ in view.checkpoints}:
            latest = view.latest(ns)
            if latest is not None:
                names.newest[ns] = latest.id
        early = [(ns, cid, 0, "") for ns, cid in view.writes if cid > names.newest.get(ns, "")]
        if early:  # (an empty set is 216 bytes, per thread remembered)
            names.early = frozenset(early)
        return names

    def uses(
        self, ns: str, checkpoint_id: str, versions: dict[str, object], new: set[str]
    ) -> list[Use] | None:
        """The ``uses`` of a checkpoint of ``ns`` with channel ``versions`` carrying the
        ``new`` channels' blobs itself; ``None`` when this writer cannot name them all or
        cannot vouch that the checkpoint is its namespace's newest."""
        newest = self.newest.get(ns)
        if newest is None and not self.complete:
            return None  # a namespace this writer has not seen: it cannot vouch
        if newest is not None and checkpoint_id <= newest:
            return None  # an older id, or the newest put again: its history is behind it
        if any(e[0] == ns and e[1] == checkpoint_id and e[2] == 0 for e in self.early):
            return None  # pending writes it saw but cannot name
        out: list[Use] = []
        for channel, version in versions.items():
            if channel in new:
                continue
            found = self.blob_at.get((ns, channel))
            if found is None or found[0] != version_key(version):
                return None
            out.append((channel, found[0], found[1], found[2]))
        return out

    def pending(self, ns: str, checkpoint_id: str) -> list[tuple[int, str]]:
        """The records holding pending writes of that checkpoint written before it, by
        seq and hash (what its ``pending`` names), in seq order."""
        return sorted((e[2], e[3]) for e in self.early if e[0] == ns and e[1] == checkpoint_id)

    def apply(self, records: list[Record]) -> bool:
        """Go on past this writer's own ``records``; ``False`` when they do not follow what
        it knew (someone else wrote between) or hold a deletion: then it knows nothing."""
        seq = self.upto
        for record in records:
            body, kind = record.body, record.kind
            seq += 1
            if body["seq"] != seq or kind == DELETED or kind == COPIED:
                return False  # not the next record, or one after which it knows nothing
            if kind == CHECKPOINT:
                ns, cid = body.get("ns"), body.get("id")
                if not isinstance(ns, str) or not isinstance(cid, str):
                    return False
                if cid >= self.newest.get(ns, cid):
                    self.newest[ns] = cid
                    if self.early:
                        self.early = frozenset(k for k in self.early if k[0] != ns or k[1] > cid)
                blobs = body.get("blobs")
                if blobs:
                    digest = record.hash.hex()
                    for blob in blobs:
                        if isinstance(blob, list) and len(blob) == 4:
                            channel, version = blob[0], blob[1]
                            if isinstance(channel, str) and isinstance(version, str):
                                self.blob_at[(ns, channel)] = (version, seq, digest)
            elif kind == WRITES:
                ns, cid = body.get("ns"), body.get("checkpoint")
                if not isinstance(ns, str) or not isinstance(cid, str):
                    return False
                if cid > self.newest.get(ns, ""):
                    self.early = self.early | {(ns, cid, seq, record.hash.hex())}
        if seq == self.upto:
            return False  # nothing written: nothing to go on past
        self.upto = seq
        return True


async def lean_view(
    store: SqlJournalStore,
    thread_id: str,
    run: RunId,
    ns: str,
    verifier: Verifier | None,
    require: bool,
) -> tuple[ThreadView, list[Record], int] | None:
    """The thread as ``ns``'s newest checkpoint and the records it names say, checked as
    the module says: ``(view, the tail read, its last seq)``, or ``None`` when the thread
    must be replayed instead (its newest records hold no named checkpoint of ``ns``)."""
    if isinstance(store, SealingStore):
        return None  # its reads by seq are not opened: a sealed thread is replayed
    head = await store.head(run)
    if head.seq == 0:
        return None
    tail, sealed = await store.read_sealed(run, max(1, head.seq - TAIL + 1))
    if not tail:
        return None
    at = None
    for i in range(len(tail) - 1, -1, -1):
        record = tail[i]
        if record.kind in (DELETED, COPIED):
            return None
        if record.kind == CHECKPOINT and record.body.get("ns") == ns:
            at = i
            break
    if at is None:
        return None
    uses = named_uses(tail[at])
    if uses is None:
        return None
    # The tail, as one chain from its first record to the head (and the seal).
    check = RunCheck(verifier, require)
    check.head, check.last = tail[0].prev_hash, tail[0].seq - 1
    check.feed(tail)
    check.finish(sealed)
    pending = named_pending(tail[at])
    by_seq = {r.seq: r for r in tail}
    wanted = sorted(
        {seq for _, _, seq, _ in uses if seq not in by_seq}
        | {seq for seq, _ in pending if seq not in by_seq}
    )
    await fetch_named(store, run, wanted, by_seq, verifier, require)
    view = ThreadView(thread_id, partial_ns=ns)
    for channel, version, seq, digest in uses:
        named = named_record(by_seq, tail[at].seq, channel, seq, digest)
        view.add_named(named, ns, channel, version)
    # Its pending writes that landed before it, then the checkpoint and what follows.
    view.extend(check_pending(by_seq.get(seq), tail[at], seq, digest) for seq, digest in pending)
    view.extend(tail[at:])
    return view, tail, check.last


async def fetch_named(
    store: SqlJournalStore,
    run: RunId,
    wanted: list[int],
    by_seq: dict[int, Record],
    verifier: Verifier | None,
    require: bool,
) -> None:
    """Add to ``by_seq`` the named records outside the records read (one statement). The
    chain read does not reach them, so each is checked against its own signature when a
    verifier is set; :func:`named_record` then holds each to the hash its checkpoint names."""
    if not wanted:
        return
    for record in await store.records_at(run, wanted):
        if verifier is not None:
            verify_attested([record], verifier, require, start=record.prev_hash, rehash=False)
        by_seq[record.seq] = record


def named_record(
    by_seq: dict[int, Record], checkpoint: int, channel: str, seq: int, digest: str
) -> Record:
    """The record a checkpoint (at seq ``checkpoint``) names for ``channel`` by seq and
    hash; a record gone, or there with another hash, is the damage it is (deleted or
    rewritten), never a stale channel value."""
    named = by_seq.get(seq)
    if named is None or named.hash.hex() != digest:
        raise CorruptRecordError(
            seq,
            f"checkpoint seq {checkpoint} names record {seq} ({digest[:12]}) for channel "
            f"{channel!r}, and that record is gone or different: records were deleted or "
            "rewritten",
        )
    return named


def named_pending(record: Record) -> list[tuple[int, str]]:
    """A checkpoint record's ``pending`` (the records holding its pending writes written
    before it, by seq and hash), checked for shape: each names a record before this one."""
    pending = record.body.get("pending", [])
    if not isinstance(pending, list):
        raise CorruptRecordError(record.seq, "a checkpoint whose 'pending' is not a list")
    out: list[tuple[int, str]] = []
    for item in pending:
        if not (
            isinstance(item, list)
            and len(item) == 2
            and type(item[0]) is int
            and 1 <= item[0] < record.seq
            and isinstance(item[1], str)
        ):
            raise CorruptRecordError(record.seq, "a checkpoint naming a malformed record")
        out.append((item[0], item[1]))
    return out


def check_pending(named: Record | None, checkpoint: Record, seq: int, digest: str) -> Record:
    """The record ``checkpoint`` names in ``pending`` as ``(seq, digest)``: it must be there,
    have that hash, and hold pending writes of that checkpoint, else
    :class:`CorruptRecordError`."""
    body = checkpoint.body
    if named is None or named.hash.hex() != digest:
        raise CorruptRecordError(
            seq,
            f"checkpoint seq {checkpoint.seq} names record {seq} ({digest[:12]}) for its "
            "pending writes, and that record is gone or different: records were deleted or "
            "rewritten",
        )
    held = named.body
    if (
        named.kind != WRITES
        or held.get("thread") != body.get("thread")
        or held.get("ns") != body.get("ns")
        or held.get("checkpoint") != body.get("id")
    ):
        raise CorruptRecordError(seq, "a named record does not hold that checkpoint's writes")
    return named
