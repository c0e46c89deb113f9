"""The backup commands' arguments: export (format 1), tenants, verify-export, restore, drill.

Part of building the parser, so as light as :mod:`agentplane_journal.cli.main` (argparse
only: ``--help`` stays fast). ``export``, ``restore`` and ``drill`` cover every tenant of the
database unless ``--tenant`` names one (:func:`_every_tenant`); the handlers are in
:mod:`agentplane_journal.cli.backup` and :mod:`agentplane_journal.cli.restore`.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from typing import Any

from agentplane_journal.core.ids import DEFAULT_TENANT

__all__ = ["add_backup_commands"]


def add_backup_commands(
    add: Callable[..., Any],
    database: argparse.ArgumentParser,
    reads: argparse.ArgumentParser,
    signed: argparse.ArgumentParser,
    export: argparse.ArgumentParser,
    trust: Callable[[str], tuple[str, bytes]],
) -> None:
    """Export format 1 (agentplane 0.22's), its verifier, restore and the drill."""
    _add_export_options(export)
    add(
        "tenants",
        "list the database's tenants: wire profile, runs, records and log size",
        "cmd_tenants",
        database,
        reads,
    )
    _add_verify_export(add, signed, trust)
    _add_restore_commands(add, database, reads)


def _add_export_options(export: argparse.ArgumentParser) -> None:
    """``export``'s format-1 options: the format, the output, every tenant by default."""
    export.add_argument(
        "--format",
        choices=("agentplane", "journal"),
        default="agentplane",
        help="agentplane: agentplane 0.22's export format 1 (default; verify-export and "
        "restore read it); journal: this package's agentplane-journal-export/1 lines",
    )
    export.add_argument(
        "--output",
        "-o",
        metavar="PATH",
        help="write here instead of stdout; without --tenant (every tenant), a new or empty "
        "directory: one format-1 file per tenant and manifest.json",
    )
    every = (
        "(default: every tenant of the database; --format journal and a single RUN: "
        f"{DEFAULT_TENANT!r})"
    )
    _every_tenant(export, f"only this tenant, as one file {every}")


def _add_verify_export(
    add: Callable[..., Any],
    signed: argparse.ArgumentParser,
    trust: Callable[[str], tuple[str, bytes]],
) -> None:
    """``verify-export``: a file or a backup directory against checkpoints from outside it."""
    verify_export = add(
        "verify-export",
        "verify an export file (format 1) against a checkpoint from outside it",
        "cmd_verify_export",
        signed,
    )
    verify_export.add_argument(
        "file", metavar="PATH", help="the export (JSON lines), or a backup directory"
    )
    verify_export.add_argument(
        "--checkpoint",
        metavar="NOTE",
        action="append",
        help="the checkpoint note the export must be a copy of (text, or @file); without it "
        "deletion is reported as not checked. For a backup directory, repeat it, one per "
        "tenant's log (matched by the note's origin)",
    )
    verify_export.add_argument(
        "--trust",
        metavar="KEY_ID=PUBLIC_KEY_HEX",
        type=trust,
        action="append",
        default=[],
        help="check record signatures against this Ed25519 signer (repeatable)",
    )
    verify_export.add_argument("--json", action="store_true", help="print JSON instead of text")


def _add_restore_commands(
    add: Callable[..., Any], database: argparse.ArgumentParser, reads: argparse.ArgumentParser
) -> None:
    """``restore`` and ``drill`` (export, verify, restore into a scratch database)."""
    restore = add(
        "restore",
        "replay an export (format 1) into an empty database and compare roots",
        "cmd_restore",
        database,
        reads,
    )
    restore.add_argument(
        "file", metavar="PATH", help="the export (JSON lines), or a backup directory"
    )
    _every_tenant(
        restore,
        "restore a file into this tenant (default: 'default'); from a backup directory, only "
        "this tenant (default: every tenant, each into the tenant of its name)",
    )
    drill = add(
        "drill",
        "export, verify, restore into a scratch database and compare roots (a backup check)",
        "cmd_drill",
        database,
        reads,
    )
    _every_tenant(drill, "drill only this tenant (default: every tenant of the database)")
    drill.add_argument(
        "--scratch-url",
        metavar="URL",
        help="where to restore: a PostgreSQL database (the drill makes a new schema in it "
        "and drops it afterwards) or a SQLite file path that does not exist (made and "
        "deleted); default: a temporary SQLite file",
    )


def _every_tenant(sub: argparse.ArgumentParser, help_text: str) -> None:
    """Make ``sub``'s ``--tenant`` optional with no default: the command then covers every
    tenant (a backup of the whole database), and ``--tenant`` names one."""
    # The parent parsers' actions are shared by every subcommand: this one gets a copy.
    shared = sub._option_string_actions["--tenant"]
    own = copy.copy(shared)
    own.default, own.help = None, help_text
    sub._actions[sub._actions.index(shared)] = own
    for group in sub._action_groups:
        if shared in group._group_actions:
            group._group_actions[group._group_actions.index(shared)] = own
    for option in shared.option_strings:
        sub._option_string_actions[option] = own
