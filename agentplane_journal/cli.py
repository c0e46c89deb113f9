"""The ``agentplane-journal`` command: the questions an operator or an auditor asks a journal.

Every command that touches a database takes ``--url`` (default: ``$AGENTPLANE_JOURNAL_URL``,
else ``sqlite+aiosqlite:///agentplane_journal.db`` in the current directory), ``--tenant``
(default ``default``) and ``--origin``; every command that reads takes ``--json`` and
``--read-url`` (default ``$AGENTPLANE_JOURNAL_READ_URL``): a streaming replica to read from
instead (see the README's "Production topology"). ``?pgbouncer=true`` on a PostgreSQL URL
makes its connections safe behind PgBouncer's transaction pooling.
``demo`` shows the whole package working in one command: on a new SQLite file in the current
directory by default, or on ``--url`` / ``$AGENTPLANE_JOURNAL_URL`` if it holds no journal rows.
``checkpoint --sign-key-file`` prints a C2SP signed note; ``prove --checkpoint`` and
``consistency`` check a signed note with ``--note-key`` (see ``_cli_notes.py`` for the rules).

Exit codes: 0 ok; 1 something failed to verify (the output names the run and ``seq N``),
or a run that must be sealed is not; 2 a usage, connection or schema problem, reported on
stderr in one line (run ``agentplane-journal upgrade`` when the schema is behind).

Export format (``export RUN | --all``): JSON lines, UTF-8, one object per line, so that a
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
import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__
from .ids import DEFAULT_TENANT

if TYPE_CHECKING:
    from ._cli_notes import SavedNote
    from .note import NoteVerifier
    from .signing import Verifier

__all__ = ["build_parser", "main"]


def _load() -> None:
    """Import what the commands run on, once the command line has parsed.

    ``--help``, ``--version`` and usage errors need none of it, and SQLAlchemy, Alembic and
    cryptography cost most of a second to import: a shell expects ``--help`` at once.
    """
    global CommandError, async_url, SQLAlchemyError, fmt, run_demo
    global DemoRefused, notes
    global Checkpoint, Inclusion, CorruptRecordError, StoreError, Digest, RunId, verify_consistency
    global current_revision, upgrade, upgrade_sql, Ed25519Verifier, SqlJournalStore
    global RunCheck, RunRead, digest
    from alembic.util.exc import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    from . import _cli_format as fmt
    from . import _cli_notes as notes
    from ._cli_demo import DemoRefused, run_demo
    from .checkpoint import Checkpoint, Inclusion
    from .engine import async_url
    from .errors import CorruptRecordError, StoreError
    from .ids import Digest, RunId
    from .merkle import verify_consistency
    from .migrate import current_revision, upgrade, upgrade_sql
    from .record import RunCheck
    from .signing import Ed25519Verifier
    from .statements import digest
    from .store import RunRead, SqlJournalStore


PROG = "agentplane-journal"
URL_ENV = "AGENTPLANE_JOURNAL_URL"
READ_URL_ENV = "AGENTPLANE_JOURNAL_READ_URL"
DEFAULT_URL = "sqlite+aiosqlite:///agentplane_journal.db"

_DEMO_FILE = "agentplane-journal-demo.db"  # _cli_demo.DEMO_FILE, without importing the store
_PAGE = 500
_AUDIT_PAGE = 200  # runs read (records and seals) per transaction by verify/export --all
_RETRIES = 5  # snapshots re-taken when the log grows between two reads


class _Exit(Exception):
    """End the command with ``code`` and a one-line ``message`` on stderr."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- the database target -------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    url: str  # with the password: for connecting only
    shown: str  # without it: for every message
    password: str | None


def _redact(text: str) -> str:
    """Hide ``user:password@`` in a string that may not even parse as a URL."""
    return re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", text)


def _target(raw: str, *, must_exist: bool) -> _Target:
    try:
        url = async_url(raw)  # the library's own normalisation: one set of accepted URLs
    except ValueError as exc:
        raise _Exit(2, f"{_redact(raw)!r}: {exc}") from None
    driver = url.drivername
    shown = url.render_as_string(hide_password=True)
    if must_exist and driver.startswith("sqlite") and url.database not in (None, "", ":memory:"):
        path = Path(url.database)
        if not path.exists():
            raise _Exit(
                2,
                f"no database file at {path.resolve()}; create one with `{PROG} upgrade "
                f"--url {shown}`, or try `{PROG} demo`",
            )
    return _Target(url.render_as_string(hide_password=False), shown, url.password)


