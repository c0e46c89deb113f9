"""The backup commands ``restore`` and ``drill``: a file or a whole-database backup, replayed.

``restore FILE`` replays one tenant's export into ``--tenant`` (``default``); ``restore DIR``
replays every tenant of a backup directory (or only ``--tenant``'s), each into the tenant of
its name, after checking every member file against the manifest and every target tenant
empty, so a backup that cannot be restored whole is refused with nothing written. ``drill``
takes such a backup, verifies each file against the checkpoint read from the database,
restores it into a scratch target made for the drill (:mod:`agentplane_journal.migrations.scratch`)
and compares roots; the scratch target is removed at the end, so the drill runs nightly.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli.backup import (
    open_database,
    print_verify,
    report_invalid,
    verify_file,
)
from agentplane_journal.cli.base import _Exit
from agentplane_journal.cli.progress import Meter
from agentplane_journal.exportfmt.backup_manifest import Member
from agentplane_journal.exportfmt.verify import VerifyReport
from agentplane_journal.journal.backup import BackupProblem, export_database, read_backup
from agentplane_journal.journal.restore import (
    RestoreIncomplete,
    RestoreRefused,
    RestoreReport,
    restore_export,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.journal.tenants import list_tenants, tenant_size
from agentplane_journal.migrations.scratch import ScratchRefused, leftover_schemas, scratch_target

__all__ = ["cmd_drill", "cmd_restore"]


def _print_restore(report: RestoreReport, indent: str = "") -> None:
    e, r = report.expected, report.rebuilt
    verdict = "FAITHFUL" if report.is_faithful else "FAILED"
    print(
        f"{indent}{verdict}: {report.runs} run(s), {report.records} record(s); export root "
        f"{e.root.hex()} at size {e.size}, rebuilt root {r.root.hex()} at size {r.size}"
    )
    for item in report.not_carried:
        print(f"{indent}  not carried: {item}")


async def _restore_one(
    store: SqlJournalStore, path: Path, meter: Meter, done: list[str]
) -> RestoreReport:
    what = repr(store.tenant)
    try:
        return await restore_export(store, path, lambda n, r: meter.show(what, n, r))
    except RestoreRefused as exc:
        if not done:
            raise _Exit(2, f"restore refused, nothing written: {exc}") from None
        raise _Exit(
            2,
            f"restore of {what} refused, nothing of it written (tenant(s) "
            f"{', '.join(map(repr, done))} were restored before it): {exc}",
        ) from None
    except RestoreIncomplete as exc:
        raise _Exit(1, f"restore FAILED: {exc}") from None
    finally:
        meter.done()


async def _refuse_occupied(store: SqlJournalStore, members: list[Member]) -> None:
    """Before anything is written: every tenant the backup restores must be empty."""
    present = set((await list_tenants(store)).names)
    busy = []
    for m in members:
        if m.tenant in present:
            size = await tenant_size(store.for_tenant(m.tenant))
            if size.records or size.log_size:
                busy.append(f"{m.tenant!r} ({size.runs} run(s), log size {size.log_size})")
    if busy:
        raise _Exit(
            2,
            f"restore refused, nothing written: the target already holds tenant(s) "
            f"{', '.join(busy)}; a restore rebuilds a history, it does not merge one — "
            "restore into a new database (`upgrade --url ...` first)",
        )


async def restore_backup(
    store: SqlJournalStore, directory: Path, tenant: str | None, meter: Meter
) -> list[tuple[Member, RestoreReport]]:
    """Restore the backup in ``directory`` (every member, or ``tenant``'s) into ``store``'s
    database, each member into the tenant of its name."""
    try:
        manifest = read_backup(directory)
    except BackupProblem as exc:
        raise _Exit(2, f"restore refused, nothing written: {exc}") from None
    members = manifest.members
    if tenant is not None:
        members = [m for m in members if m.tenant == tenant]
        if not members:
            names = ", ".join(repr(m.tenant) for m in manifest.members) or "none"
            raise _Exit(2, f"the backup holds no tenant {tenant!r} (it holds {names})")
    await _refuse_occupied(store, members)
    done: list[tuple[Member, RestoreReport]] = []
    for m in members:
        target = store if m.tenant == store.tenant else store.for_tenant(m.tenant)
        report = await _restore_one(target, directory / m.file, meter, [d.tenant for d, _ in done])
        done.append((m, report))
    return done


async def cmd_restore(args: argparse.Namespace) -> int:
    path = Path(args.file)
    meter = Meter("restoring", quiet=args.json)
    if path.is_dir():  # noqa: ASYNC240
        async with open_database(args) as store:
            done = await restore_backup(store, path, args.tenant, meter)
        faithful = all(r.is_faithful for _, r in done)
        if args.json:
            fmt.print_json(
                {
                    "faithful": faithful,
                    "tenants": [{"tenant": m.tenant, **r.to_json()} for m, r in done],
                }
            )
        else:
            for m, r in done:
                print(f"tenant {m.tenant!r}:")
                _print_restore(r, "  ")
            verdict = "FAITHFUL" if faithful else "FAILED"
            print(f"{verdict}: {len(done)} tenant(s) restored from {path}")
        return 0 if faithful else 1
    if not path.is_file():  # noqa: ASYNC240
        raise _Exit(2, f"no export file (or backup directory) at {path}")
    async with open_database(args) as store:
        report = await _restore_one(store, path, meter, [])
    if args.json:
        fmt.print_json(report.to_json())
    else:
        _print_restore(report)
    return 0 if report.is_faithful else 1


# -- drill ---------------------------------------------------------------------------------


@dataclass
class _Checked:
    member: Member
    unreadable: list[dict[str, str]]
    verify: VerifyReport
    restore: RestoreReport | None = None

    @property
    def ok(self) -> bool:
        restored = self.restore is not None and self.restore.is_faithful
        return self.verify.is_sound and restored and not self.unreadable


async def cmd_drill(args: argparse.Namespace) -> int:
    """Export (every tenant, or ``--tenant``), verify each file against the checkpoint read
    from the database, restore into a scratch target made for this drill, compare roots,
    remove the scratch target. 0: the backup path works end to end; 1: it does not (the
    output says where); 2: it could not be run."""
    quiet = args.json
    with tempfile.TemporaryDirectory(prefix="agentplane-drill-") as work:
        backup = Path(work) / "backup"
        meter = Meter("exporting", quiet=quiet)
        async with open_database(args) as store:
            found = await list_tenants(store)
            tenants = [args.tenant] if args.tenant else found.names
            invalid = [] if args.tenant else found.invalid
            try:
                exported = await export_database(
                    store, backup, tenants, lambda t, n, r: meter.show(repr(t), n, r)
                )
            finally:
                meter.done()
            source_url = args.target.url
        meter = Meter("verifying", quiet=quiet)
        checked: list[_Checked] = []
        for e in exported:
            try:
                # This package's backup path: its own kinds (LangGraph, sessions) restore
                # here, though agentplane 0.22's typed decode cannot read them
                # (verify-export reports that).
                verified = verify_file(
                    backup / e.member.file,
                    e.checkpoint,
                    [],
                    meter,
                    repr(e.member.tenant),
                    agentplane_typed=False,
                )
            finally:
                meter.done()
            unreadable = [{"run": str(u.run), "reason": u.reason} for u in e.trailer.unreadable]
            checked.append(_Checked(e.member, unreadable, verified))
        size = sum(e.member.bytes for e in exported)
        leftovers: list[str] = []
        try:
            async with scratch_target(args.scratch_url, source_url, Path(work)) as scratch:
                scratch_store = await SqlJournalStore.connect(
                    scratch.url, origin=args.origin, schema=scratch.schema
                )
                try:
                    done = await restore_backup(
                        scratch_store, backup, None, Meter("restoring", quiet=quiet)
                    )
                except _Exit as exc:
                    # The scratch target was made for this drill, so a refusal is about the
                    # backup it just wrote: the backup path does not work (1), not "not run".
                    raise _Exit(1, f"DRILL FAILED: {exc.message}") from None
                finally:
                    await scratch_store.close()
                if scratch.schema is not None:
                    leftovers = [
                        s for s in await leftover_schemas(scratch.url) if s != scratch.schema
                    ]
                shown = scratch.shown
        except ScratchRefused as exc:
            raise _Exit(2, f"drill not run: {exc}") from None
    for c, (_, report) in zip(checked, done, strict=True):
        c.restore = report
    ok = all(c.ok for c in checked) and not invalid
    _print_drill(args.json, ok, checked, size, shown, leftovers, invalid)
    report_invalid(invalid)
    return 0 if ok else 1


def _print_drill(
    as_json: bool,
    ok: bool,
    checked: list[_Checked],
    size: int,
    scratch: str,
    leftovers: list[str],
    invalid: list[str],
) -> None:
    runs = sum(c.member.runs for c in checked)
    records = sum(c.member.records for c in checked)
    if as_json:
        tenants: list[dict[str, Any]] = [
            {
                "tenant": c.member.tenant,
                "profile": c.member.profile,
                "ok": c.ok,
                "unreadable": c.unreadable,
                "verify": c.verify.to_json(),
                "restore": None if c.restore is None else c.restore.to_json(),
            }
            for c in checked
        ]
        fmt.print_json(
            {
                "ok": ok,
                "export_bytes": size,
                "runs": runs,
                "records": records,
                "scratch": scratch,
                "scratch_removed": True,
                "leftover_scratch_schemas": leftovers,
                "invalid_tenants": invalid,
                "tenants": tenants,
            }
        )
        return
    print(
        f"{'DRILL OK' if ok else 'DRILL FAILED'}: {len(checked)} tenant(s), exported {runs} "
        f"run(s), {records} record(s) ({size} bytes); restored into {scratch}, since removed"
    )
    for c in checked:
        m = c.member
        print(f"tenant {m.tenant!r} ({m.profile}), log size {m.size}:")
        for item in c.unreadable:
            print(f"    unreadable: {item['run']}: {item['reason']}")
        print_verify(c.verify, "  ")
        if c.restore is not None:
            _print_restore(c.restore, "  ")
    for schema in leftovers:
        print(
            f"  note: schema {schema} was left by a drill that was killed before it could "
            f"drop it; drop it with DROP SCHEMA {schema} CASCADE",
            file=sys.stderr,
        )
