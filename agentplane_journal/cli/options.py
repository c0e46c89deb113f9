"""What every group of commands shares: the environment's defaults, the option types, and
the parent parsers that carry the database, read, replica, signed-note and log-key options.

Part of building the parser, so argparse only (``--help`` stays fast); the commands are added
by :mod:`.runs_args`, :mod:`.log_args`, :mod:`.tenant_args` and :mod:`.backup_args`, in the
order :func:`agentplane_journal.cli.main.build_parser` gives.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentplane_journal.core.ids import DEFAULT_TENANT

if TYPE_CHECKING:
    from agentplane_journal.tlog.note import NoteVerifier

__all__ = [
    "DEFAULT_URL",
    "DEMO_FILE",
    "READ_URL_ENV",
    "URL_ENV",
    "Add",
    "Parents",
    "note_key",
    "positive",
    "shared_parents",
    "trust",
]

URL_ENV = "AGENTPLANE_JOURNAL_URL"
READ_URL_ENV = "AGENTPLANE_JOURNAL_READ_URL"
DEFAULT_URL = "sqlite+aiosqlite:///agentplane_journal.db"

DEMO_FILE = "agentplane-journal-demo.db"  # cli.demo.DEMO_FILE, without importing the store

#: ``build_parser``'s ``add(name, summary, handler, *parents)``: a subcommand, its handler's
#: name and its parent parsers (a command given ``database`` also gets ``replica``).
Add = Callable[..., Any]


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def trust(text: str) -> tuple[str, bytes]:
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


def note_key(text: str) -> NoteVerifier:
    from agentplane_journal.cli.notes import note_key  # argparse calls this before _load()

    return note_key(text)


@dataclass(frozen=True)
class Parents:
    """The parent parsers subcommands take their shared options from."""

    #: --url, --tenant, --schema, --origin
    database: argparse.ArgumentParser
    #: --json
    reads: argparse.ArgumentParser
    #: --read-url (added by ``add`` to every command that reads a journal)
    replica: argparse.ArgumentParser
    #: --note-key (a signed checkpoint note's verifier keys)
    signed: argparse.ArgumentParser
    #: --sign-key-file, --key-name (the log's checkpoint signer)
    log_key: argparse.ArgumentParser


def shared_parents() -> Parents:
    """The parent parsers, new for each parser (argparse shares their actions)."""
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
    signed = argparse.ArgumentParser(add_help=False)
    signed.add_argument(
        "--note-key",
        metavar="VKEY",
        type=note_key,
        action="append",
        default=[],
        help="trust this verifier key (NAME+HASH+KEY) to have signed the saved note; "
        "a signed note needs one (repeatable)",
    )
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
    return Parents(database, reads, replica, signed, log_key)