@asynccontextmanager
async def _store(args: argparse.Namespace) -> AsyncIterator[SqlJournalStore]:
    # Tenant "default" names its log plain ORIGIN, any other ORIGIN/TENANT (as the store does).
    read = getattr(args, "read_target", None)
    store = await SqlJournalStore.connect(
        args.target.url,
        tenant=args.tenant,
        origin=args.origin,
        schema=args.schema,
        read_url=None if read is None else read.url,
    )
    try:
        yield store
    finally:
        await store.close()


def _run_id(text: str) -> RunId:
    try:
        return RunId.parse(text)
    except ValueError as exc:
        raise _Exit(2, str(exc)) from None


async def _existing(store: SqlJournalStore, text: str) -> RunId:
    run = _run_id(text)
    try:
        seq = (await store.head(run)).seq
    except CorruptRecordError:
        return run  # it exists; verification will name what is wrong with it
    if seq == 0 and await store.inclusion_proof(run) is None:
        raise _Exit(
            2, f"no records for {run} in tenant {store.tenant!r} (check --tenant and --url)"
        )
    return run


async def _all_runs(store: SqlJournalStore) -> list[RunId | str]:
    """Every run with a record or a seal, by run id, paged (``SqlJournalStore.audit_runs``).

    From the journal and the log themselves, not from ``run_activity``: a run whose
    activity row is gone is still audited, and so is a sealed run whose records are gone.
    A stored id that is not a canonical run id is kept, as text, to be reported as a
    failure. Runs first written after the listing passed their place are not included.
    """
    runs: list[RunId | str] = []
    after = None
    while True:
        page = await store.audit_runs(after, _PAGE)
        runs.extend(_stored_run(value) for value in page)
        if len(page) < _PAGE:
            return runs
        after = page[-1]


def _stored_run(value: object) -> RunId | str:
    if isinstance(value, str):
        try:
            run = RunId.parse(value)
        except ValueError:
            return value
        if str(run) == value:
            return run
        return value
    return repr(value)


def _not_a_run(text: str) -> dict[str, Any]:
    return {
        "run": text,
        "ok": False,
        "seq": 0,
        "error": "rows are stored under this run id, which is not a canonical run id "
        "(run_<ULID>): the table was edited",
    }


# -- verification and proof helpers --------------------------------------------------------


def _judge(
    run: RunId, read: RunRead, verifier: Verifier | None, require: bool
) -> tuple[dict[str, Any], Digest | None]:
    """What ``verify(run)`` would say of a run read by ``read_runs``, and its sealed head."""
    try:
        if read.error is not None:
            raise read.error
        check = RunCheck(verifier, require)
        check.feed(read.records)
        sealed = None if read.sealed is None else digest(read.sealed, check.last)
        head = check.finish(sealed)
    except CorruptRecordError as exc:
        return {"run": str(run), "ok": False, "seq": exc.seq, "error": exc.detail}, None
    result = {
        "run": str(run),
        "ok": True,
        "head": head.hex(),
        "records": check.last,
        "sealed": read.position,
    }
    return result, sealed


async def _verify_page(
    store: SqlJournalStore, page: list[RunId | str], verifier: Verifier | None, require: bool
) -> list[dict[str, Any]]:
    reads = await store.read_runs([r for r in page if not isinstance(r, str)])
    return [
        _not_a_run(run) if isinstance(run, str) else _judge(run, reads[run], verifier, require)[0]
        for run in page
    ]


async def _verify_run(
    store: SqlJournalStore, run: RunId, verifier: Verifier | None, require: bool
) -> dict[str, Any]:
    try:
        head = await store.verify(run, verifier, require)
    except CorruptRecordError as exc:
        return {"run": str(run), "ok": False, "seq": exc.seq, "error": exc.detail}
    return {"run": str(run), "ok": True, "head": head.hex()}


async def _inclusion_snapshot(
    store: SqlJournalStore, run: RunId
) -> tuple[Checkpoint, Inclusion | None]:
    """A checkpoint and an inclusion proof for the same log size (retried if it grows)."""
    for _ in range(_RETRIES):
        cp = await store.checkpoint()
        inc = await store.inclusion_proof(run)
        if inc is None or inc.size == cp.size:
            return cp, inc
    raise _Exit(2, "the log kept growing while reading a proof; try again")


