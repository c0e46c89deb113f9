"""What ``main`` needs before any command module is imported: the exit it ends with.

A command raises :class:`_Exit` for a usage, connection or verification failure it has
already put in words; ``main`` prints it with :func:`_fail`, on one line, never with a
password in it. Nothing here imports SQLAlchemy, Alembic or cryptography, so that
``agentplane-journal --help`` stays fast (see ``cli._load``).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

PROG = "agentplane-journal"


class _Exit(Exception):
    """End the command with ``code`` and a one-line ``message`` on stderr."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- the database target -------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    url: str  # with the password: for connecting only
    shown: str  # without it: for every message
    password: str | None


def _redact(text: str) -> str:
    """Hide ``user:password@`` in a string that may not even parse as a URL."""
    return re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", text)


def _fail(code: int, message: str, target: _Target | None) -> int:
    """One line on stderr, never with a password in it."""
    text = (message.strip().splitlines() or ["failed"])[0]
    if target is not None and target.password:
        text = text.replace(target.password, "***")
    prefix = "error: " if code == 2 else ""
    print(f"{PROG}: {prefix}{_redact(text)}", file=sys.stderr)
    return code
