"""What restore's pass one established, kept in order for pass two: a private scratch file.

Pass one (:mod:`~agentplane_journal.journal.restore_check`) reads every line, judges the file
and works out each record exactly as the store's ``append`` would write it: the canonical
bytes it compared with the line's (they are equal, or the file is refused), the hash it
chained over them from the run's first record, ``seq``, ``epoch``, ``kind``, the effect key
and case the store indexes, the admission key it claims and the outcome it concludes with.
Pass two used to read the file again and redo all of it (two JSON parses, two
canonicalisations and a hash per record). Now pass one writes those facts here and pass two
writes rows from them, so the second pass costs what writing costs.

The spool is an anonymous temporary file (``tempfile.TemporaryFile``: created by this
process, mode 0600, unlinked at once, gone when closed), written in pickled chunks of
:data:`CHUNK` entries, so memory is a chunk whatever the file's size. It is trusted as this
process's own memory is, and unlike the export file, which can change between the passes,
or a row read back from the target, which another writer can edit: nothing pass two writes
comes from anywhere but pass one's checks.

Entries, in file order: ``(run_ulid, index)`` for each run block (``index`` ``None``: open),
and :data:`Spooled` for each record of the block before it.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["CHUNK", "Spool", "Spooled"]

CHUNK = 1024
"""Entries per pickled chunk: what either pass holds of the spool at a time."""

Spooled = tuple[int, int, str, str | None, str | None, bytes, bytes, bytes, str | None, str | None]
"""A record as pass one established it: ``(seq, epoch, kind, effect_key, case_id, prev_hash,
hash, raw, admission_key, outcome)``; the effect key and case in their column forms (hex, the
case's text), ``raw`` the canonical bytes, ``hash`` SHA-256 over ``prev_hash || raw``,
``outcome`` a ``RunSealed`` record's."""


class Spool:
    """Entries appended in order (:meth:`block`, :meth:`record`), then read back once
    (:meth:`entries`). Use it as a context manager, or call :meth:`close`."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = tempfile.TemporaryFile(prefix="agentplane-restore-")
        self._chunk: list[tuple[Any, ...]] = []

    def block(self, run_ulid: str, index: int | None) -> None:
        self._add((run_ulid, index))

    def record(self, entry: Spooled) -> None:
        # _add's body, inline: called once per record of the file.
        chunk = self._chunk
        chunk.append(entry)
        if len(chunk) >= CHUNK:
            self._flush()

    def _add(self, entry: tuple[Any, ...]) -> None:
        chunk = self._chunk
        chunk.append(entry)
        if len(chunk) >= CHUNK:
            self._flush()

    def _flush(self) -> None:
        if self._chunk:
            pickle.dump(self._chunk, self._open(), protocol=pickle.HIGHEST_PROTOCOL)
            self._chunk = []

    def _open(self) -> IO[bytes]:
        if self._file is None:
            raise RuntimeError("the restore spool was used after close(): what it held is gone")
        return self._file

    def entries(self) -> Iterator[tuple[Any, ...]]:
        """Every entry in the order given: a block ``(run_ulid, index)`` (its first member a
        ``str``) or a :data:`Spooled` record (its first member the ``int`` seq)."""
        self._flush()
        f = self._open()
        f.flush()
        f.seek(0)
        while True:
            try:
                chunk: list[tuple[Any, ...]] = pickle.load(f)  # this process's own file
            except EOFError:
                return
            yield from chunk

    def close(self) -> None:
        """Delete the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._chunk = []

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
