"""A SQLite COMMIT whose disk fails its sync is in doubt, not refused.

A WAL commit writes its frames, the commit frame last, then syncs the file. When the sync
fails (``SQLITE_IOERR_FSYNC``), SQLite rolls the transaction back in memory, and nothing of
it is visible to the process, but the frames are in the WAL: the next process to open the
database after a crash recovers them, and the write is there. So the store may not say
"nothing was written" (a retry would then write it twice); it says
:class:`~agentplane_journal.CommitUnknownError`, whose advice is to read the journal back.

Each test runs a worker process with ``fsync``/``fdatasync`` made to fail (a small shim
preloaded with ``LD_PRELOAD``, built here with the C compiler), lets it write once with the
failing disk and end without closing anything, then opens the database again: the write
raised ``CommitUnknownError``, and the record it was about is in the journal. Before the
fix each raised ``BackendError`` ("nothing of this append was written") for a record that
then turned out to be there. One test per way a write reaches COMMIT on SQLite: the
append's one hop, the general unit of work, and a session adapter's guarded transaction.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.db.dialect.sqlite import commit_error_in_doubt

SUPPORT = Path(__file__).parent / "support"
ROOT = Path(__file__).parent.parent

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD: Linux's loader"),
    pytest.mark.slow,  # a C compiler and worker processes: the rest stage's (.ci/run)
]


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``failsync.so``, built from tests/support/failsync/failsync.c."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        message = "no C compiler to build the failing-fsync shim (Debian: apt-get install gcc)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must install it (.ci/run)")
        pytest.skip(message)
    out = tmp_path_factory.mktemp("failsync") / "failsync.so"
    source = SUPPORT / "failsync" / "failsync.c"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(source), "-ldl"], check=True)
    return out


def _write_in_doubt(shim: Path, url: str, flag: Path, way: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LD_PRELOAD=str(shim), FAILSYNC_FLAG=str(flag))
    done = subprocess.run(
        [sys.executable, str(SUPPORT / "failsync_worker.py"), url, str(flag), way],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.parametrize("way", ["hot", "general", "guarded"])
async def test_a_commit_whose_sync_failed_is_unknown_and_may_have_landed(
    shim: Path, sqlite_database: Callable[..., str], tmp_path: Path, way: str
) -> None:
    url = sqlite_database()
    answer = _write_in_doubt(shim, url, tmp_path / "failing", way)
    assert answer["error"] == "CommitUnknownError", answer
    assert "I/O error" in answer["text"] and "read the journal back" in answer["text"]
    store = await SqlJournalStore.connect(url)  # a new process's view: the WAL recovered
    try:
        run = RunId.parse(answer["run"])
        records = await store.read(run)
        if way == "general":  # the lease it took is the run's, at epoch 1
            lease = await store.lease_of(run)
            assert lease is not None and lease[:2] == ("in-doubt", 1)
        else:
            assert "in doubt" in bytes(records[-1].raw).decode()
        await store.verify(run)
    finally:
        await store.close()


def _error(name: str | None, base: type[sqlite3.Error] = sqlite3.OperationalError) -> Exception:
    exc = base("the driver's text")
    if name is not None:
        exc.sqlite_errorname = name  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(
    ("name", "in_doubt"),
    [
        ("SQLITE_IOERR", True),
        ("SQLITE_IOERR_FSYNC", True),
        ("SQLITE_IOERR_WRITE", True),
        ("SQLITE_FULL", False),
        ("SQLITE_BUSY", False),
        ("SQLITE_LOCKED", False),
        ("SQLITE_READONLY", False),
        ("SQLITE_CONSTRAINT_FOREIGNKEY", False),
        (None, False),  # no answer from SQLite: a closed connection ran nothing
    ],
)
def test_only_an_io_error_leaves_a_commit_in_doubt(name: str | None, in_doubt: bool) -> None:
    assert commit_error_in_doubt(_error(name)) is in_doubt
    assert commit_error_in_doubt(_error(name, sqlite3.DatabaseError)) is in_doubt
    assert not commit_error_in_doubt(OSError(5, "not SQLite's answer"))
