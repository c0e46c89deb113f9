"""The backup commands: ``export`` (format 1), ``verify-export``, ``restore`` and ``drill``.

Thin: the format is :mod:`agentplane_journal.core.export_lines`, the verifier
:mod:`agentplane_journal.core.export_verify`, the writer and the replay
:mod:`agentplane_journal.journal.export` and :mod:`agentplane_journal.journal.restore`.
Exit codes: 0 sound/faithful, 1 a finding (or a root that differs), 2 usage, connection,
a refused restore.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli import notes
from agentplane_journal.cli.base import PROG, _Exit
from agentplane_journal.cli.db import _existing, _store
from agentplane_journal.core.checkpoint import Checkpoint
from agentplane_journal.core.export_verify import ExportVerifier, VerifyReport
from agentplane_journal.core.signing import Ed25519Verifier
from agentplane_journal.journal.export import write_export
from agentplane_journal.journal.restore import (
    RestoreIncomplete,
    RestoreRefused,
    RestoreReport,
    restore_export,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.migrations.commands import upgrade

__all__ = ["cmd_drill", "cmd_export_v1", "cmd_restore", "cmd_verify_export", "verify_file"]


async def cmd_export_v1(args: argparse.Namespace) -> int:
    """``export`` in format 1: every run (``--all``) or one, to stdout or ``--output``."""
    out_path = getattr(args, "output", None)
    async with _store(args) as store:
        runs = None if args.all else [await _existing(store, args.run)]
        with (
            Path(out_path).open("w", encoding="utf-8", newline="\n")  # noqa: ASYNC230
            if out_path
            else nullcontext(sys.stdout)
        ) as out:
            _, trailer = await write_export(store, out, runs)
    for item in trailer.unreadable:
        print(f"{PROG}: UNREADABLE {item.run}: {item.reason}", file=sys.stderr)
    return 1 if trailer.unreadable else 0


def verify_file(
    path: Path,
    expected: Checkpoint | None,
    trust: list[tuple[str, bytes]],
    *,
    agentplane_typed: bool = True,
) -> VerifyReport:
    """Stream the file at ``path`` through :class:`ExportVerifier`."""
    verifier = None
    if trust:
        verifier = Ed25519Verifier()
        for key_id, public in trust:
            verifier.trust(key_id, public)
    check = ExportVerifier(verifier, agentplane_typed=agentplane_typed)
    with path.open("rb") as f:
        for line in f:
            if not check.feed(line.rstrip(b"\n")):
                break
    return check.finish(expected)


def _print_verify(report: VerifyReport, as_json: bool) -> None:
    if as_json:
        fmt.print_json(report.to_json())
        return
    cp = report.checkpoint
    verdict = "SOUND" if report.is_sound else "FAILED"
    where = "" if cp is None else f" (log {cp.origin!r}, size {cp.size})"
    print(
        f"{verdict}: {len(report.sound)} run(s) recomputed exactly, {report.records} "
        f"record(s){where}"
    )
    for finding in report.findings:
        print(f"  finding: {finding}")
    for item in report.not_checked:
        print(f"  not checked: {item}")


async def cmd_verify_export(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():  # noqa: ASYNC240
        raise _Exit(2, f"no export file at {path}")
    expected = None
    if args.checkpoint:
        try:
            expected = notes.read_note(args.checkpoint, args.note_key).checkpoint
        except notes.NoteProblem as exc:
            raise _Exit(exc.code, exc.message) from None
    elif args.note_key:
        raise _Exit(2, "--note-key checks the signature of --checkpoint NOTE; give both")
    report = verify_file(path, expected, args.trust)
    _print_verify(report, args.json)
    return 0 if report.is_sound else 1


def _print_restore(report: RestoreReport, as_json: bool) -> None:
    if as_json:
        fmt.print_json(report.to_json())
        return
    e, r = report.expected, report.rebuilt
    verdict = "FAITHFUL" if report.is_faithful else "FAILED"
    print(
        f"{verdict}: {report.runs} run(s), {report.records} record(s); export root "
        f"{e.root.hex()} at size {e.size}, rebuilt root {r.root.hex()} at size {r.size}"
    )
    for item in report.not_carried:
        print(f"  not carried: {item}")


async def _restore(store: SqlJournalStore, path: Path) -> RestoreReport:
    try:
        return await restore_export(store, path)
    except RestoreRefused as exc:
        raise _Exit(2, f"restore refused, nothing written: {exc}") from None
    except RestoreIncomplete as exc:
        raise _Exit(1, f"restore FAILED: {exc}") from None


async def cmd_restore(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():  # noqa: ASYNC240
        raise _Exit(2, f"no export file at {path}")
    async with _store(args) as store:
        report = await _restore(store, path)
    _print_restore(report, args.json)
    return 0 if report.is_faithful else 1


async def cmd_drill(args: argparse.Namespace) -> int:
    """Export, verify the file against the live checkpoint, restore into a scratch database,
    compare roots. 0: the backup path works end to end; 1: it does not (the output says
    where); 2: it could not be run."""
    with tempfile.TemporaryDirectory(prefix="agentplane-drill-") as work:
        export_path = Path(work) / "export.jsonl"
        async with _store(args) as store:
            with export_path.open("w", encoding="utf-8", newline="\n") as out:
                cp, trailer = await write_export(store, out)
            tenant, origin = store.tenant, args.origin
        # this package's backup path: its own kinds (LangGraph, sessions) restore here, though
        # agentplane 0.22's typed decode cannot read them (verify-export reports that)
        verified = verify_file(export_path, cp, [], agentplane_typed=False)
        scratch = args.scratch_url or f"sqlite+aiosqlite:///{Path(work) / 'scratch.db'}"
        await upgrade(scratch, schema=args.schema)
        scratch_store = await SqlJournalStore.connect(
            scratch, tenant=tenant, origin=origin, schema=args.schema
        )
        try:
            restored = await _restore(scratch_store, export_path)
        finally:
            await scratch_store.close()
        size = export_path.stat().st_size
    ok = verified.is_sound and restored.is_faithful and not trailer.unreadable
    if args.json:
        fmt.print_json(
            {
                "ok": ok,
                "export_bytes": size,
                "unreadable": [{"run": str(u.run), "reason": u.reason} for u in trailer.unreadable],
                "verify": verified.to_json(),
                "restore": restored.to_json(),
            }
        )
    else:
        print(
            f"{'DRILL OK' if ok else 'DRILL FAILED'}: exported {trailer.runs_requested} run(s), "
            f"{trailer.records} record(s) ({size} bytes) at size {cp.size}"
        )
        for item in trailer.unreadable:
            print(f"  unreadable: {item.run}: {item.reason}")
        _print_verify(verified, False)
        _print_restore(restored, False)
    return 0 if ok else 1