async def _consistency_snapshot(
    store: SqlJournalStore, old_size: int
) -> tuple[Checkpoint, list[Digest] | None]:
    """The current checkpoint and a consistency proof from ``old_size`` to it.

    ``None`` for the proof when the log is smaller than ``old_size``.
    """
    for _ in range(_RETRIES):
        cp = await store.checkpoint()
        if old_size > cp.size:
            return cp, None
        proof = await store.consistency_proof(old_size)
        if await store.checkpoint() == cp:
            return cp, proof
    raise _Exit(2, "the log kept growing while reading a proof; try again")


def _read_note(value: str, keys: list[NoteVerifier]) -> SavedNote:
    """A checkpoint note (``@file``, ``@-`` for stdin), its signature checked with ``keys``."""
    try:
        return notes.read_note(value, keys)
    except notes.NoteProblem as exc:
        raise _Exit(exc.code, exc.message) from None


def _signed_check(saved: SavedNote) -> list[tuple[bool, str]]:
    return [(True, f"the saved note is signed by trusted key {k}") for k in saved.signed_by]


def _check_origin(store: SqlJournalStore, old: Checkpoint) -> None:
    if old.origin != store.origin:
        raise _Exit(
            1,
            f"FAILED: the saved checkpoint is for log {old.origin!r}, but tenant "
            f"{store.tenant!r} here is log {store.origin!r} (check --tenant and --origin)",
        )


# -- commands ----------------------------------------------------------------------------


async def cmd_upgrade(args: argparse.Namespace) -> int:
    if args.sql:
        # Offline: the script a DBA reviews and runs, from an empty database; no connection.
        dialect = "postgresql" if args.target.url.startswith("postgresql") else "sqlite"
        upgrade_sql(dialect, schema=args.schema, output=sys.stdout)
        return 0
    before = await current_revision(args.target.url, schema=args.schema)
    await upgrade(args.target.url, schema=args.schema)
    after = await current_revision(args.target.url, schema=args.schema)
    verb = "already at" if before == after else f"upgraded from {before or 'no revision'} to"
    print(f"{args.target.shown}: {verb} revision {after}")
    return 0


async def _records(store: SqlJournalStore, run: RunId) -> int | str:
    """How many records a run has, or where it is corrupt (a listing must not stop there)."""
    try:
        return (await store.head(run)).seq
    except CorruptRecordError as exc:
        return f"corrupt at seq {exc.seq}"


async def cmd_runs(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        rows: list[dict[str, Any]] = []
        if args.outcome:
            for run in await store.runs_by_outcome(args.outcome, args.limit):
                records = await _records(store, run)
                rows.append({"run": str(run), "outcome": args.outcome, "records": records})
        else:
            for run, updated in await store.recent_runs(None, args.limit):
                records = await _records(store, run)
                updated_at = fmt.iso_time(updated)
                rows.append({"run": str(run), "updated_at": updated_at, "records": records})
    if args.json:
        fmt.print_json(rows)
    else:
        fmt.print_runs(rows, args.outcome, store.tenant)
    return 0


async def cmd_show(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        run = await _existing(store, args.run)
        try:
            records = await store.read(run)
        except CorruptRecordError as exc:
            raise _Exit(1, f"FAILED {run} seq {exc.seq}: {exc.detail}") from None
        cancel = await store.cancellation(run)
        inc = await store.inclusion_proof(run)
    if args.json:
        fmt.print_json(
            {
                "run": str(run),
                "tenant": store.tenant,
                "sealed": None if inc is None else fmt.inclusion_json(inc),
                "cancellation": None if cancel is None else asdict(cancel),
                "records": [fmt.record_json(r) for r in records],
            }
        )
        return 0
    fmt.print_show(run, store.tenant, records, inc, cancel)
    return 0


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
            }
        )
    else:
        fmt.print_verify_summary(results, store.tenant, signatures, single=not args.all)
        if log is not None:
            print(fmt.log_audit_line(log))
    return 1 if failed or (log is not None and not log["ok"]) else 0


