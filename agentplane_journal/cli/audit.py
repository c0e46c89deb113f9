"""The audit commands, ``verify`` and ``export``: every record of a run checked as a verifier would.

Both read runs page by page (:data:`_AUDIT_PAGE` runs, records and seals, per transaction,
and at most ``PAGE_BYTES`` of records: a page whose runs hold more is read in parts, and a
run larger than that by itself is read in a stream's pages) and judge each as
``SqlJournalStore.verify`` would; ``--all`` carries on past a bad run, names it, and fails at
the end.

Export format (``export RUN | --all --format journal``; the default format is agentplane
0.22's, :mod:`agentplane_journal.cli.backup`): JSON lines, UTF-8, one object per line, so that a
verifier needs nothing of this package but SHA-256, Ed25519 and RFC 6962:

* first, ``{"type": "header", "format": "agentplane-journal-export/1", "tenant", "origin",
  "checkpoint": the C2SP note text, "size", "root": hex}``;
* per record, in seq order per run: ``{"type": "record", "run": "run_<ULID>", "seq",
  "raw": base64 of the exact canonical bytes that were hashed, "prev_hash": hex,
  "hash": hex, "key_id": str or null, "signature": base64 or null}``. A record verifies when
  ``SHA-256(prev_hash || raw) == hash``, ``prev_hash`` is the previous record's ``hash``
  (32 zero bytes for seq 1), seqs run 1, 2, 3...; a signature is Ed25519 over
  ``SHA-256("io.github.hupe1980.agentplane/record/v1" || 0x00 || hash)``;
* after a sealed run's records, ``{"type": "inclusion", "run", "index", "size", "seal": hex,
  "proof": [hex, ...]}``: ``seal`` equals the run's last ``hash``, and the RFC 6962 audit
  path from ``SHA-256(0x00 || seal)`` at ``index`` reaches the header's ``root`` (``size``
  always equals the header's).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli.admissions import admissions_line, audit_admissions
from agentplane_journal.cli.base import PROG, _Exit
from agentplane_journal.cli.db import _all_runs, _existing, _not_a_run, _store
from agentplane_journal.cli.log import _audit_log
from agentplane_journal.core.chain import RunCheck
from agentplane_journal.core.ids import DEFAULT_TENANT, Digest, RunId
from agentplane_journal.core.signing import Ed25519Verifier
from agentplane_journal.db.statements import digest
from agentplane_journal.errors import CorruptRecordError
from agentplane_journal.journal.audits import RunRead
from agentplane_journal.journal.bounds import BoundsFinding
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.tlog.checkpoint import Inclusion

if TYPE_CHECKING:
    from agentplane_journal.core.signing import Verifier

#: A large run's export lines are held in memory up to this, then in a temporary file.
_SPOOL_BYTES = 4 << 20

_AUDIT_PAGE = 200  # runs read (records and seals) per transaction by verify/export --all


def _judge(
    run: RunId, read: RunRead, verifier: Verifier | None, require: bool
) -> tuple[dict[str, Any], Digest | None]:
    """What ``verify(run)`` would say of a run read by ``read_runs``, and its sealed head."""
    check = RunCheck(verifier, require)
    try:
        if read.error is not None:
            raise read.error
        check.feed(read.records)
    except CorruptRecordError as exc:
        return _failed(run, exc), None
    return _finish(run, read, check)


async def _judge_pages(
    store: SqlJournalStore, run: RunId, read: RunRead, verifier: Verifier | None, require: bool
) -> tuple[dict[str, Any], Digest | None]:
    """:func:`_judge` of a run too large for a page of runs: its records read page by page
    (``store.pages``, as ``verify`` reads them), after its seal (read with ``read``)."""
    check = RunCheck(verifier, require)
    try:
        async for page in store.pages(run):
            check.feed(page)
    except CorruptRecordError as exc:
        return _failed(run, exc), None
    return _finish(run, read, check)


def _failed(run: RunId, exc: CorruptRecordError) -> dict[str, Any]:
    return {"run": str(run), "ok": False, "seq": exc.seq, "error": exc.detail}


def _finish(run: RunId, read: RunRead, check: RunCheck) -> tuple[dict[str, Any], Digest | None]:
    try:
        sealed = None if read.sealed is None else digest(read.sealed, check.last)
        head = check.finish(sealed)
    except CorruptRecordError as exc:
        return _failed(run, exc), None
    result = {
        "run": str(run),
        "ok": True,
        "head": head.hex(),
        "records": check.last,
        "sealed": read.position,
    }
    return result, sealed


async def _parts(
    store: SqlJournalStore, runs: list[RunId | str]
) -> AsyncIterator[tuple[list[RunId | str], dict[RunId, RunRead]]]:
    """A page's runs in order, read in parts of at most ``PAGE_BYTES`` of records (each
    part one ``read_runs``, yielded before the next is read): ``(runs, reads)`` per part,
    where ``runs`` also carries the stored ids that are not run ids, in their place."""
    pending = [r for r in runs if not isinstance(r, str)]
    at = 0
    while at < len(runs):
        reads = await store.read_runs(pending) if pending else {}
        part: list[RunId | str] = []
        while at < len(runs) and (isinstance(runs[at], str) or runs[at] in reads):
            part.append(runs[at])
            at += 1
        pending = [r for r in pending if r not in reads]
        yield part, reads


async def _verify_page(
    store: SqlJournalStore, page: list[RunId | str], verifier: Verifier | None, require: bool
) -> list[dict[str, Any]]:
    results = []
    async for part, reads in _parts(store, page):
        for run in part:
            if isinstance(run, str):
                results.append(_not_a_run(run))
            elif reads[run].whole:
                results.append(_judge(run, reads[run], verifier, require)[0])
            else:
                results.append((await _judge_pages(store, run, reads[run], verifier, require))[0])
    return results


async def cmd_verify(args: argparse.Namespace) -> int:
    verifier = None
    if args.trust:
        verifier = Ed25519Verifier()
        for key_id, public in args.trust:
            verifier.trust(key_id, public)
    async with _store(args) as store:
        if args.all:
            runs = await _all_runs(store)
        else:
            runs = [await _existing(store, args.run)]
        # Pages of runs, each read (records and seals) in one transaction of two statements.
        progress = fmt.Progress("verifying", len(runs))
        results: list[dict[str, Any]] = []
        for start in range(0, len(runs), _AUDIT_PAGE):
            page = runs[start : start + _AUDIT_PAGE]
            for result in await _verify_page(store, page, verifier, args.require_signature):
                results.append(result)
                if not result["ok"] and not args.json:
                    progress.close()
                    print(fmt.failure_line(result))
            progress.update(start + len(page))
        progress.close()
        # The stored Merkle tree against the seals it is derived from.
        log = await _audit_log(store, args.json) if args.all else None
        # The admission keys against the RunAdmitted records they are derived from.
        admissions = await audit_admissions(store, args.json) if args.all else None
        # Counters and instants below their CHECK's floor (a constraint dropped, a row edited).
        bounds = [_bound(f) for f in await store.audit_bounds()] if args.all else None
        # Erased scopes: payloads unreadable by design, reported as erased, never findings.
        erased = await _erasures(store) if args.all else None
    failed = [r for r in results if not r["ok"]]
    signatures = (
        "not checked (pass --trust KEY_ID=PUBLIC_KEY_HEX)"
        if verifier is None
        else f"checked against {len(args.trust)} trusted key(s)"
        + ("; unsigned records refused" if args.require_signature else "")
    )
    if args.json:
        fmt.print_json(
            {
                "tenant": store.tenant,
                "checked": len(results),
                "intact": len(results) - len(failed),
                "failed": len(failed),
                "signatures": signatures,
                "runs": results,
                **({} if log is None else {"log": log}),
                **({} if admissions is None else {"admissions": admissions}),
                **({} if bounds is None else {"bounds": bounds}),
                **({} if erased is None else {"erasures": erased}),
            }
        )
    else:
        fmt.print_verify_summary(results, store.tenant, signatures, single=not args.all)
        if log is not None:
            print(fmt.log_audit_line(log, store.database))
        if admissions is not None:
            print(admissions_line(admissions))
        if bounds is not None:
            for line in fmt.bounds_lines(bounds):
                print(line)
        if erased:
            print(
                f"erasures: {len(erased)} scope(s) erased, journaled and sealed into the log; "
                "their payloads are unreadable by design and are not findings "
                "(`agentplane-journal erasures`)"
            )
    bad_log = log is not None and not log["ok"]
    bad_admissions = admissions is not None and not admissions["ok"]
    return 1 if failed or bad_log or bad_admissions or bounds else 0


async def _erasures(store: Any) -> list[dict[str, Any]]:
    from agentplane_journal.cli.erasure import _shape
    from agentplane_journal.keyring.journal import journaled_erasures

    return [_shape(e) for e in await journaled_erasures(store)]


def _bound(finding: BoundsFinding) -> dict[str, Any]:
    return {
        "table": finding.table,
        "column": finding.column,
        "floor": finding.floor,
        "rows": finding.rows,
        "first": finding.first,
    }


async def cmd_export(args: argparse.Namespace) -> int:
    if getattr(args, "format", "journal") == "agentplane":
        from agentplane_journal.cli.backup import cmd_export_v1

        return await cmd_export_v1(args)
    if getattr(args, "output", None):
        raise _Exit(2, "--output is for --format agentplane; redirect stdout for this format")
    if args.tenant is None:  # this format is one tenant's: 'default' unless named
        args.tenant = DEFAULT_TENANT
    async with _store(args) as store:
        runs: list[RunId | str] = (
            await _all_runs(store) if args.all else [await _existing(store, args.run)]
        )
        # Every proof is taken at the header's size from the stored tree, whose nodes below
        # that size never change: one snapshot of the log, read page by page.
        cp = await store.checkpoint()
        out = sys.stdout
        out.write(fmt.export_header(store.tenant, cp) + "\n")
        progress = fmt.Progress("exporting", len(runs))
        failed = 0
        for start in range(0, len(runs), _AUDIT_PAGE):
            page = runs[start : start + _AUDIT_PAGE]
            async for part, reads in _parts(store, page):
                logged = [
                    r.position
                    for r in reads.values()
                    if r.position is not None and r.position < cp.size
                ]
                paths = await store.inclusion_paths_at(cp.size, logged)
                for run in part:
                    failed += await _export_run(
                        store, run, reads, paths, cp.size, args.all, progress
                    )
            progress.update(start + len(page))
        progress.close()
    if failed:
        print(f"{PROG}: {failed} run(s) FAILED and were left out of the export", file=sys.stderr)
    return 1 if failed else 0


async def _export_run(
    store: SqlJournalStore,
    run: RunId | str,
    reads: dict[RunId, RunRead],
    paths: dict[int, list[Digest]],
    size: int,
    every: bool,
    progress: fmt.Progress,
) -> int:
    """Write one run's records and inclusion line; 1 if it fails what verify checks."""
    if isinstance(run, str):
        return _export_failed(run, _not_a_run(run), every, progress)
    read = reads[run]
    sealed = None
    if read.whole:
        problem, sealed = _judge(run, read, None, False)
    else:
        # Checked in pages first, then read again and written: only a run that verifies is
        # exported, in the memory of a page.
        problem, sealed = await _judge_pages(store, run, read, None, False)
    if problem["ok"]:
        if read.whole:
            for record in read.records:
                sys.stdout.write(fmt.export_record(run, record) + "\n")
        else:
            problem = await _export_pages(store, run, problem)
    if not problem["ok"]:
        return _export_failed(run, problem, every, progress)
    if sealed is not None and read.position in paths:
        inc = Inclusion(read.position, size, sealed, tuple(paths[read.position]))
        sys.stdout.write(fmt.export_inclusion(run, inc) + "\n")
    return 0


