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
them is imported. The parser is built from :mod:`.options` (the parent parsers and option
types every group shares) and one ``*_args`` module per group of commands (``runs_args``,
``log_args``, ``tenant_args``, ``backup_args``), argparse only, so ``--help`` stays fast.
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
from agentplane_journal.cli.log_args import (
    add_checkpoint_commands,
    add_proof_commands,
    add_tiles_commands,
    add_witness_commands,
)
from agentplane_journal.cli.options import (
    DEFAULT_URL,
    READ_URL_ENV,
    URL_ENV,
    shared_parents,
    trust,
)
from agentplane_journal.cli.runs_args import (
    add_database_commands,
    add_reading_commands,
    add_steps_command,
)
from agentplane_journal.cli.tenant_args import (
    add_admission_commands,
    add_erasure_commands,
    add_export_command,
    add_profile_commands,
)

if TYPE_CHECKING:
    # What _load() binds at run time, for the type checker.
    from alembic.util.exc import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    from agentplane_journal.cli.db import _target
    from agentplane_journal.errors import CorruptLogError, CorruptRecordError, StoreError

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
    p = shared_parents()
    database, replica = p.database, p.replica
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    def add(name: str, summary: str, handler: str, *parents: argparse.ArgumentParser) -> Any:
        if database in parents and handler != "cmd_upgrade":
            parents = (*parents, replica)  # every command that reads a journal
        sub = commands.add_parser(name, help=summary, description=summary, parents=list(parents))
        sub.set_defaults(handler=handler, subparser=sub)
        return sub

    add_database_commands(add, p)
    add_steps_command(add, p)
    add_reading_commands(add, p)
    add_checkpoint_commands(add, p)
    add_admission_commands(add, p)
    add_proof_commands(add, p)
    export = add_export_command(add, p)
    add_profile_commands(add, p)
    add_erasure_commands(add, p)
    add_tiles_commands(commands, add, p)
    add_witness_commands(add, p)
    add_backup_commands(add, database, p.reads, p.signed, export, trust)
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
