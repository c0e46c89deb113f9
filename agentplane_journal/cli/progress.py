"""A progress line for long backup work: runs and records done, and the rate, on a terminal.

``export``, ``restore``, ``drill`` and ``verify-export`` take 25-85 s at 100,000 runs; an
operator at a terminal should see them move. The line goes to stderr, is redrawn in place
(``\\r``, then erase to the end of the line) at most every :data:`INTERVAL` seconds, and is
erased when the work ends, so the command's own output is what stays on screen. Nothing at
all is written when stderr is not a terminal (cron, CI, a pipe into a log) or with
``--json``: a machine reading the output must never find progress in it.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["INTERVAL", "Meter"]

INTERVAL = 0.2
"""Seconds between two redraws at most."""


class Meter:
    """``show(what, runs, records)`` while working, ``done()`` at the end (or on failure)."""

    def __init__(self, verb: str, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        isatty = getattr(self._stream, "isatty", None)
        self.enabled = not quiet and bool(isatty is not None and isatty())
        self._verb = verb
        self._start = time.monotonic()
        self._last = 0.0
        self._drawn = False
        self._what: str | None = None

    def show(self, what: str, runs: int, records: int, *, force: bool = False) -> None:
        """Redraw the line (throttled unless ``force`` or ``what`` changed): ``exporting
        'acme': 1,200 run(s), 3,600 record(s), 2,400 records/s`` (the rate is ``what``'s)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if what != self._what:  # the next tenant: drawn at once, its own rate
            self._what, self._start, force = what, now, True
        if not force and now - self._last < INTERVAL:
            return
        self._last = now
        elapsed = max(now - self._start, 1e-6)
        where = f" {what}" if what else ""
        self._stream.write(
            f"\r{self._verb}{where}: {runs:,} run(s), {records:,} record(s), "
            f"{records / elapsed:,.0f} records/s\x1b[K"
        )
        self._stream.flush()
        self._drawn = True

    def done(self) -> None:
        """Erase the line, so what the command prints next starts on a clean line."""
        if self._drawn:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._drawn = False
