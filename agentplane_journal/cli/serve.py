"""``serve``: the logs over HTTP (C2SP tlog-tiles) and the audit page, with uvicorn.

Needs the ``serve`` extra (``pip install 'agentplane_journal[serve]'``: Starlette and
uvicorn); without it the command says so and exits 2. The app itself is
:mod:`agentplane_journal.web.app`.
"""

from __future__ import annotations

import argparse
import os
import socket
import stat
import sys
from pathlib import Path

from agentplane_journal.cli import notes as notes
from agentplane_journal.cli.base import PROG, _Exit
from agentplane_journal.cli.db import _store
from agentplane_journal.tlog.note import NoteSigner
from agentplane_journal.web.readers import Readers, parse_readers

__all__ = ["cmd_serve"]


def _readers(path: str | None) -> Readers:
    """The reader tokens of ``--reader-token-file`` (none without it)."""
    if path is None:
        return Readers()
    try:
        text = Path(path).read_text(encoding="utf-8")
        mode = os.stat(path).st_mode
    except (OSError, UnicodeDecodeError) as exc:
        raise _Exit(2, f"cannot read the reader token file {path}: {exc}") from None
    try:
        readers = parse_readers(text)
    except ValueError as exc:
        raise _Exit(2, f"the reader token file {path}: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(
            f"agentplane-journal: warning: the reader token file {path} is readable by other "
            "users; chmod 600 it",
            file=sys.stderr,
        )
    return readers


async def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from agentplane_journal.web.access_log import AccessLog
        from agentplane_journal.web.app import make_app
    except ImportError as exc:
        raise _Exit(
            2,
            f"serve needs the 'serve' extra ({exc.name} is missing): "
            "pip install 'agentplane_journal[serve]'",
        ) from None
    async with _store(args) as store:
        keys: dict[str, NoteSigner] = {}

        def signer_for(origin: str) -> NoteSigner:
            # The log's key name SHOULD be its origin (c2sp.org/tlog-checkpoint).
            name = args.key_name or origin
            if name not in keys:
                if len(keys) >= 4096:  # one per tenant asked for: bounded
                    keys.clear()
                try:
                    keys[name] = notes.load_signer(args.sign_key_file, name)
                except notes.NoteProblem as exc:
                    # A tenant whose origin is no key name: that log is not served (404).
                    raise ValueError(exc.message) from None
            return keys[name]

        try:
            signer_for(store.origin)  # a bad key file fails now, not at the first request
        except ValueError as exc:
            raise _Exit(2, str(exc)) from None
        app = AccessLog(make_app(store, signer_for, _readers(args.reader_token_file)))
        config = uvicorn.Config(
            app, host=args.host, port=args.port, log_level="warning", access_log=False
        )

        class Server(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets)
                if self.started:  # bound: say where (the real port, even for --port 0)
                    _say_address(self)

        await Server(config).serve()
    return 0


def _say_address(server: object) -> None:
    """One line per listening socket: ``agentplane-journal: serving on http://HOST:PORT/``."""
    for listener in getattr(server, "servers", []):
        for sock in listener.sockets:
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            print(
                f"{PROG}: serving on http://{shown}:{port}/ (each request logged below; "
                "Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )
