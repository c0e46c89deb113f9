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

import asyncpg
import pytest
from sqlalchemy import event
from sqlalchemy.util import await_only

from agentplane_journal import (
    Append,
    BackendError,
    CommitUnknownError,
    RecordTooLargeError,
    RunId,
    SqlJournalStore,
)

from support.databases import dsn
from support.helpers import note

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
        await store._shared.writer.idle()  # its connection back in the pool
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
        await store._shared.writer.idle()
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
    import asyncio, functools, json, os, shutil, sys
    from agentplane_journal import Append, RunId, SqlJournalStore

    async def main(directory, template):
        db = os.path.join(directory, "journal.db")
        shutil.copyfile(template, db)
        store = await SqlJournalStore.connect(f"sqlite+aiosqlite:///{db}", group_commit=True)
        await store.append(1, [Append(RunId.generate(), "Note", {"text": "warm"})])
        # One group: every append a leader's (an idle writer's first would run alone, and fit).
        from agentplane_journal.backends.writer import GroupWriter
        writer = store._shared.writer
        writer.submit = functools.partial(GroupWriter.submit, writer)
        runs = [RunId.generate() for _ in range(8)]
        filler = os.path.join(directory, "filler")
        st = os.statvfs(directory)
        with open(filler, "wb") as f:  # all but 64 KiB: the group's pages need ~170 KiB
            f.write(b"\\0" * (st.f_bavail * st.f_frsize - 64 * 1024))
        answers = await asyncio.gather(
            *(store.append(1, [Append(r, "Note", {"text": "z" * 20_000})]) for r in runs),
            return_exceptions=True,
        )
        await store._shared.writer.idle()
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


@pytest.fixture
async def pg_store(pg_database: Callable[..., str]) -> Any:
    store = await SqlJournalStore.connect(pg_database(), tenant="honest")
    yield store
    await store.close()


@pytest.fixture
async def admin(pg_server: str) -> Any:
    conn = await asyncpg.connect(dsn(pg_server))
    yield conn
    await conn.close()


async def _terminate_idle(admin: asyncpg.Connection, store: SqlJournalStore) -> int:
    """Terminate every backend of the store's database (its pooled, idle connections)."""
    killed = await admin.fetch(
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
        "WHERE datname = $1 AND pid <> pg_backend_pid()",
        store.engine.url.database,
    )
    return len(killed)


async def test_a_read_on_a_connection_the_server_dropped_is_never_commit_unknown(
    pg_store: SqlJournalStore, admin: asyncpg.Connection
) -> None:
    run = RunId.generate()
    await pg_store.append(1, [note(run)])
    await pg_store.checkpoint()
    for read in (pg_store.checkpoint, lambda: pg_store.head(run), lambda: pg_store.read(run)):
        assert await _terminate_idle(admin, pg_store) >= 1
        try:
            await read()
        except CommitUnknownError as exc:  # pragma: no cover - the bug
            pytest.fail(f"a read answered 'unknown': {exc}")
        except BackendError:
            pass  # refused, nothing written: the next call takes a fresh connection
        assert (await read()) is not None


async def test_a_read_whose_connection_drops_before_its_commit_is_not_commit_unknown(
    pg_store: SqlJournalStore, admin: asyncpg.Connection
) -> None:
    """The read's statement is answered; the server drops the connection before the
    read-only transaction's COMMIT is sent. Nothing was written: not "unknown"."""
    run = RunId.generate()
    await pg_store.append(1, [note(run)])
    armed = [True]

    @event.listens_for(pg_store.engine.sync_engine, "commit")
    def _drop(conn: Any) -> None:
        if armed[0]:
            armed[0] = False
            pid = conn.connection.driver_connection.get_server_pid()
            await_only(admin.execute("SELECT pg_terminate_backend($1, 5000)", pid))

    with pytest.raises(BackendError) as caught:
        await pg_store.checkpoint()
    assert not isinstance(caught.value, CommitUnknownError), caught.value
    assert not armed[0]
    assert (await pg_store.checkpoint()).size == 0  # a fresh connection


async def test_a_write_on_a_connection_the_server_dropped_is_refused_or_done(
    pg_store: SqlJournalStore, admin: asyncpg.Connection
) -> None:
    """A general unit of work (here: taking a lease) whose pooled connection the server
    dropped while idle fails at its first statement: refused, never "unknown"."""
    runs = [RunId.generate() for _ in range(3)]
    await pg_store.checkpoint()
    for run in runs:
        assert await _terminate_idle(admin, pg_store) >= 1
        try:
            lease = await pg_store.acquire(run, "owner", 60)
        except CommitUnknownError as exc:  # pragma: no cover - the bug
            pytest.fail(f"a write whose connection was gone before it was sent: {exc}")
        except BackendError:
            lease = await pg_store.acquire(run, "owner", 60)  # a fresh connection
        assert lease.epoch == 1


async def test_a_write_whose_connection_drops_before_its_commit_is_refused(
    pg_store: SqlJournalStore, admin: asyncpg.Connection
) -> None:
    """The write's statements are answered, then the server drops the connection and the
    driver refuses to send COMMIT on it: the server rolled the transaction back, so the
    answer is "refused" (BackendError), and the lease was indeed not taken."""
    run = RunId.generate()
    await pg_store.checkpoint()
    armed = [True]

    @event.listens_for(pg_store.engine.sync_engine, "commit")
    def _drop(conn: Any) -> None:
        if armed[0]:
            armed[0] = False
            pid = conn.connection.driver_connection.get_server_pid()
            await_only(admin.execute("SELECT pg_terminate_backend($1, 5000)", pid))

    with pytest.raises(BackendError) as caught:
        await pg_store.acquire(run, "owner", 60)
    assert not isinstance(caught.value, CommitUnknownError), caught.value
    assert not armed[0]
    assert (await pg_store.acquire(run, "owner", 60)).epoch == 1  # nothing had landed


async def test_no_free_pooled_connection_is_refused_before_anything_is_sent(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store(
        engine_options={"pool_size": 1, "max_overflow": 0, "pool_timeout": 0.2}
    )
    run = RunId.generate()
    await store.head(run)
    async with store.engine.connect():  # the pool's only connection
        with pytest.raises(BackendError, match="no pooled connection"):
            await store.head(run)
        with pytest.raises(BackendError, match="no pooled connection"):
            await store.acquire(run, "owner", 60)
    assert (await store.acquire(run, "owner", 60)).epoch == 1
