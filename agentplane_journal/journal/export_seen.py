"""The runs an export's reader has met, exact and in bounded memory: a set, then a scratch file.

``verify-export`` and restore's pass one must name a run's second block (each block alone
verifies, and a restore would replay both), so they remember every run met. A set costs a
run id per run (~100 B), which is what kept their memory growing with the file; a
probabilistic filter would be bounded but could miss a repeat and call the file SOUND. So
:class:`SpilledRuns` keeps the first :data:`KEPT` in a set and then moves them to a private
temporary SQLite database (``sqlite3.connect("")``: on disk, deleted when closed, its page
cache bounded): exact, and flat. A run id above every one met so far cannot be a repeat, so
it is only queued and written in batches; any other is looked up (``INSERT OR IGNORE``, one
statement). Run ids are ULIDs, roughly in creation order, so a file in log order mostly
takes the queue.

This is a scratch file of the reader's, not the journal's database (which only the store
speaks to); it holds run ids that are in the export file anyway.
"""

from __future__ import annotations

import sqlite3
from types import TracebackType

__all__ = ["KEPT", "SpilledRuns"]

KEPT = 4096
"""Run ids held in memory before the rest go to the scratch file (small files never open it)."""


class SpilledRuns:
    """:class:`~agentplane_journal.exportfmt.settle.SeenRuns`, spilling past :data:`KEPT`.
    Use it as a context manager (or call :meth:`close`), which deletes the scratch file."""

    def __init__(self, kept: int | None = None) -> None:
        self._kept = KEPT if kept is None else kept
        self._runs: set[str] | None = set()
        self._db: sqlite3.Connection | None = None
        self._max = ""  # the highest run id met (every id is above "")
        self._queued: list[tuple[str]] = []  # ids above every earlier one, not yet written

    def add(self, run: str) -> bool:
        runs = self._runs
        if runs is not None:
            if run in runs:
                return False
            runs.add(run)
            if len(runs) > self._kept:
                self._spill(runs)
            return True
        db = self._db
        if db is None:
            raise RuntimeError("SpilledRuns used after close(): what it held is gone")
        if run > self._max:  # above everything met: new, no lookup needed
            self._max = run
            self._queued.append((run,))
            if len(self._queued) >= self._kept:
                self._write(db)
            return True
        self._write(db)
        return db.execute("INSERT OR IGNORE INTO seen VALUES (?)", (run,)).rowcount == 1

    def _write(self, db: sqlite3.Connection) -> None:
        # Plain INSERT: a queued id above every earlier one cannot conflict (if it ever
        # did, the IntegrityError says this module is wrong rather than miscounting).
        if self._queued:
            db.executemany("INSERT INTO seen VALUES (?)", self._queued)
            self._queued = []

    def _spill(self, runs: set[str]) -> None:
        # One transaction for the life of the file: nothing here must survive a crash, so
        # there is no journal and no sync; the page cache is SQLite's default (~2 MiB).
        db = sqlite3.connect("", isolation_level=None)
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("CREATE TABLE seen (run TEXT PRIMARY KEY) WITHOUT ROWID")
        db.execute("BEGIN")
        db.executemany("INSERT INTO seen VALUES (?)", ((r,) for r in runs))
        self._db, self._runs, self._max = db, None, max(runs)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()  # the private temporary database is deleted with it
            self._db = None
        self._runs, self._queued = None, []

    def __enter__(self) -> SpilledRuns:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
