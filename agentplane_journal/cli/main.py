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
``consistency`` check a signed note with ``--note-key`` (see ``cli/notes.py`` for the rules).

Exit codes: 0 ok; 1 something failed to verify (the output names the run and ``seq N``),
or a run that must be sealed is not; 2 a usage, connection or schema problem, reported on
stderr in one line (run ``agentplane-journal upgrade`` when the schema is behind); 3
``consistency`` or ``prove --checkpoint`` on a standby that has not yet replayed the saved
checkpoint ("this server is behind"): nothing was found wrong, retry or ask the primary; 4
``checkpoint --require-standby``: no standby received the checkpoint in time (not printed).

The commands live beside this module, by what they hold: ``db`` (the database
target, finding runs, ``upgrade``/``runs``/``show``), ``audit`` (``verify``, ``export``
and the export format), ``log`` (``checkpoint``, ``prove``, ``consistency``,
``reindex-log``), ``admissions`` (``forget-admissions``, ``reindex-admissions``), ``demo``
(``demo``); ``base`` is what ``main`` needs before any of
them is imported.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from agentplane_journal import __version__
from agentplane_journal.cli.backup_args import add_backup_commands
from agentplane_journal.cli.base import PROG, _Exit, _fail
from agentplane_journal.core.ids import DEFAULT_TENANT

if TYPE_CHECKING:
    # What _load() binds at run time, for the type checker.
    from alembic.util.exc import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    from agentplane_journal.cli.db import _target
    from agentplane_journal.errors import CorruptLogError, CorruptRecordError, StoreError
    from agentplane_journal.tlog.note import NoteVerifier

__all__ = ["build_parser", "main"]


def _load() -> None:
    """Import what ``main`` catches, once the command line has parsed.

    ``--help``, ``--version`` and usage errors need none of it, and SQLAlchemy, Alembic and
    cryptography cost most of a second to import: a shell expects ``--help`` at once. The
    command modules themselves are imported by :func:`_handler`, also after parsing.
    """
    global CommandError, SQLAlchemyError, CorruptLogError, CorruptRecordError, StoreError, _target
    from alembic.util.exc import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    from agentplane_journal.cli.db import _target
    from agentplane_journal.errors import CorruptLogError, CorruptRecordError, StoreError


URL_ENV = "AGENTPLANE_JOURNAL_URL"
READ_URL_ENV = "AGENTPLANE_JOURNAL_READ_URL"
DEFAULT_URL = "sqlite+aiosqlite:///agentplane_journal.db"

_DEMO_FILE = "agentplane-journal-demo.db"  # cli.demo.DEMO_FILE, without importing the store