def _audit_progress(label: str) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A progress callback for the log's page-by-page audits, and how to close its bar."""
    bar: list[fmt.Progress] = []

    def update(done: int, total: int) -> None:
        if not bar:
            bar.append(fmt.Progress(label, total, threshold=10_000))
        bar[0].update(done)

    def close() -> None:
        if bar:
            bar[0].close()

    return update, close


async def _audit_log(store: SqlJournalStore, quiet: bool) -> dict[str, Any]:
    update, close = _audit_progress("checking the log's stored tree")
    try:
        audit = await store.audit_log(update)
    except CorruptRecordError as exc:  # a seal row that is not a seal: the log is damaged
        result = {"ok": False, "leaves": None, "position": None, "error": exc.detail}
        if not quiet:
            print(fmt.log_failure_line(result))
        return result
    finally:
        close()
    result = {
        "ok": audit.ok,
        "leaves": audit.size,
        "position": audit.first_bad,
        "error": audit.detail,
    }
    if not audit.ok and not quiet:
        print(fmt.log_failure_line(result))
    return result


async def cmd_reindex_log(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        update, close = _audit_progress("rebuilding the log's stored tree")
        try:
            report = await store.reindex_log(update)
        finally:
            close()
    result = {
        "tenant": store.tenant,
        "leaves": report.size,
        "first_bad": report.first_bad,
        "detail": report.detail,
        "rewritten": report.repaired,
    }
    if args.json:
        fmt.print_json(result)
    else:
        print(fmt.reindex_line(result))
    return 0


async def cmd_checkpoint(args: argparse.Namespace) -> int:
    if args.key_name is not None and args.sign_key_file is None:
        raise _Exit(2, "--key-name names the key of --sign-key-file; give both")
    async with _store(args) as store:
        signer = None
        if args.sign_key_file is not None:
            # The log's key name SHOULD be its origin (c2sp.org/tlog-checkpoint).
            try:
                signer = notes.load_signer(args.sign_key_file, args.key_name or store.origin)
            except notes.NoteProblem as exc:
                raise _Exit(exc.code, exc.message) from None
        cp = await store.checkpoint()
    note = cp.to_note() if signer is None else cp.to_signed_note(signer)
    if args.json:
        extra = {} if signer is None else {"note": note, "verifier_key": signer.verifier_key}
        fmt.print_json({**fmt.checkpoint_json(cp), **extra})
    else:
        sys.stdout.write(note)
    return 0


async def _prove(
    store: SqlJournalStore, run: RunId, old: Checkpoint | None
) -> tuple[Checkpoint, Inclusion, list[tuple[bool, str]]]:
    """The current checkpoint, the run's inclusion proof and each check's verdict."""
    for _ in range(_RETRIES):
        cp, inc = await _inclusion_snapshot(store, run)
        if inc is None:
            raise _Exit(
                1,
                f"{run} is not sealed, so it is not in the log yet "
                "(only sealed runs are; `show` lists its records)",
            )
        checks: list[tuple[bool, str]] = []
        chain = await _verify_run(store, run, None, False)
        if chain["ok"]:
            same = chain["head"] == inc.seal.hex()
            checks.append((same, "the run's records verify and end at the sealed head"))
        else:
            checks.append(
                (
                    False,
                    "the run's records verify and end at the sealed head "
                    f"(seq {chain['seq']}: {chain['error']})",
                )
            )
        if old is None or old.size == cp.size:
            label = "current" if old is None else "saved"
            root = cp.root if old is None else old.root
            checks.append((inc.verify(root), f"leaf {inc.index} is in the {label} checkpoint"))
        elif old.size > cp.size:
            checks.append(
                (False, f"the saved checkpoint has {old.size} leaves, this log only {cp.size}")
            )
        elif inc.index >= old.size:
            checks.append(
                (
                    False,
                    f"the run was sealed after the saved checkpoint (it is leaf {inc.index}, "
                    f"the saved checkpoint has {old.size}): prove it without --checkpoint",
                )
            )
        else:
            # The store proves inclusion at the current size only, so a run in an older
            # checkpoint is proved in two steps: it is in the current log, and the current
            # log extends the saved one, whose first old.size leaves include this one.
            now, proof = await _consistency_snapshot(store, old.size)
            if now != cp:
                continue  # a seal landed between the two proofs: take both again
            extends = proof is not None and verify_consistency(
                old.size, old.root, cp.size, cp.root, proof
            )
            checks.append((inc.verify(cp.root), f"leaf {inc.index} is in the current checkpoint"))
            checks.append((extends, "the current log extends the saved checkpoint"))
        return cp, inc, checks
    raise _Exit(2, "the log kept growing while reading a proof; try again")


async def cmd_prove(args: argparse.Namespace) -> int:
    if args.note_key and not args.checkpoint:
        raise _Exit(2, "--note-key checks the signature of --checkpoint NOTE; give both")
    saved = _read_note(args.checkpoint, args.note_key) if args.checkpoint else None
    old = None if saved is None else saved.checkpoint
    async with _store(args) as store:
        run = await _existing(store, args.run)
        if old is not None:
            _check_origin(store, old)
        cp, inc, checks = await _prove(store, run, old)
    if saved is not None:
        checks = _signed_check(saved) + checks
    ok = all(passed for passed, _ in checks)
    if args.json:
        fmt.print_json(
            {
                "run": str(run),
                "origin": cp.origin,
                **fmt.inclusion_json(inc),
                "checkpoint": fmt.checkpoint_json(cp),
                "saved_checkpoint": None if old is None else fmt.checkpoint_json(old),
                "checks": [{"ok": passed, "check": text} for passed, text in checks],
                "ok": ok,
            }
        )
    else:
        fmt.print_prove(run, cp, inc, old, checks)
    return 0 if ok else 1


async def cmd_consistency(args: argparse.Namespace) -> int:
    saved = _read_note(args.old_note, args.note_key)
    old = saved.checkpoint
    async with _store(args) as store:
        _check_origin(store, old)
        cp, proof = await _consistency_snapshot(store, old.size)
    # agentplane 0.4.0 wrote the empty log's root as 32 zero bytes; the RFC check refuses
    # that root, but the note is honest: the empty log is a prefix of every log.
    ok = proof is not None and (
        old.is_v040_empty or verify_consistency(old.size, old.root, cp.size, cp.root, proof)
    )
    if args.json:
        fmt.print_json(
            {
                "saved": fmt.checkpoint_json(old),
                "current": fmt.checkpoint_json(cp),
                "proof": None if proof is None else [p.hex() for p in proof],
                "saved_is_agentplane_0_4_0_empty_log": old.is_v040_empty,
                "saved_signed_by": list(saved.signed_by),
                "ok": ok,
            }
        )
    else:
        fmt.print_checks(_signed_check(saved))
        fmt.print_consistency(old, cp, proof, ok)
    return 0 if ok else 1


async def cmd_export(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        runs = await _all_runs(store) if args.all else [await _existing(store, args.run)]
        # Every proof is taken at the header's size from the stored tree, whose nodes below
        # that size never change: one snapshot of the log, read page by page.
        cp = await store.checkpoint()
        out = sys.stdout
        out.write(fmt.export_header(store.tenant, cp) + "\n")
        progress = fmt.Progress("exporting", len(runs))
        failed = 0
        for start in range(0, len(runs), _AUDIT_PAGE):
            page = runs[start : start + _AUDIT_PAGE]
            reads = await store.read_runs([r for r in page if not isinstance(r, str)])
            logged = [
                r.position
                for r in reads.values()
                if r.position is not None and r.position < cp.size
            ]
            paths = await store.inclusion_paths_at(cp.size, logged)
            for run in page:
                sealed = None
                if isinstance(run, str):
                    problem = _not_a_run(run)
                else:
                    problem, sealed = _judge(run, reads[run], None, False)
                if not problem["ok"]:
                    # What verify checks: a run that would fail it is reported, not exported.
                    line = f"FAILED {run} seq {problem['seq']}: {problem['error']}"
                    if not args.all:
                        raise _Exit(1, line)
                    # An audit carries on past a bad run, names it, and fails at the end.
                    progress.close()
                    print(f"{PROG}: {line}", file=sys.stderr)
                    failed += 1
                    continue
                read = reads[run]  # type: ignore[index]
                for record in read.records:
                    out.write(fmt.export_record(run, record) + "\n")
                if sealed is not None and read.position in paths:
                    inc = Inclusion(read.position, cp.size, sealed, tuple(paths[read.position]))
                    out.write(fmt.export_inclusion(run, inc) + "\n")
            progress.update(start + len(page))
        progress.close()
    if failed:
        print(f"{PROG}: {failed} run(s) FAILED and were left out of the export", file=sys.stderr)
    return 1 if failed else 0


async def cmd_demo(args: argparse.Namespace) -> int:
    target = args.target
    if target is None:
        return await run_demo(Path(args.dir or "."))
    if args.dir is not None:
        raise _Exit(2, "give --dir (for a new SQLite file) or a database URL, not both")
    try:
        return await run_demo(Path("."), target.url, shown=target.shown, from_env=args.url is None)
    except DemoRefused as exc:
        raise _Exit(2, str(exc)) from None


# -- the parser and main -------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _trust(text: str) -> tuple[str, bytes]:
    key_id, sep, hex_ = text.rpartition("=")
    try:
        public = bytes.fromhex(hex_)
    except ValueError:
        public = b""
    if not sep or not key_id or len(public) != 32:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KEY_ID=PUBLIC_KEY_HEX (64 hex digits of an Ed25519 public key)"
        )
    return key_id, public


def _note_key(text: str) -> NoteVerifier:
    from ._cli_notes import note_key  # argparse calls this before _load()

    return note_key(text)


Handler = Callable[[argparse.Namespace], Awaitable[int]]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each subcommand carries its own database options."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, verify and prove an agentplane journal on PostgreSQL or SQLite.",
        epilog=f"Start with `{PROG} demo`. Exit codes: 0 ok, 1 verification failed, "
        "2 usage, connection or schema error.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    database = argparse.ArgumentParser(add_help=False)
    group = database.add_argument_group("database")
    group.add_argument(
        "--url",
        help=f"database URL (default: ${URL_ENV}, else {DEFAULT_URL}); "
        "postgresql:// and sqlite:// get their async drivers",
    )
    group.add_argument("--tenant", default=DEFAULT_TENANT, help="tenant (default: %(default)s)")
    group.add_argument(
        "--schema",
        help="PostgreSQL schema holding the journal's tables (default: the database's "
        "default schema; see `upgrade --schema`)",
    )
    group.add_argument(
        "--origin",
        default="agentplane",
        help="the log's name in checkpoint notes (default: %(default)s; "
        "other tenants than 'default' get ORIGIN/TENANT)",
    )
    reads = argparse.ArgumentParser(add_help=False)
    reads.add_argument("--json", action="store_true", help="print JSON instead of text")
    replica = argparse.ArgumentParser(add_help=False)
    replica.add_argument(
        "--read-url",
        help=f"read from this replica of --url instead (default: ${READ_URL_ENV}); "
        "its answers may be behind the primary's, never inconsistent with them",
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    def add(name: str, summary: str, handler: Handler, *parents: argparse.ArgumentParser) -> Any:
        if database in parents and handler is not cmd_upgrade:
            parents = (*parents, replica)  # every command that reads a journal
        sub = commands.add_parser(name, help=summary, description=summary, parents=list(parents))
        sub.set_defaults(handler=handler, subparser=sub)
        return sub

    upgrade_cmd = add(
        "upgrade", "migrate the database to this version's schema", cmd_upgrade, database
    )
    upgrade_cmd.add_argument(
        "--sql",
        action="store_true",
        help="print the DDL for an empty database (of --url's dialect) instead of running it",
    )
    demo = add(
        "demo",
        "build a demo journal and show everything working (a new SQLite file by default)",
        cmd_demo,
    )
    demo.add_argument(
        "--url",
        help=f"an empty database to write the demo into (default: ${URL_ENV}, else a new "
        f"{_DEMO_FILE}); refused if it already holds journal rows",
    )
    demo.add_argument("--dir", help=f"where to create {_DEMO_FILE} (default: here)")
    runs = add(
        "runs", "list recent runs, or the runs concluded with an outcome", cmd_runs, database, reads
    )
    runs.add_argument("--outcome", help="only runs whose latest conclusion is OUTCOME")
    runs.add_argument("--limit", type=_positive, default=20, help="at most N runs (default 20)")
    show = add("show", "print a run's records", cmd_show, database, reads)
    show.add_argument("run", metavar="RUN", help="run id (run_<ULID>)")
    verify = add(
        "verify", "verify a run's chain and signatures, or every run's", cmd_verify, database, reads
    )
    verify.add_argument("run", metavar="RUN", nargs="?", help="run id (or --all)")
    verify.add_argument("--all", action="store_true", help="verify every run of the tenant")
    verify.add_argument(
        "--trust",
        metavar="KEY_ID=PUBLIC_KEY_HEX",
        type=_trust,
        action="append",
        default=[],
        help="trust an Ed25519 signer (repeatable)",
    )
    verify.add_argument(
        "--require-signature",
        action="store_true",
        help="fail any record without a trusted signature",
    )
    checkpoint = add(
        "checkpoint", "print the tenant's checkpoint note", cmd_checkpoint, database, reads
    )
    checkpoint.add_argument(
        "--sign-key-file",
        metavar="PATH",
        help="sign the note (C2SP signed note, Ed25519) with the 32-byte seed in PATH "
        "(raw, or 64 hex digits)",
    )
    checkpoint.add_argument(
        "--key-name",
        metavar="NAME",
        help="the signing key's name (default: the log's origin)",
    )
    add(
        "reindex-log",
        "rebuild the log's stored Merkle tree from the seals where they disagree (resumable)",
        cmd_reindex_log,
        database,
        reads,
    )
    signed = argparse.ArgumentParser(add_help=False)
    signed.add_argument(
        "--note-key",
        metavar="VKEY",
        type=_note_key,
        action="append",
        default=[],
        help="trust this verifier key (NAME+HASH+KEY) to have signed the saved note; "
        "a signed note needs one (repeatable)",
    )
    prove = add("prove", "prove a sealed run is in the log", cmd_prove, database, reads, signed)
    prove.add_argument("run", metavar="RUN", help="run id (run_<ULID>)")
    prove.add_argument(
        "--checkpoint",
        metavar="NOTE",
        help="a saved checkpoint note to prove against (text, or @file)",
    )
    consistency = add(
        "consistency",
        "prove the log extends a saved checkpoint note",
        cmd_consistency,
        database,
        reads,
        signed,
    )
    consistency.add_argument("old_note", metavar="OLD_NOTE", help="the saved note (text, or @file)")
    export = add(
        "export", "write a run or every run as verifiable JSON lines", cmd_export, database
    )
    export.add_argument("run", metavar="RUN", nargs="?", help="run id (or --all)")
    export.add_argument("--all", action="store_true", help="export every run of the tenant")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    args = build_parser().parse_args(argv)
    _load()
    if hasattr(args, "all") and (args.run is None) == (not args.all):
        args.subparser.error("give one RUN, or --all")
    if getattr(args, "require_signature", False) and not args.trust:
        args.subparser.error("--require-signature needs --trust KEY_ID=PUBLIC_KEY_HEX")
    target = None
    try:
        if args.handler is cmd_demo:
            # The demo's default is its own new file, not DEFAULT_URL; a URL it is given
            # may be a new SQLite file, which the demo creates.
            raw = args.url or os.environ.get(URL_ENV)
            target = args.target = None if raw is None else _target(raw, must_exist=False)
        elif hasattr(args, "url"):
            raw = args.url or os.environ.get(URL_ENV) or DEFAULT_URL
            target = args.target = _target(raw, must_exist=args.handler is not cmd_upgrade)
        if read_raw := getattr(args, "read_url", None) or (
            os.environ.get(READ_URL_ENV) if hasattr(args, "read_url") else None
        ):
            args.read_target = _target(read_raw, must_exist=True)
        return asyncio.run(args.handler(args))
    except _Exit as exc:
        return _fail(exc.code, exc.message, target)
    except CorruptRecordError as exc:
        return _fail(1, f"FAILED {exc}", target)
    except BrokenPipeError:
        # The reader went away (`export --all | head`): nothing left to say, nowhere to say it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (StoreError, ValueError, SQLAlchemyError, CommandError, OSError) as exc:
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        if isinstance(cause, OSError) and target is not None:
            return _fail(2, f"cannot connect to {target.shown}: {cause}", target)
        return _fail(2, str(exc), target)
    except KeyboardInterrupt:
        return 130


def _fail(code: int, message: str, target: _Target | None) -> int:
    """One line on stderr, never with a password in it."""
    text = (message.strip().splitlines() or ["failed"])[0]
    if target is not None and target.password:
        text = text.replace(target.password, "***")
    prefix = "error: " if code == 2 else ""
    print(f"{PROG}: {prefix}{_redact(text)}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
