"""Every logger at DEBUG, every record kept: for asserting that no secret reaches a log.

The push battery runs under :func:`debug_logging` (an autouse fixture in ``test_push.py``):
the root logger and every library logger the store runs through (``sqlalchemy`` and its
engine and pool loggers, ``aiosqlite``, ``asyncpg``, ``agentplane_journal``) are set to
DEBUG, and a handler on the root keeps each record as the text a handler would write (the
message with its arguments applied, and any traceback). SQLAlchemy sets its own loggers to
WARNING unless told otherwise, so "DEBUG on the root" alone would show nothing.
"""

from __future__ import annotations

import base64
import logging
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

LOGGERS = ("", "sqlalchemy", "sqlalchemy.engine", "sqlalchemy.pool", "aiosqlite", "asyncpg")
LOGGERS += ("agentplane_journal",)


class Capture(logging.Handler):
    """Keeps every record's formatted text; :meth:`paused` skips the test's own raw SQL."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._paused = False

    def emit(self, record: logging.LogRecord) -> None:
        if self._paused:
            return
        text = f"{record.name} {record.levelname} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        if record.stack_info:
            text += "\n" + record.stack_info
        self.lines.append(text)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Not an operation of the store: the test reading or writing rows with plain SQL."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@contextmanager
def debug_logging() -> Iterator[Capture]:
    capture = Capture()
    saved = {name: logging.getLogger(name).level for name in LOGGERS}
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    logging.getLogger().addHandler(capture)
    try:
        yield capture
    finally:
        logging.getLogger().removeHandler(capture)
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


_ACTIVE: list[Capture] = []


def current() -> Capture:
    """The capture of the running test (for pausing it around the test's own raw SQL)."""
    return _ACTIVE[-1]


@contextmanager
def no_secret_logged(secrets: Iterable[str], keys: Iterable[bytes]) -> Iterator[Capture]:
    """Every logger at DEBUG for the block; afterwards, fail if a record held a secret.

    ``secrets`` and ``keys`` are read when the block ends, so a test may add to them.
    """
    with debug_logging() as capture:
        _ACTIVE.append(capture)
        try:
            yield capture
        finally:
            _ACTIVE.remove(capture)
    found = leaks(capture.text, secrets, keys)
    assert not found, f"secrets in the DEBUG logs: {found}"


def forms_of(key: bytes) -> list[str]:
    """The ways key material could be printed: repr, hex (both cases), base64 of both kinds."""
    std = base64.b64encode(key).decode().rstrip("=")
    url = base64.urlsafe_b64encode(key).decode().rstrip("=")
    return [repr(key), key.hex(), key.hex().upper(), std, url]


def leaks(text: str, secrets: Iterable[str], keys: Iterable[bytes]) -> list[str]:
    """Which of ``secrets`` (and of the keys' printable forms) occur in ``text``."""
    found = [s for s in secrets if s in text]
    for key in keys:
        found += [f"key {form[:6]}..." for form in forms_of(key) if form in text]
    return found
