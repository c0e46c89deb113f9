"""The backup commands ``export`` (format 1) and ``verify-export``; ``tenants``.

Thin: the format is :mod:`agentplane_journal.exportfmt.lines`, the verifier
:mod:`agentplane_journal.exportfmt.verify`, the writer :mod:`agentplane_journal.journal.export`,
a whole-database backup (a directory: one format-1 file per tenant and a manifest)
:mod:`agentplane_journal.journal.backup`. ``restore`` and ``drill`` are in
:mod:`agentplane_journal.cli.restore`. Without ``--tenant`` these commands cover every tenant
of the database; with it, one tenant's single file, exactly as before.
Exit codes: 0 sound/faithful, 1 a finding (or a root that differs), 2 usage, connection,
a refused restore.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli import notes
from agentplane_journal.cli.base import PROG, _Exit
from agentplane_journal.cli.db import _existing
from agentplane_journal.cli.progress import Meter
from agentplane_journal.core.ids import DEFAULT_TENANT
from agentplane_journal.core.signing import Ed25519Verifier
from agentplane_journal.exportfmt.verify import ExportVerifier, VerifyReport
from agentplane_journal.journal.backup import (
    BackupProblem,
    export_database,
    member_problem,
    read_manifest,
)
from agentplane_journal.journal.export import write_export
from agentplane_journal.journal.export_seen import SpilledRuns
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.journal.tenants import list_tenants, tenant_size
from agentplane_journal.tlog.checkpoint import Checkpoint

__all__ = [
    "cmd_export_v1",
    "cmd_tenants",
    "cmd_verify_export",
    "open_database",
    "print_verify",
    "report_invalid",
    "verify_file",
]

_RUN_PREFIX = b'{"kind":"agentplane.export.run"'
_RECORD_PREFIX = b'{"seq":'


@asynccontextmanager
async def open_database(args: argparse.Namespace) -> AsyncIterator[SqlJournalStore]:
    """A handle on ``--url`` (its ``--tenant``, else ``default``); other tenants are reached
    with ``for_tenant``, which keeps ``--origin`` (tenant ``acme``'s log is ``ORIGIN/acme``)."""
    read = getattr(args, "read_target", None)
    store = await SqlJournalStore.connect(
        args.target.url,
        tenant=args.tenant or DEFAULT_TENANT,
        origin=args.origin,
        schema=args.schema,
        read_url=None if read is None else read.url,
    )
    try:
        yield store
    finally:
        await store.close()


async def cmd_tenants(args: argparse.Namespace) -> int:
    """``tenants``: every tenant with its wire profile, runs, records and log size."""
    async with open_database(args) as store:
        found = await list_tenants(store)
        rows = []
        for name in found.names:
            rows.append(
                await tenant_size(store if name == store.tenant else store.for_tenant(name))
            )
    report_invalid(found.invalid)
    code = 1 if found.invalid else 0
    if args.json:
        fmt.print_json([r.to_json() for r in rows])
        return code
    if not rows:
        print("no tenants: the database holds no records, seals or wire profiles")
        return code
    width = max(len(r.tenant) for r in rows)
    print(f"{'TENANT':<{width}}  {'PROFILE':<15}  {'RUNS':>9}  {'RECORDS':>10}  {'LOG SIZE':>9}")
    for r in rows:
        print(
            f"{r.tenant:<{width}}  {r.profile:<15}  {r.runs:>9}  {r.records:>10}  {r.log_size:>9}"
        )
    return code


def report_invalid(invalid: list[str]) -> None:
    """Name, on stderr, each stored tenant value that is no tenant name (exit 1 follows)."""
    for value in invalid:
        print(
            f"{PROG}: INVALID tenant {value}: rows are stored under a value that is not a tenant "
            "name (a table was edited); it is not covered",
            file=sys.stderr,
        )


# -- export ------------------------------------------------------------------------------


async def cmd_export_v1(args: argparse.Namespace) -> int:
    """``export`` in format 1: one tenant's file (``--tenant``, or a RUN), or with neither a
    whole-database backup directory (``--output DIR``)."""
    out_path = getattr(args, "output", None)
    if args.tenant is None and args.run is None:
        return await _export_database(args, out_path)
    meter = Meter("exporting", quiet=out_path is None and sys.stdout.isatty())
    async with open_database(args) as store:
        runs = None if args.all else [await _existing(store, args.run)]
        with (
            Path(out_path).open("w", encoding="utf-8", newline="\n")  # noqa: ASYNC230
            if out_path
            else nullcontext(sys.stdout)
        ) as out:
            try:
                _, trailer = await write_export(
                    store, out, runs, lambda n, r: meter.show(f"{store.tenant!r}", n, r)
                )
            finally:
                meter.done()
    for item in trailer.unreadable:
        print(f"{PROG}: UNREADABLE {item.run}: {item.reason}", file=sys.stderr)
    return 1 if trailer.unreadable else 0


async def _export_database(args: argparse.Namespace, out_path: str | None) -> int:
    if out_path is None:
        raise _Exit(
            2,
            "a backup of every tenant is a directory: give --output DIR (or --tenant NAME "
            "for one tenant's file, on stdout or --output FILE)",
        )
    directory = Path(out_path)
    if directory.suffix == ".jsonl" or directory.is_file():  # noqa: ASYNC240
        raise _Exit(
            2,
            f"{directory} names a file, and a backup of every tenant is a directory (one "
            "file per tenant and a manifest): give a directory, or --tenant NAME for one "
            "tenant's file",
        )
    meter = Meter("exporting")
    async with open_database(args) as store:
        found = await list_tenants(store)
        try:
            exported = await export_database(
                store,
                directory,
                found.names,
                lambda t, n, r: meter.show(f"{t!r}", n, r),
            )
        except BackupProblem as exc:
            raise _Exit(2, str(exc)) from None
        finally:
            meter.done()
    unreadable = 0
    for e in exported:
        m = e.member
        print(
            f"{m.tenant!r} ({m.profile}): {m.runs} run(s), {m.records} record(s), log size "
            f"{m.size} -> {directory / m.file}"
        )
        for item in e.trailer.unreadable:
            unreadable += 1
            print(f"{PROG}: UNREADABLE {m.tenant!r} {item.run}: {item.reason}", file=sys.stderr)
    print(f"exported {len(exported)} tenant(s) into {directory}")
    report_invalid(found.invalid)
    return 1 if unreadable or found.invalid else 0


# -- verify-export -------------------------------------------------------------------------


def verify_file(
    path: Path,
    expected: Checkpoint | None,
    trust: list[tuple[str, bytes]],
    meter: Meter | None = None,
    what: str = "",
    *,
    agentplane_typed: bool = True,
) -> VerifyReport:
    """Stream the file at ``path`` through :class:`ExportVerifier`."""
    verifier = None
    if trust:
        verifier = Ed25519Verifier()
        for key_id, public in trust:
            verifier.trust(key_id, public)
    runs = records = 0
    if meter is not None and not meter.enabled:
        meter = None  # nothing to draw: no per-line call
    # The runs met go to a scratch file past a few thousand: memory stays flat.
    with SpilledRuns() as seen, path.open("rb") as f:
        check = ExportVerifier(verifier, agentplane_typed=agentplane_typed, seen=seen)
        for line in f:
            if meter is not None:
                runs += line.startswith(_RUN_PREFIX)
                records += line.startswith(_RECORD_PREFIX)
                meter.show(what, runs, records)
            if not check.feed(line.rstrip(b"\n")):
                break
        return check.finish(expected)


def print_verify(report: VerifyReport, indent: str = "") -> None:
    cp = report.checkpoint
    verdict = "SOUND" if report.is_sound else "FAILED"
    where = "" if cp is None else f" (log {cp.origin!r}, size {cp.size})"
    print(
        f"{indent}{verdict}: {report.runs_sound} run(s) recomputed exactly, {report.records} "
        f"record(s){where}"
    )
    for finding in report.findings:
        print(f"{indent}  finding: {finding}")
    for item in report.not_checked:
        print(f"{indent}  not checked: {item}")


def _checkpoints(args: argparse.Namespace) -> list[Checkpoint]:
    given: list[str] = args.checkpoint or []
    if args.note_key and not given:
        raise _Exit(2, "--note-key checks the signature of --checkpoint NOTE; give both")
    found = []
    for value in given:
        try:
            found.append(notes.read_note(value, args.note_key).checkpoint)
        except notes.NoteProblem as exc:
            raise _Exit(exc.code, exc.message) from None
    return found


async def cmd_verify_export(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if path.is_dir():  # noqa: ASYNC240
        return _verify_backup(args, path)
    if not path.is_file():  # noqa: ASYNC240
        raise _Exit(2, f"no export file (or backup directory) at {path}")
    checkpoints = _checkpoints(args)
    if len(checkpoints) > 1:
        raise _Exit(2, "one export file is one log: give one --checkpoint")
    meter = Meter("verifying", quiet=args.json)
    try:
        report = verify_file(path, checkpoints[0] if checkpoints else None, args.trust, meter)
    finally:
        meter.done()
    if args.json:
        fmt.print_json(report.to_json())
    else:
        print_verify(report)
    return 0 if report.is_sound else 1


def _verify_backup(args: argparse.Namespace, directory: Path) -> int:
    """Every member of a backup directory: its bytes against the manifest, then its lines,
    each against the ``--checkpoint`` of its log (matched by origin) when one is given."""
    try:
        manifest = read_manifest(directory)
    except BackupProblem as exc:
        raise _Exit(2, str(exc)) from None
    by_origin: dict[str, Checkpoint] = {}
    for note in _checkpoints(args):
        if note.origin in by_origin:
            raise _Exit(2, f"two --checkpoint notes for log {note.origin!r}; give one per log")
        by_origin[note.origin] = note
    findings: list[str] = []
    not_checked: list[str] = []
    tenants: list[dict[str, Any]] = []
    reports: list[tuple[str, VerifyReport | None]] = []
    meter = Meter("verifying", quiet=args.json)
    for member in manifest.members:
        problem = member_problem(directory, member)
        if problem is not None:
            findings.append(problem)
            tenants.append({"tenant": member.tenant, "file": member.file, "sound": False})
            reports.append((f"tenant {member.tenant!r} ({member.file}): not read", None))
            continue
        expected = by_origin.pop(member.origin, None)
        try:
            report = verify_file(
                directory / member.file, expected, args.trust, meter, repr(member.tenant)
            )
        finally:
            meter.done()
        cp = report.checkpoint
        if cp is not None and (cp.origin, cp.size, cp.root.hex()) != (
            member.origin,
            member.size,
            member.root,
        ):
            findings.append(
                f"tenant {member.tenant!r}: the file's header checkpoint ({cp.origin!r}, size "
                f"{cp.size}) is not the one the manifest lists ({member.origin!r}, size "
                f"{member.size})"
            )
        tenants.append({"tenant": member.tenant, "file": member.file, **report.to_json()})
        reports.append((f"tenant {member.tenant!r} ({member.file}):", report))
        if not report.is_sound:
            findings.append(f"tenant {member.tenant!r}: {member.file} is not sound")
    for origin in by_origin:
        findings.append(
            f"a checkpoint of log {origin!r} was given, and the backup holds no tenant with "
            "that log: a tenant is missing from it"
        )
    if not args.checkpoint:
        not_checked.append(
            "that the backup holds every tenant (a manifest can be edited along with the "
            "files): give each tenant's --checkpoint NOTE"
        )
    sound = not findings
    if args.json:
        fmt.print_json(
            {
                "sound": sound,
                "backup": str(directory),
                "tenants": tenants,
                "findings": findings,
                "not_checked": not_checked,
            }
        )
    else:
        for title, one in reports:
            print(title)
            if one is not None:
                print_verify(one, "  ")
        print(
            f"{'SOUND' if sound else 'FAILED'}: backup of {len(manifest.members)} tenant(s) "
            f"in {directory}"
        )
        for finding in findings:
            print(f"  finding: {finding}")
        for item in not_checked:
            print(f"  not checked: {item}")
    return 0 if sound else 1
