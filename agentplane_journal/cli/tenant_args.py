"""The commands about a tenant's data: ``forget-admissions``, ``reindex-admissions``,
``export``, ``profile``, ``migrate-profile``, ``erase``, ``erasures``.

Part of building the parser (argparse only); the handlers are in :mod:`.admissions`,
:mod:`.audit`, :mod:`.profiles` and :mod:`.erasure` (``export``'s format-1 options:
:mod:`.backup_args`).
"""

from __future__ import annotations

import argparse

from agentplane_journal.cli.options import (
    Add,
    Parents,
    positive,
)

__all__ = [
    "add_admission_commands",
    "add_erasure_commands",
    "add_export_command",
    "add_profile_commands",
]


def add_admission_commands(add: Add, p: Parents) -> None:
    """Admission keys: ``forget-admissions``, ``reindex-admissions``."""
    database, reads = p.database, p.reads
    forget = add(
        "forget-admissions",
        "retire the admission keys claimed more than N days ago (a redelivery of their "
        "messages then admits a new run)",
        "cmd_forget_admissions",
        database,
        reads,
    )
    forget.add_argument(
        "--older-than-days",
        metavar="N",
        type=positive,
        required=True,
        help="retire keys claimed more than N whole days ago (N >= 1, no default: choose a "
        "window longer than your emitters retry)",
    )
    add(
        "reindex-admissions",
        "rebuild the admission keys from the RunAdmitted records where they disagree",
        "cmd_reindex_admissions",
        database,
        reads,
    )


def add_export_command(add: Add, p: Parents) -> argparse.ArgumentParser:
    """``export`` (returned: :mod:`.backup_args` adds its format-1 options)."""
    database = p.database
    export: argparse.ArgumentParser = add(
        "export",
        "write a run or every run as verifiable JSON lines (without --tenant: every tenant, "
        "into a backup directory)",
        "cmd_export",
        database,
    )
    export.add_argument("run", metavar="RUN", nargs="?", help="run id (or --all)")
    export.add_argument("--all", action="store_true", help="export every run of the tenant")
    return export


def add_profile_commands(add: Add, p: Parents) -> None:
    """Wire profiles (docs/concepts/wire-profiles.md): ``profile``, ``migrate-profile``."""
    database, reads = p.database, p.reads
    add("profile", "print the tenant's wire profile", "cmd_profile", database, reads)
    migrate_profile = add(
        "migrate-profile",
        "record another wire profile for the tenant from now on (written records keep theirs)",
        "cmd_migrate_profile",
        database,
        reads,
    )
    migrate_profile.add_argument(
        "profile", metavar="PROFILE", choices=["agentplane-0.4", "agentplane-0.22"]
    )


def add_erasure_commands(add: Add, p: Parents) -> None:
    """Erasure (cli/erasure.py, docs/concepts/erasure.md): ``erase``, ``erasures``."""
    database, reads = p.database, p.reads
    erase = add(
        "erase",
        "destroy an erasure scope's wrapping key and journal the erasure",
        "cmd_erase",
        database,
        reads,
    )
    erase.add_argument("scope", metavar="SCOPE", help="the scope, e.g. TENANT/run_<ULID>")
    erase.add_argument("--by", required=True, help="who asked (journaled with the erasure)")
    erase.add_argument("--reason", help="why (journaled with the erasure)")
    erase.add_argument(
        "--key-file", metavar="PATH", help="the scope keys (default: $AGENTPLANE_JOURNAL_KEY_FILE)"
    )
    erasures_cmd = add(
        "erasures", "list the tenant's journaled erasures", "cmd_erasures", database, reads
    )
    erasures_cmd.add_argument("--limit", type=positive, default=1000, help="at most N")