def _export_failed(
    run: RunId | str, problem: dict[str, Any], every: bool, progress: fmt.Progress
) -> int:
    # What verify checks: a run that would fail it is reported, not exported.
    line = f"FAILED {run} seq {problem['seq']}: {problem['error']}"
    if not every:
        raise _Exit(1, line)
    # An audit carries on past a bad run, names it, and fails at the end.
    progress.close()
    print(f"{PROG}: {line}", file=sys.stderr)
    return 1


async def _export_pages(
    store: SqlJournalStore, run: RunId, judged: dict[str, Any]
) -> dict[str, Any]:
    """Write the records :func:`_judge_pages` checked, read again page by page, each one
    linked to the one before and the last the head that was checked (so they are the
    records checked). They are spooled first (to a temporary file past a few pages) and
    copied to the output only once the whole run has been read again, so rows changed in
    between fail the run with nothing of it written."""
    last, head, prev, written = judged["records"], judged["head"], Digest.ZERO, 0

    def changed(seq: int) -> dict[str, Any]:
        return {
            "ok": False,
            "seq": seq,
            "error": "the run's rows changed while it was exported (nothing of it was "
            "written): export it again",
        }

    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES, mode="w+", encoding="utf-8") as spool:
        try:
            async for page in store.pages(run):
                for record in page:
                    if written == last:
                        break
                    if record.seq != written + 1 or record.prev_hash != prev:
                        return changed(record.seq)
                    spool.write(fmt.export_record(run, record) + "\n")
                    prev, written = record.hash, written + 1
                if written == last:
                    break
        except CorruptRecordError as exc:
            return changed(exc.seq)
        if written != last or prev.hex() != head:
            return changed(written + 1)
        spool.seek(0)
        shutil.copyfileobj(spool, sys.stdout)
    return judged
