"""The commands about runs: ``upgrade``, ``demo``, ``runs``, ``steps``, ``show``, ``verify``.

Part of building the parser (argparse only); the handlers are in :mod:`.db`, :mod:`.steps`
and :mod:`.audit`.
"""

from __future__ import annotations

import argparse

from agentplane_journal.cli.options import (
    DEMO_FILE,
    URL_ENV,
    Add,
    Parents,
    positive,
    trust,
)

__all__ = ["add_database_commands", "add_reading_commands", "add_steps_command"]


def add_database_commands(add: Add, p: Parents) -> None:
    """The database and its runs: ``upgrade``, ``demo``, ``runs``."""
    database, reads = p.database, p.reads
    upgrade_cmd = add(
        "upgrade", "migrate the database to this version's schema", "cmd_upgrade", database
    )
    upgrade_cmd.add_argument(
        "url_given",
        nargs="?",
        metavar="URL",
        help="the database URL, as --url (either may name it)",
    )
    upgrade_cmd.add_argument(
        "--sql",
        action="store_true",
        help="print the DDL for an empty database (of --url's dialect) instead of running it",
    )
    demo = add(
        "demo",
        "build a demo journal and show everything working (a new SQLite file by default)",
        "cmd_demo",
    )
    demo.add_argument(
        "--url",
        help=f"an empty database to write the demo into (default: ${URL_ENV}, else a new "
        f"{DEMO_FILE}); refused if it already holds journal rows",
    )
    demo.add_argument("--dir", help=f"where to create {DEMO_FILE} (default: here)")
    runs = add(
        "runs",
        "list recent runs, or the runs concluded with an outcome",
        "cmd_runs",
        database,
        reads,
    )
    runs.add_argument("--outcome", help="only runs whose latest conclusion is OUTCOME")
    runs.add_argument("--limit", type=positive, default=20, help="at most N runs (default 20)")


def add_steps_command(add: Add, p: Parents) -> None:
    """Durable steps (:mod:`agentplane_journal.steps`): ``steps`` and its verbs."""
    database, reads = p.database, p.reads
    steps_cmd = add(
        "steps",
        "list open durable-steps runs (in flight, in doubt, abandoned, stopped, damaged); "
        "`steps settle RUN KEY`, `steps resume RUN`, `steps sweep` act on them",
        "cmd_steps",
        database,
        reads,
    )
    steps_cmd.add_argument(
        "verb",
        nargs="?",
        choices=["settle", "resume", "sweep"],
        help="settle RUN KEY: record a decision about an effect in doubt; resume RUN: run "
        "it on now; sweep: resume every abandoned run (--forever: keep sweeping)",
    )
    steps_cmd.add_argument("operands", nargs="*", metavar="RUN [KEY]", help=argparse.SUPPRESS)
    decision = steps_cmd.add_mutually_exclusive_group()
    decision.add_argument(
        "--landed", metavar="JSON", help="settle: the effect happened; its result, as JSON"
    )
    decision.add_argument(
        "--did-not-happen", action="store_true", help="settle: the effect did not happen"
    )
    steps_cmd.add_argument("--actor", help="settle: who decided (journaled with the decision)")
    steps_cmd.add_argument(
        "--app",
        metavar="MODULE:FUNCTION",
        help="resume/sweep: a function taking a Steps that registers your workflows and "
        "effects (the one your workers call)",
    )
    steps_cmd.add_argument(
        "--instance", help="resume/sweep/settle: this worker's name in leases (default: cli@HOST)"
    )
    steps_cmd.add_argument("--forever", action="store_true", help="sweep: until SIGTERM/SIGINT")
    steps_cmd.add_argument(
        "--reclaim-own",
        action="store_true",
        help="sweep: first take over at once the live leases naming --instance (a worker "
        "restarted under its own name); names must be unique per live process",
    )
    steps_cmd.add_argument(
        "--interval", type=float, default=5.0, help="sweep --forever: seconds between sweeps"
    )
    steps_cmd.add_argument(
        "--state",
        choices=["in_flight", "in_doubt", "abandoned", "stopped", "damaged"],
        help="only these",
    )
    steps_cmd.add_argument(
        "--limit", type=positive, default=100, help="among the N most recent runs (default 100)"
    )


def add_reading_commands(add: Add, p: Parents) -> None:
    """A run's records: ``show``, ``verify``."""
    database, reads = p.database, p.reads
    show = add("show", "print a run's records", "cmd_show", database, reads)
    show.add_argument("run", metavar="RUN", help="run id (run_<ULID>)")
    verify = add(
        "verify",
        "verify a run's chain and signatures, or every run's",
        "cmd_verify",
        database,
        reads,
    )
    verify.add_argument("run", metavar="RUN", nargs="?", help="run id (or --all)")
    verify.add_argument("--all", action="store_true", help="verify every run of the tenant")
    verify.add_argument(
        "--trust",
        metavar="KEY_ID=PUBLIC_KEY_HEX",
        type=trust,
        action="append",
        default=[],
        help="trust an Ed25519 signer (repeatable)",
    )
    verify.add_argument(
        "--require-signature",
        action="store_true",
        help="fail any record without a trusted signature",
    )
