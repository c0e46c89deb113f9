"""The commands about the log: ``checkpoint``, ``replication``, ``reindex-log``, ``prove``,
``consistency``, ``tiles export``, ``serve``, ``witness``, ``receipt``, ``verify-receipt``.

Part of building the parser (argparse only); the handlers are in :mod:`.log`,
:mod:`.replication`, :mod:`.tiles`, :mod:`.serve` and :mod:`.witness`.
"""

from __future__ import annotations

import argparse

from agentplane_journal.cli.options import (
    Add,
    Parents,
)

__all__ = [
    "add_checkpoint_commands",
    "add_proof_commands",
    "add_tiles_commands",
    "add_witness_commands",
]


def add_checkpoint_commands(add: Add, p: Parents) -> None:
    """The checkpoint and the stored tree: ``checkpoint``, ``replication``, ``reindex-log``."""
    database, reads = p.database, p.reads
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


def add_proof_commands(add: Add, p: Parents) -> None:
    """Proofs against a saved checkpoint note: ``prove``, ``consistency``."""
    database, reads, signed = p.database, p.reads, p.signed
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


def add_tiles_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], add: Add, p: Parents
) -> None:
    """The log as C2SP tlog-tiles (cli/tiles.py) and the audit page (cli/serve.py)."""
    database, reads, replica, log_key = p.database, p.reads, p.replica, p.log_key
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


def add_witness_commands(add: Add, p: Parents) -> None:
    """Witnesses and receipts (cli/witness.py): ``witness``, ``receipt``, ``verify-receipt``."""
    database, reads, log_key = p.database, p.reads, p.log_key
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
