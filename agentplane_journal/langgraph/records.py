"""LangGraph checkpoints as journal records, and a thread's state rebuilt from them.

No I/O: :func:`thread_run` names the run a thread lives in, the ``*_append`` functions turn
LangGraph's values into :class:`~agentplane_journal.core.append.Append` payloads, and
:class:`ThreadView` replays a thread's verified records into what ``get_tuple`` and ``list``
answer. LangGraph's serializer gives ``(type, bytes)``; the bytes go into the record body as
base64 text, so the canonical JSON the record is hashed over carries them exactly (a JSON
string cannot hold arbitrary bytes).

Why one run per ``thread_id`` (every ``checkpoint_ns`` of it in the same run): LangGraph
deletes, prunes and copies a thread across all its namespaces at once, and a graph writes a
subgraph's namespace in the same invocation as its parent's. One run makes each of those a
single atomic append under a single lease, and the thread's history one chain.

Why the run id is derived from the thread id (a hash, not a lookup table): the schema stays
the journal's (no new table), and a reader finds a thread's run without a write. Every record
also carries its ``thread``, checked on read, so a record moved into another thread's run is
corrupt, not silently adopted.

Why every builder takes the tenant's wire profile: the store accepts only records in the
journal's profile (``v`` 4 in ``agentplane-0.4``, ``v`` 1 in ``agentplane-0.22``), and a
kind of our own is accepted by either as long as its ``v`` is the journal's (only
``RunAdmitted`` and ``EffectDone`` have members a profile requires, and these kinds journal
no canon of their own: the record's bytes are chained under the journal's rule). The payloads
hold only text and integers, so the two rules write the same payload bytes; only ``v``
differs.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
from binascii import b2a_base64
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any

from ulid import ULID

from agentplane_journal.core.append import Append
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.profile import AGENTPLANE_0_4, WireProfile
from agentplane_journal.core.record import Record
from agentplane_journal.core.sealed import still_sealed
from agentplane_journal.errors import CorruptRecordError, PayloadsErasedError

__all__ = [
    "CHECKPOINT",
    "COPIED",
    "DELETED",
    "KINDS",
    "WRITES",
    "StoredCheckpoint",
    "Place",
    "ThreadView",
    "Use",
    "named_uses",
    "checkpoint_append",
    "copied_appends",
    "deleted_append",
    "thread_run",
    "typed_member",
    "version_key",
    "writes_append",
]

#: The record kinds this adapter writes.
CHECKPOINT = "LangGraphCheckpoint"
WRITES = "LangGraphWrites"
DELETED = "LangGraphDeleted"
COPIED = "LangGraphCopied"
KINDS = frozenset({CHECKPOINT, WRITES, DELETED, COPIED})

_DOMAIN = b"agentplane-journal/langgraph-thread\x00"

Typed = tuple[str, bytes]
#: A blob a checkpoint uses, named by the record holding it: channel, version, seq, hash hex.
Use = tuple[str, str, int, str]
#: Where a channel's newest blob is: version, seq, hash hex.
Place = tuple[str, int, str]


def thread_run(thread_id: str) -> RunId:
    """The run holding ``thread_id``: 128 bits of SHA-256 over the id, as a ULID
    (memoised for the 4,096 threads last used: every call of the saver derives it)."""
    if not isinstance(thread_id, str) or not thread_id:
        raise ValueError("a LangGraph thread_id must be a non-empty string")
    return _thread_run(thread_id)


@functools.lru_cache(maxsize=4096)
def _thread_run(thread_id: str) -> RunId:
    raw = hashlib.sha256(_DOMAIN + thread_id.encode("utf-8", "surrogatepass")).digest()[:16]
    return RunId(ULID.from_bytes(raw))


def version_key(version: object) -> str:
    """A channel version (int, float or str in LangGraph) as the text blobs are keyed by:
    its JSON text. An ``int`` (this saver's own versions) and a ``str`` (other savers') are
    written without building an encoder (twice a put, and once per channel a read keys)."""
    if type(version) is int:
        return int.__repr__(version)  # json.dumps' own text for an int
    if type(version) is str:
        return _json_str(version)  # what json.dumps calls for a str
    return json.dumps(version, sort_keys=True)


def _b64(data: bytes) -> str:
    return b2a_base64(data, newline=False).decode("ascii")


def _typed(value: Typed) -> list[str]:
    kind, data = value
    if type(kind) is not str:
        raise TypeError(f"the serializer gave a type name {kind!r}, not a str")
    return [kind, _b64(bytes(data))]


def _ascii(*texts: str) -> bool:
    """Whether every one of ``texts`` is a ``str`` of ASCII only (the common case, checked
    at once; else :func:`_checked_texts` looks at each and names the one refused). Typed
    ``str`` as the callers' values are; one that is not at run time is a ``TypeError``
    here, so ``False``."""
    try:
        return "".join(texts).isascii()
    except TypeError:
        return False


def _checked_texts(**texts: object) -> None:
    """Each of the payload's text members (named) a ``str`` with canonical bytes, else the
    error the record's canonical JSON would raise, naming the member.

    The builders below make their payloads afresh from these texts, base64 text, JSON
    version text and ``int`` indexes and seqs, in dicts and lists, and nothing else: such a
    payload has canonical bytes (:func:`~agentplane_journal.core.canon.canonical_bytes`)
    exactly when every text encodes as UTF-8 (no lone surrogate). So the append is built by
    :meth:`Append.of_bare_envelope`, without writing those bytes once more to see that they
    can be (the seal writes them; this check costs a test of each text instead). A member
    that is not text is refused here too: a reader would refuse the record it made."""
    for name, text in texts.items():
        if not isinstance(text, str):
            raise TypeError(f"payload.{name}: a LangGraph {name} must be a str, not {text!r}")
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    f"payload.{name}: string contains a lone surrogate, which is not valid "
                    "Unicode and cannot be written as UTF-8"
                ) from None


def checkpoint_append(
    run: RunId,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    parent_id: str | None,
    checkpoint: Typed,
    metadata: Typed,
    blobs: Sequence[tuple[str, str, Typed]],
    *,
    profile: WireProfile = AGENTPLANE_0_4,
    uses: Sequence[Use] | None = None,
    pending: Sequence[tuple[int, str]] = (),
) -> Append:
    """One ``put``: the checkpoint without its channel values, its metadata, and the blobs
    of the channels whose version this checkpoint moved (LangGraph's ``new_versions``).

    ``uses``, when the writer knows them: every other channel's blob as the record holding
    it, ``[channel, version, seq, hash]``, which also says that this checkpoint is its
    namespace's newest. A reader with no verified point resumes from the checkpoint and
    those records alone (``JournalSaver(lean_resume=True)``), checking each against its name.
    """
    if not _ascii(thread_id, ns, checkpoint_id, *[t for b in blobs for t in b[:2]]):
        _checked_texts(thread=thread_id, ns=ns, id=checkpoint_id)
        for channel, version, _ in blobs:
            _checked_texts(channel=channel, version=version)
    payload: dict[str, Any] = {
        "thread": thread_id,
        "ns": ns,
        "id": checkpoint_id,
        "checkpoint": _typed(checkpoint),
        "metadata": _typed(metadata),
        "blobs": [[channel, version, *_typed(value)] for channel, version, value in blobs],
    }
    if parent_id is not None:
        if not _ascii(parent_id):
            _checked_texts(parent=parent_id)
        payload["parent"] = parent_id
    if uses is not None:
        for channel, version, seq, digest in uses:
            if not _ascii(channel, version, digest):
                _checked_texts(channel=channel, version=version, hash=digest)
            _checked_seq(seq)
        payload["uses"] = [list(use) for use in uses]
        if pending:  # its pending writes that landed before it: [seq, hash]
            for seq, digest in pending:
                if not _ascii(digest):
                    _checked_texts(hash=digest)
                _checked_seq(seq)
            payload["pending"] = [[seq, digest] for seq, digest in pending]
    return Append.of_bare_envelope(_run(run), CHECKPOINT, payload, profile.record_version)


def writes_append(
    run: RunId,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: Sequence[tuple[int, str, Typed]],
    *,
    profile: WireProfile = AGENTPLANE_0_4,
) -> Append:
    """One ``put_writes``: a task's pending writes against one checkpoint."""
    if not _ascii(thread_id, ns, checkpoint_id, task_id, task_path, *[w[1] for w in writes]):
        _checked_texts(
            thread=thread_id, ns=ns, checkpoint=checkpoint_id, task=task_id, path=task_path
        )
        for _, channel, _ in writes:
            _checked_texts(channel=channel)
    for idx, _, _ in writes:
        if type(idx) is not int or not -(2**63) <= idx < 2**63:
            raise TypeError(f"payload.writes: a write's index must be a 64-bit int, not {idx!r}")
    payload = {
        "thread": thread_id,
        "ns": ns,
        "checkpoint": checkpoint_id,
        "task": task_id,
        "path": task_path,
        "writes": [[idx, channel, *_typed(value)] for idx, channel, value in writes],
    }
    return Append.of_bare_envelope(_run(run), WRITES, payload, profile.record_version)


def _checked_seq(seq: object) -> None:
    if type(seq) is not int or not 1 <= seq < 2**63:
        raise TypeError(f"payload: a named record's seq must be a positive int, not {seq!r}")


def _run(run: RunId | str) -> RunId:
    return run if type(run) is RunId else RunId.parse(run)


def deleted_append(
    run: RunId,
    thread_id: str,
    why: str,
    checkpoints: Iterable[tuple[str, str]] | None = None,
    *,
    profile: WireProfile = AGENTPLANE_0_4,
) -> Append:
    """A deletion, as a record: the whole thread (``checkpoints`` None) or the listed
    ``(ns, checkpoint_id)`` pairs and their writes. ``why`` names the LangGraph call."""
    payload: dict[str, Any] = {"thread": thread_id, "why": why}
    if checkpoints is not None:
        payload["checkpoints"] = [[ns, cid] for ns, cid in sorted(checkpoints)]
    return profile.append(run, DELETED, payload)


def copied_appends(
    run: RunId,
    thread_id: str,
    source: str,
    source_head: tuple[int, str],
    records: Sequence[Record],
    *,
    profile: WireProfile = AGENTPLANE_0_4,
) -> list[Append]:
    """``copy_thread``'s batch: a provenance record naming the source thread and the head it
    was copied at, then the source's live records with ``thread`` rewritten (in ``profile``,
    whatever profile they were written in)."""
    out = [
        profile.append(
            run,
            COPIED,
            {
                "thread": thread_id,
                "from": source,
                "from_seq": source_head[0],
                "from_head": source_head[1],
            },
        )
    ]
    for record in records:
        if record.kind in (CHECKPOINT, WRITES, DELETED):
            payload = _payload_of(record)
            payload["thread"] = thread_id
            # Its names are the source run's seqs: in the target they would name other
            # records, so a copied checkpoint names none (a lean read replays the copy).
            payload.pop("uses", None)
            payload.pop("pending", None)
            out.append(profile.append(run, record.kind, payload))
    return out


_ENVELOPE = frozenset({"seq", "run", "case", "step", "phase", "epoch", "v", "effect_key", "kind"})


def _payload_of(record: Record) -> dict[str, Any]:
    return {k: v for k, v in record.body.items() if k not in _ENVELOPE}


def _decode(seq: int, value: object, what: str) -> Typed:
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, str) for v in value):
        raise CorruptRecordError(seq, f"the {what} is not a [type, base64] pair")
    try:
        return value[0], base64.b64decode(value[1], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CorruptRecordError(seq, f"the {what} is not valid base64") from exc


def typed_member(record: Record, name: str) -> Typed:
    """A record's serialized member ``name`` (``checkpoint``, ``metadata``) as LangGraph's
    serializer gave it; a malformed one is :class:`CorruptRecordError`."""
    return _decode(record.seq, record.body.get(name), name)


def _text(seq: int, body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise CorruptRecordError(seq, f"a LangGraph record without a text '{name}'")
    return value


@dataclass(slots=True)
class StoredCheckpoint:
    """A checkpoint as the journal holds it: still serialized, its blobs looked up later."""

    seq: int
    ns: str
    id: str
    parent: str | None
    checkpoint: Typed
    metadata: Typed


@dataclass(slots=True)
class ThreadView:
    """A thread's live state, replayed from its records in chain order.

    A ``put`` of an id already present replaces it (LangGraph's savers upsert); a pending
    write of a ``(task, idx)`` already present is kept as first written when ``idx >= 0``
    and replaced when negative (LangGraph's special channels); a deletion record removes
    what it names from the view, never from the journal.
    """

    thread_id: str
    checkpoints: dict[tuple[str, str], StoredCheckpoint] = field(default_factory=dict)
    blobs: dict[tuple[str, str, str], Typed] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, Typed, str]]] = field(
        default_factory=dict
    )
    #: The records since the last whole-thread deletion (what ``copy_thread`` copies).
    live: list[Record] = field(default_factory=list)
    #: The last record applied: ``(seq, hash hex)``, and the hash itself.
    head: tuple[int, str] = (0, "")
    digest: Digest = Digest.ZERO
    #: The newest checkpoint of each namespace, kept as records are applied (a deletion
    #: empties it; :meth:`latest` then finds it again), so a resume costs no walk over them.
    newest: dict[str, StoredCheckpoint] = field(default_factory=dict)
    #: The first record since the last whole-thread deletion whose payload could not be
    #: opened (its scope erased, or no key), with the fields: left out of the state.
    unreadable: tuple[int, list[str]] | None = None
    #: Where each channel's newest blob is: ``(ns, channel) -> (version, seq, hash hex)``
    #: (what a writer names in its next checkpoint's ``uses``).
    blob_at: dict[tuple[str, str], Place] = field(default_factory=dict)
    #: A view built from one namespace's newest checkpoint and the records it names, not
    #: from the whole thread (:meth:`JournalSaver._lean_view`): good for that namespace's
    #: latest checkpoint only. ``None``: the whole thread was replayed.
    partial_ns: str | None = None

    @classmethod
    def replay(cls, thread_id: str, records: Iterable[Record]) -> ThreadView:
        view = cls(thread_id)
        view.extend(records)
        return view

    def extend(self, records: Iterable[Record]) -> None:
        """Apply records that follow the ones already applied (verified by the caller)."""
        for record in records:
            self._apply(record)

    def _apply(self, record: Record) -> None:
        seq, body = record.seq, record.body
        self.head = (seq, record.hash.hex())
        self.digest = record.hash
        if record.kind not in KINDS:
            raise CorruptRecordError(
                seq, f"record kind {record.kind!r} is not a LangGraph record in a thread's run"
            )
        if body.get("thread") != self.thread_id:
            raise CorruptRecordError(
                seq, f"the record names thread {body.get('thread')!r}, not {self.thread_id!r}"
            )
        left = still_sealed(record.kind, body)
        if left:
            if self.unreadable is None:
                self.unreadable = (seq, left)
            return
        if record.kind == DELETED:
            listed = body.get("checkpoints")
            if listed is None:
                self.newest.clear()
                self.unreadable = None
                self.checkpoints.clear()
                self.blobs.clear()
                self.blob_at.clear()
                self.writes.clear()
                self.live = []
                return
            if not isinstance(listed, list):
                raise CorruptRecordError(seq, "a deletion whose 'checkpoints' is not a list")
            self.newest.clear()
            for item in listed:
                if not (isinstance(item, list) and len(item) == 2):
                    raise CorruptRecordError(seq, "a deletion naming a malformed checkpoint")
                self.checkpoints.pop((item[0], item[1]), None)
                self.writes.pop((item[0], item[1]), None)
            self.live.append(record)
            return
        self.live.append(record)
        if record.kind == COPIED:
            return
        ns = _text(seq, body, "ns")
        if record.kind == CHECKPOINT:
            cid = _text(seq, body, "id")
            parent = body.get("parent")
            if parent is not None and not isinstance(parent, str):
                raise CorruptRecordError(seq, "a checkpoint whose parent is not text")
            blobs = body.get("blobs")
            if not isinstance(blobs, list):
                raise CorruptRecordError(seq, "a checkpoint whose 'blobs' is not a list")
            for blob in blobs:
                if not (isinstance(blob, list) and len(blob) == 4):
                    raise CorruptRecordError(seq, "a malformed channel blob")
                channel, version = blob[0], blob[1]
                if not (isinstance(channel, str) and isinstance(version, str)):
                    raise CorruptRecordError(seq, "a channel blob without text keys")
                self.blobs[(ns, channel, version)] = _decode(seq, blob[2:], "channel blob")
                self.blob_at[(ns, channel)] = (version, seq, record.hash.hex())
            stored = self.checkpoints[(ns, cid)] = StoredCheckpoint(
                seq,
                ns,
                cid,
                parent,
                _decode(seq, body.get("checkpoint"), "checkpoint"),
                _decode(seq, body.get("metadata"), "metadata"),
            )
            newest = self.newest.get(ns)
            if newest is not None and cid >= newest.id:
                self.newest[ns] = stored
            elif newest is None and len(self.checkpoints) == 1:
                self.newest[ns] = stored
            # A checkpoint put again starts with no pending writes (LangGraph's savers
            # keep the old ones, keyed by id; a fresh put of the same id is rare).
            return
        cid = _text(seq, body, "checkpoint")
        task = _text(seq, body, "task")
        path = body.get("path", "")
        writes = body.get("writes")
        if not isinstance(path, str) or not isinstance(writes, list):
            raise CorruptRecordError(seq, "a malformed pending-writes record")
        bucket = self.writes.setdefault((ns, cid), {})
        for item in writes:
            if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], int)):
                raise CorruptRecordError(seq, "a malformed pending write")
            idx, channel = item[0], item[1]
            if not isinstance(channel, str):
                raise CorruptRecordError(seq, "a pending write whose channel is not text")
            key = (task, idx)
            if idx >= 0 and key in bucket:
                continue
            bucket[key] = (task, channel, _decode(seq, item[2:], "pending write"), path)

    def add_named(self, record: Record, ns: str, channel: str, version: str) -> None:
        """Take the blob ``(ns, channel, version)`` from ``record``, a checkpoint another
        one names in its ``uses`` (hash-checked by the caller): it must be this thread's
        and hold that blob, else :class:`CorruptRecordError`."""
        body = record.body
        if record.kind != CHECKPOINT or body.get("thread") != self.thread_id:
            raise CorruptRecordError(record.seq, "a named record is not this thread's checkpoint")
        if still_sealed(record.kind, body):
            self.unreadable = self.unreadable or (record.seq, ["blobs"])
            return
        if body.get("ns") == ns:
            for blob in body.get("blobs") or ():
                if isinstance(blob, list) and len(blob) == 4 and blob[:2] == [channel, version]:
                    self.blobs[(ns, channel, version)] = _decode(
                        record.seq, blob[2:], "channel blob"
                    )
                    self.blob_at[(ns, channel)] = (version, record.seq, record.hash.hex())
                    return
        raise CorruptRecordError(
            record.seq, f"the record does not hold the blob of {channel!r} version {version}"
        )

    def check_readable(self) -> None:
        """:class:`PayloadsErasedError` when records of the live state could not be opened
        (a whole-thread deletion before the erasure makes the thread read as empty)."""
        if self.unreadable is not None:
            seq, fields = self.unreadable
            raise PayloadsErasedError(f"LangGraph thread {self.thread_id!r}", seq, fields)

    def latest(self, ns: str) -> StoredCheckpoint | None:
        """The newest checkpoint of ``ns`` by id (LangGraph's ids sort by time)."""
        newest = self.newest.get(ns)
        if newest is not None:
            return newest
        found = [c for (n, _), c in self.checkpoints.items() if n == ns]
        if not found:
            return None
        newest = self.newest[ns] = max(found, key=lambda c: c.id)
        return newest


def named_uses(record: Record) -> list[Use] | None:
    """A checkpoint record's ``uses`` (``None``: it names none, a reader replays), checked
    for shape: each names a record before this one."""
    uses = record.body.get("uses")
    if uses is None:
        return None
    if not isinstance(uses, list):
        raise CorruptRecordError(record.seq, "a checkpoint whose 'uses' is not a list")
    out: list[Use] = []
    for use in uses:
        if not (
            isinstance(use, list)
            and len(use) == 4
            and isinstance(use[0], str)
            and isinstance(use[1], str)
            and type(use[2]) is int
            and 1 <= use[2] < record.seq
            and isinstance(use[3], str)
        ):
            raise CorruptRecordError(record.seq, "a checkpoint naming a malformed record")
        out.append((use[0], use[1], use[2], use[3]))
    return out
