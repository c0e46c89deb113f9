"""Every answer means what it says, on the hot paths too (issue 18).

``BackendError`` is "refused, nothing written"; ``CommitUnknownError`` is "may have
landed", so it is for a COMMIT (or an autocommitted write) that was sent and lost, never for
a read, and never for a failure before anything was sent. Here, against real databases:

* one append that cannot be written (a record over the size limit) fails alone in the
  SQLite writer's commit group, and the group's other appends commit;
* a full database (``PRAGMA max_page_count``) or a full disk (a tiny tmpfs, in a mount
  namespace of its own) during a SQLite group says so, and what it says is true: nothing
  of the refused appends is in the database;
* a read whose connection the server dropped, before or after its statement, is never
  ``CommitUnknownError``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from agentplane_journal import (
    Append,
    BackendError,
    CommitUnknownError,
    RecordTooLargeError,
    RunId,
    SqlJournalStore,
)

from helpers import note

#: Over the 1 MiB limit once canonicalised with the rest of its body.
OVERSIZE = "x" * (1 << 20)


async def test_an_oversize_append_fails_alone_in_a_sqlite_group(
    sqlite_database: Callable[..., str],
) -> None:
    store = await SqlJournalStore.connect(sqlite_database(), group_commit=True)
    try:
        runs = [RunId.generate() for _ in range(10)]
        fresh = RunId.generate()  # a run this process has not written: sealed in the group
        answers = await asyncio.gather(
            *(store.append(1, [note(run, "fits")]) for run in runs),
            store.append(1, [Append(fresh, "Note", {"text": OVERSIZE})]),
            return_exceptions=True,
        )
        assert isinstance(answers[-1], RecordTooLargeError), answers[-1]
        for run, answer in zip(runs, answers[:-1], strict=True):
            assert isinstance(answer, list), answer
            assert [r.body["text"] for r in await store.read(run)] == ["fits"]
        assert await store.read(fresh) == []
        # and the writer carries on
        assert (await store.append(1, [note(fresh, "small")]))[0].seq == 1
    finally:
        await store.close()


def _cap_growth(store: SqlJournalStore) -> Callable[[bool], None]:
    """Cap the database at its current size on every connection the store checks out
    (``PRAGMA max_page_count`` is per connection, and never below the current size)."""
    capped = [False]

    @event.listens_for(store.engine.sync_engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA max_page_count = {1 if capped[0] else 1 << 30}")
        cursor.close()

    def cap(on: bool) -> None:
        capped[0] = on

    return cap


async def test_a_full_database_in_a_sqlite_group_is_refused_and_says_so(
    sqlite_database: Callable[..., str],
) -> None:
    store = await SqlJournalStore.connect(sqlite_database(), group_commit=True)
    try:
        cap = _cap_growth(store)
        await store._shared.sqlite_writer.idle()  # its connection back in the pool
        cap(True)
        runs = [RunId.generate() for _ in range(6)]
        answers = await asyncio.gather(
            *(store.append(1, [note(run, "y" * 20_000)]) for run in runs),
            return_exceptions=True,
        )
        for answer in answers:
            assert isinstance(answer, BackendError), answer
            assert not isinstance(answer, CommitUnknownError)
            assert "full" in str(answer) and "nothing" in str(answer), answer
        await store._shared.sqlite_writer.idle()
        cap(False)
        for run in runs:
            assert await store.read(run) == []
        # with room again, the store writes
        assert (await store.append(1, [note(runs[0], "room")]))[0].seq == 1
    finally:
        await store.close()


#: Run in a mount namespace of its own with a tiny tmpfs at argv[1]: fill the disk, then
#: append a group whose COMMIT cannot write its WAL frames. Prints what each append heard
#: and what the database holds afterwards.
_FULL_DISK = textwrap.dedent(
    """
    import asyncio, json, os, shutil, sys
    from agentplane_journal import Append, RunId, SqlJournalStore

    async def main(directory, template):
        db = os.path.join(directory, "journal.db")
        shutil.copyfile(template, db)
        store = await SqlJournalStore.connect(f"sqlite+aiosqlite:///{db}", group_commit=True)
        await store.append(1, [Append(RunId.generate(), "Note", {"text": "warm"})])
        runs = [RunId.generate() for _ in range(8)]
        filler = os.path.join(directory, "filler")
        st = os.statvfs(directory)
        with open(filler, "wb") as f:  # all but 64 KiB: the group's pages need ~170 KiB
            f.write(b"\\0" * (st.f_bavail * st.f_frsize - 64 * 1024))
        answers = await asyncio.gather(
            *(store.append(1, [Append(r, "Note", {"text": "z" * 20_000})]) for r in runs),
            return_exceptions=True,
        )
        await store._shared.sqlite_writer.idle()
        os.remove(filler)
        held = [len(await store.read(r)) for r in runs]
        again = len(await store.append(1, [Append(runs[0], "Note", {"text": "room"})]))
        await store.close()
        heard = [[type(a).__name__, str(a)] if isinstance(a, BaseException) else "ok"
                 for a in answers]
        print(json.dumps({"answers": heard, "held": held, "again": again}))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def test_a_full_disk_at_a_sqlite_group_commit_is_refused_and_says_so(
    sqlite_template: Path, tmp_path: Path
) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a tiny tmpfs in a namespace of its own")
    mount = tmp_path / "disk"
    mount.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(_FULL_DISK)
    shell = (
        f'mount -t tmpfs -o size=1m tmpfs "{mount}" || exit 77; '
        f'exec "{sys.executable}" "{script}" "{mount}" "{sqlite_template}"'
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", shell],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if done.returncode == 77 or "unshare failed" in done.stderr:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for kind, message in result["answers"]:
        assert kind == "BackendError", message
        assert "full" in message and "nothing" in message, message
    assert result["held"] == [0] * 8  # refused means refused
    assert result["again"] == 1