# Each command's handler, by the module that holds it: imported only once a command runs.
_COMMANDS = {
    "cmd_upgrade": "db",
    "cmd_runs": "db",
    "cmd_show": "db",
    "cmd_demo": "db",
    "cmd_verify": "audit",
    "cmd_export": "audit",
    "cmd_checkpoint": "log",
    "cmd_prove": "log",
    "cmd_consistency": "log",
    "cmd_reindex_log": "log",
    "cmd_forget_admissions": "admissions",
    "cmd_reindex_admissions": "admissions",
    "cmd_profile": "profiles",
    "cmd_migrate_profile": "profiles",
    "cmd_erase": "erasure",
    "cmd_erasures": "erasure",
    # The log as C2SP tlog-tiles, and the audit page.
    "cmd_tiles_export": "tiles",
    "cmd_serve": "serve",
    "cmd_replication": "replication",
    "cmd_steps": "steps",
    "cmd_witness": "witness",
    "cmd_receipt": "witness",
    "cmd_verify_receipt": "witness",
    "cmd_verify_export": "backup",
    "cmd_tenants": "backup",
    "cmd_restore": "restore",
    "cmd_drill": "restore",
}

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def _handler(name: str) -> Handler:
    handler: Handler = getattr(importlib.import_module(f".{_COMMANDS[name]}", __package__), name)
    return handler


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
    from agentplane_journal.cli.notes import note_key  # argparse calls this before _load()

    return note_key(text)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each subcommand carries its own database options."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, verify and prove an agentplane journal on PostgreSQL or SQLite.",
        epilog=f"Start with `{PROG} demo`. Exit codes: 0 ok, 1 verification failed, "
        "2 usage, connection or schema error, 3 this server (a standby) is behind the saved "
        "checkpoint, 4 no standby received the checkpoint (--require-standby).",
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

    def add(name: str, summary: str, handler: str, *parents: argparse.ArgumentParser) -> Any:
        if database in parents and handler != "cmd_upgrade":
            parents = (*parents, replica)  # every command that reads a journal
        sub = commands.add_parser(name, help=summary, description=summary, parents=list(parents))
        sub.set_defaults(handler=handler, subparser=sub)
        return sub

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
        f"{_DEMO_FILE}); refused if it already holds journal rows",
    )
    demo.add_argument("--dir", help=f"where to create {_DEMO_FILE} (default: here)")
    runs = add(
        "runs",
        "list recent runs, or the runs concluded with an outcome",
        "cmd_runs",
        database,
        reads,
    )
    runs.add_argument("--outcome", help="only runs whose latest conclusion is OUTCOME")
    runs.add_argument("--limit", type=_positive, default=20, help="at most N runs (default 20)")
    # -- durable steps (agentplane_journal.steps) --
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
        "--limit", type=_positive, default=100, help="among the N most recent runs (default 100)"
    )
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
        "checkpoint", "print the tenant's checkpoint note", "cmd_checkpoint", database, reads
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
    checkpoint.add_argument(
        "--require-standby",
        metavar="SECONDS",
        nargs="?",
        const=10.0,
        type=float,
        help="hand the checkpoint out only once a streaming standby has received it "
        "(waits up to SECONDS, default 10; exit 4 if none did: a failover could lose it)",
    )
    add(
        "replication",
        "show what a failover could lose now: each standby's unflushed and unreplayed WAL "
        "(with --read-url, the sealed runs that standby lacks)",
        "cmd_replication",
        database,
        reads,
    )
    add(
        "reindex-log",
        "rebuild the log's stored Merkle tree from the seals where they disagree (resumable)",
        "cmd_reindex_log",
        database,
        reads,
    )
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
        type=_positive,
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
    prove = add("prove", "prove a sealed run is in the log", "cmd_prove", database, reads, signed)
    prove.add_argument("run", metavar="RUN", help="run id (run_<ULID>)")
    prove.add_argument(
        "--checkpoint",
        metavar="NOTE",
        help="a saved checkpoint note to prove against (text, or @file)",
    )
    consistency = add(
        "consistency",
        "prove the log extends a saved checkpoint note",
        "cmd_consistency",
        database,
        reads,
        signed,
    )
    consistency.add_argument("old_note", metavar="OLD_NOTE", help="the saved note (text, or @file)")
    export = add(
        "export",
        "write a run or every run as verifiable JSON lines (without --tenant: every tenant, "
        "into a backup directory)",
        "cmd_export",
        database,
    )
    export.add_argument("run", metavar="RUN", nargs="?", help="run id (or --all)")
    export.add_argument("--all", action="store_true", help="export every run of the tenant")
    # Wire profiles (docs/concepts/wire-profiles.md).
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
    # Erasure (cli/erasure.py, docs/concepts/erasure.md).
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
    erasures_cmd.add_argument("--limit", type=_positive, default=1000, help="at most N")
    # -- the log as C2SP tlog-tiles (cli/tiles.py), the audit page (cli/serve.py), witnesses
    # and receipts (cli/witness.py): the same log key options --
    log_key = argparse.ArgumentParser(add_help=False)
    log_key.add_argument(
        "--sign-key-file",
        metavar="PATH",
        required=True,
        help="sign checkpoints (C2SP signed note, Ed25519) with the 32-byte seed in PATH "
        "(raw, or 64 hex digits), as for `checkpoint`",
    )
    log_key.add_argument(
        "--key-name", metavar="NAME", help="the signing key's name (default: the log's origin)"
    )
    tiles = commands.add_parser(
        "tiles", help="the log as C2SP tlog-tiles", description="the log as C2SP tlog-tiles"
    )
    tiles_commands = tiles.add_subparsers(title="commands", metavar="COMMAND", required=True)
    summary = "write the tenant's log into DIR as tlog-tiles (incremental: only new tiles)"
    tiles_export = tiles_commands.add_parser(
        "export",
        help=summary,
        description=summary,
        parents=[database, reads, replica, log_key],
    )
    tiles_export.set_defaults(handler="cmd_tiles_export", subparser=tiles_export)
    tiles_export.add_argument(
        "dir", metavar="DIR", help="the directory (DIR/checkpoint, DIR/tile/...)"
    )
    serve = add(
        "serve",
        "serve every tenant's log as tlog-tiles under /<tenant>/, and the audit page",
        "cmd_serve",
        database,
        log_key,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8080, help="port (default: %(default)s)")
    serve.add_argument(
        "--reader-token-file",
        metavar="PATH",
        help="'TENANT TOKEN' lines ('*' for every tenant): who may read tenants' runs and "
        "records on the audit page (default: nobody; tiles and checkpoints are public)",
    )
    witness = add(
        "witness",
        "sign the checkpoint, ask the policy's witnesses to cosign it, store the "
        "cosignatures and report the quorum",
        "cmd_witness",
        database,
        reads,
        log_key,
    )
    witness.add_argument(
        "--policy", metavar="POLICY", required=True, help="a c2sp.org/tlog-policy file"
    )
    witness.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per witness request (default 10)"
    )
    receipt = add(
        "receipt",
        "write a sealed run's offline proof (c2sp.org/tlog-proof@v1) with its cosignatures",
        "cmd_receipt",
        database,
        log_key,
    )
    receipt.add_argument("run", metavar="RUN", help="run id (run_<ULID>)")
    receipt.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    verify_receipt = add(
        "verify-receipt",
        "check a receipt offline against a c2sp.org/tlog-policy (no database)",
        "cmd_verify_receipt",
    )
    verify_receipt.add_argument("file", metavar="FILE", help="the receipt ('-': stdin)")
    verify_receipt.add_argument(
        "--policy", metavar="POLICY", required=True, help="a c2sp.org/tlog-policy file"
    )
    verify_receipt.add_argument(
        "--run",
        metavar="RUN",
        help="fail if it names another run (that it names RUN stays its claim: the run id "
        "is not in the log's leaf)",
    )
    verify_receipt.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_backup_commands(add, database, reads, signed, export, _trust)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (the console script exits with it)."""
    args = build_parser().parse_args(argv)
    _load()
    if hasattr(args, "all") and (args.run is None) == (not args.all):
        args.subparser.error("give one RUN, or --all")
    if getattr(args, "require_signature", False) and not args.trust:
        args.subparser.error("--require-signature needs --trust KEY_ID=PUBLIC_KEY_HEX")
    if given := getattr(args, "url_given", None):
        if args.url not in (None, given):
            args.subparser.error("give the URL once: as URL or as --url")
        args.url = given
    target = None
    try:
        if args.handler == "cmd_demo":
            # The demo's default is its own new file, not DEFAULT_URL; a URL it is given
            # may be a new SQLite file, which the demo creates.
            raw = args.url or os.environ.get(URL_ENV)
            target = args.target = None if raw is None else _target(raw, must_exist=False)
        elif hasattr(args, "url"):
            raw = args.url or os.environ.get(URL_ENV) or DEFAULT_URL
            target = args.target = _target(raw, must_exist=args.handler != "cmd_upgrade")
        if read_raw := getattr(args, "read_url", None) or (
            os.environ.get(READ_URL_ENV) if hasattr(args, "read_url") else None
        ):
            args.read_target = _target(read_raw, must_exist=True)
        return asyncio.run(_handler(args.handler)(args))
    except _Exit as exc:
        return _fail(exc.code, exc.message, target)
    except (CorruptRecordError, CorruptLogError) as exc:  # a finding, not a usage error
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


if __name__ == "__main__":
    sys.exit(main())
