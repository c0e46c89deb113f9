"""A page of a thread's history read back from its head, not the thread: LangGraph's ``list``
with a ``limit`` (``get_state_history``) on a saver made with ``lean_resume=True``.

It reads the run's newest records with the seal (one statement), and older ones a page at a
time, twice as many each time, until it holds ``limit`` live checkpoints of the namespace
(older than ``before``, matching the filter), a deletion of the whole thread, or seq 1; then
the records those checkpoints name outside what it read (one statement). So the last 10 of a
1,000-checkpoint thread cost the records from the 10th newest checkpoint to the head, the
same at 100 checkpoints as at 100,000.

Why the answer is the replay's: each answered checkpoint must name its blobs (``uses``, see
:mod:`agentplane_journal.langgraph.lean`), which also says its writer knew the thread and
it was its namespace's newest, and names any of its pending writes that landed before it
(``pending``). So every checkpoint of the namespace before it in the chain has a smaller
id (the page is newest first by id as by seq), its other pending writes and any deletion
of it are in the records read (after it), and each blob it does not carry and each early
pending write is in the record it names (read and checked by seq and hash). A page
needing a checkpoint that names nothing (an old journal, a writer that did not read
first), or reaching a copy, is answered by the replay instead (``None``).

What it checks, as the lean resume does (docs/guides/langgraph.md, the trust model): every
record read re-hashed from its row; what it read as one chain from its first record to the
head (links, signatures with a verifier, the seal when sealed), each page as it is read,
before the filter opens any metadata with the serializer; each named record's seq, hash
and blob. What it cannot see is what it does not read: the records before the page
that its checkpoints do not name, and, without a seal or a signature, a tail rewritten
whole or cut short.
"""

from __future__ import annotations

from collections.abc import Callable

from agentplane_journal.core.chain import RunCheck
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.signing import Verifier
from agentplane_journal.errors import CorruptRecordError
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.keyring.store import SealingStore
from agentplane_journal.langgraph.lean import (
    check_pending,
    fetch_named,
    named_pending,
    named_record,
)
from agentplane_journal.langgraph.records import (
    CHECKPOINT,
    COPIED,
    DELETED,
    ThreadView,
    Use,
    named_uses,
)

__all__ = ["lean_page"]

#: The records a page reads back at most per statement (it starts at a few per checkpoint
#: wanted and doubles).
_MOST = 4096


async def lean_page(
    store: SqlJournalStore,
    thread_id: str,
    run: RunId,
    ns: str,
    before: str | None,
    limit: int,
    matches: Callable[[Record], bool],
    verifier: Verifier | None,
    require: bool,
) -> tuple[ThreadView, list[tuple[str, str]], list[Record], int] | None:
    """``ns``'s newest ``limit`` live checkpoints with an id below ``before`` for which
    ``matches`` (the filter) holds, checked as the module says: ``(view, their keys newest
    first, the records read, the last seq)``; ``None`` when the replay must answer."""
    if isinstance(store, SealingStore):
        return None  # payloads opened by the reads that replay (as langgraph/lean.py)
    size = min(_MOST, 4 * limit + 8)
    page, sealed = await store.read_back(run, None, size)
    if not page:
        return None
    # Each page is checked before anything of it is decoded further (the filter opens
    # metadata with the serializer): as a chain onto the head and the seal, or onto the
    # newer page it precedes.
    _check(page, None, sealed, verifier, require)
    pages = [page]
    seen: set[tuple[str, str]] = set()
    deleted: set[tuple[str, str]] = set()
    picked: list[Record] = []
    floor = 0  # a deletion of the whole thread: nothing at or before it is live
    while True:
        for record in reversed(page):
            if record.kind == COPIED:
                return None  # copied records name the source's: the replay answers
            body = record.body
            if record.kind == DELETED:
                listed = body.get("checkpoints")
                if listed is None:
                    floor = record.seq
                    break
                for item in listed if isinstance(listed, list) else ():
                    if (
                        isinstance(item, list)
                        and len(item) == 2
                        and all(isinstance(part, str) for part in item)
                    ):
                        deleted.add((item[0], item[1]))
                continue  # (a malformed one is refused when the view is built)
            cid = body.get("id")
            if record.kind != CHECKPOINT or body.get("ns") != ns or not isinstance(cid, str):
                continue
            if (ns, cid) in seen:
                continue  # put again later: the later record is the checkpoint
            seen.add((ns, cid))
            if (ns, cid) in deleted or (before is not None and cid >= before):
                continue
            if not matches(record):
                continue
            if named_uses(record) is None:
                return None  # its writer did not vouch for its place: the replay answers
            picked.append(record)
            if len(picked) >= limit:
                break
        else:
            if page[0].seq > 1:
                size = min(_MOST, size * 2)
                page, _ = await store.read_back(run, page[0].seq, size)
                if not page or page[-1].seq != pages[-1][0].seq - 1:
                    raise CorruptRecordError(
                        pages[-1][0].seq - 1,
                        "the records before this one are gone: records were deleted",
                    )
                _check(page, pages[-1][0], None, verifier, require)
                pages.append(page)
                continue
        break
    records = [r for p in reversed(pages) for r in p]
    uses: list[tuple[Record, Use]] = [(r, use) for r in picked for use in named_uses(r) or ()]
    pending = [(r, item) for r in picked for item in named_pending(r)]
    by_seq = {r.seq: r for r in records}
    wanted = sorted(
        {use[2] for _, use in uses if use[2] not in by_seq}
        | {seq for _, (seq, _) in pending if seq not in by_seq}
    )
    if wanted and wanted[0] <= floor:
        return None  # names a record before the thread's deletion: the replay answers
    await fetch_named(store, run, wanted, by_seq, verifier, require)
    view = ThreadView(thread_id, partial_ns=ns)
    for checkpoint, (channel, version, seq, digest) in sorted(uses, key=lambda u: u[1][2]):
        named = named_record(by_seq, checkpoint.seq, channel, seq, digest)
        if seq <= floor:
            return None
        view.add_named(named, ns, channel, version)
    # Pending writes that landed before their checkpoint and before the page, in seq order;
    # those in the page are applied with it.
    early = {seq: check_pending(by_seq.get(seq), r, seq, digest) for r, (seq, digest) in pending}
    if early and min(early) <= floor:
        return None
    view.extend(early[seq] for seq in sorted(early) if seq < records[0].seq)
    view.extend(r for r in records if r.seq > floor)
    keys = sorted(((ns, r.body["id"]) for r in picked), key=lambda k: k[1], reverse=True)
    return view, keys, records, records[-1].seq


def _check(
    page: list[Record],
    newer: Record | None,
    sealed: Digest | None,
    verifier: Verifier | None,
    require: bool,
) -> None:
    """``page`` (in seq order) as one chain (links, signatures with a verifier) that ends at
    the head (``newer`` None: and the seal, if sealed) or links onto ``newer``, the first
    record of the page after it."""
    check = RunCheck(verifier, require)
    check.head, check.last = page[0].prev_hash, page[0].seq - 1
    check.feed(page)
    if newer is None:
        check.finish(sealed)
    elif newer.prev_hash != check.head:
        raise CorruptRecordError(
            newer.seq, "the record before this one is not the one it links to: records rewritten"
        )
