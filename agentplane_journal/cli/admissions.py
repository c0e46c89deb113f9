"""The admission-key commands: ``forget-admissions``, ``reindex-admissions``, and the check of
``run_admission`` against the records that ``verify --all`` runs.

``forget-admissions --older-than-days N`` retires the keys claimed more than ``N`` whole
days ago (``N`` >= 1, no default): **retiring a key reopens the door it closed**, so a
redelivery of its message after that admits a second run, and the window must exceed the
emitters' retry horizon, which only the operator knows. ``N`` = 0 is refused: it would
retire every key at once, which is not a window but a reset (delete the rows by hand if
that is really meant). ``reindex-admissions`` rebuilds the table from the ``RunAdmitted``
records (see :mod:`agentplane_journal.journal.admission_audit` for what it repairs, what
it reports, and that it claims retired keys again).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from typing import Any

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli.db import _store
from agentplane_journal.journal.admission_audit import AdmissionAudit, AdmissionFinding
from agentplane_journal.journal.store import SqlJournalStore

_DAY = 86_400


def _json(tenant: str, report: AdmissionAudit) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "ok": report.ok,
        "rows": report.rows,
        "admissions": report.admissions,
        "unclaimed": report.unclaimed,
        "shared": report.shared,
        "claimed": report.claimed,
        "removed": report.removed,
        "findings": [asdict(f) for f in report.findings],
        "notes": report.notes,
    }


def _finding_line(finding: AdmissionFinding) -> str:
    where = finding.run if finding.seq is None else f"{finding.run} seq {finding.seq}"
    key = "" if finding.key is None else f"key {finding.key!r} "
    done = " (removed)" if finding.repaired else ""
    return f"FAILED admission {key}({where}, {finding.what}){done}: {finding.detail}"


def admissions_line(result: dict[str, Any]) -> str:
    """The one line ``verify --all`` prints about the admission keys."""
    head = f"admission keys: {result['rows']} rows, {result['admissions']} keyed admissions" + (
        "" if result["ok"] else f", {len(result['findings'])} FAILED"
    )
    more = []
    if result["unclaimed"]:
        more.append(
            f"{result['unclaimed']} key(s) held by no row (retired by forget-admissions, or "
            "lost; `reindex-admissions` claims them again)"
        )
    if result["shared"]:
        more.append(f"{result['shared']} key(s) carried by several runs")
    return head + ("; " + "; ".join(more) if more else "; the table matches the records")


async def audit_admissions(store: SqlJournalStore, quiet: bool) -> dict[str, Any]:
    """``verify --all``'s check of ``run_admission`` against the records (findings, never a
    traceback); prints each finding unless ``quiet`` (``--json``)."""
    report = await store.audit_admissions()
    if not quiet:
        for finding in report.findings:
            print(_finding_line(finding))
    return _json(store.tenant, report)


async def cmd_forget_admissions(args: argparse.Namespace) -> int:
    days = args.older_than_days
    # Whole days before now by this machine's clock, which is the store's clock here; never
    # before the epoch (a window longer than that retires nothing).
    cutoff = max(int(time.time()) - days * _DAY, 0)
    async with _store(args) as store:
        retired = await store.forget_admissions(cutoff)
    result = {
        "tenant": store.tenant,
        "older_than_days": days,
        "older_than": cutoff,
        "retired": retired,
    }
    if args.json:
        fmt.print_json(result)
    else:
        print(
            f"retired {retired} admission key(s) of tenant {store.tenant!r} claimed before "
            f"{fmt.iso_time(cutoff)} ({days} day(s) ago): a redelivery of one of their "
            "messages now admits a new run"
        )
    return 0


async def cmd_reindex_admissions(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        report = await store.reindex_admissions()
    result = _json(store.tenant, report)
    if args.json:
        fmt.print_json(result)
    else:
        for finding in report.findings:
            print(_finding_line(finding))
        print(
            f"admission keys of tenant {store.tenant!r}: {report.rows} rows, "
            f"{report.admissions} keyed admissions; {report.claimed} key(s) claimed, "
            f"{report.removed} row(s) no record backs removed"
            + (f"; {report.shared} key(s) carried by several runs" if report.shared else "")
        )
    if not report.ok:
        kept = sum(not f.repaired for f in report.findings)
        print(
            f"FAILED {kept} finding(s) cannot be repaired from the records: a record that "
            "fails verification is not indexed, and a row whose run cannot be read is kept; "
            "`verify --all` names the runs",
            file=sys.stderr,
        )
        return 1
    return 0
