"""A throwaway PostgreSQL cluster for the test session, started by the tests themselves.

``AGENTPLANE_JOURNAL_TEST_PG_URL`` points the tests at an existing server instead (a
``postgresql+asyncpg://`` URL whose user may create databases). Otherwise the PostgreSQL
server binaries on this machine are found (``pg_config --bindir`` or
``/usr/lib/postgresql/*/bin``), a cluster is initialised in a temporary directory and
started on a free loopback port, and it is stopped and removed at the end of the session.
``initdb`` refuses to run as root, so as root the cluster runs as the ``postgres`` user.

There is no skip: a missing server is a test failure, because a PostgreSQL half that
silently does not run is a PostgreSQL half that silently passes.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def _bindir() -> Path:
    candidates = []
    if pg_config := shutil.which("pg_config"):
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for c in candidates:
        if c and (Path(c) / "initdb").exists() and (Path(c) / "pg_ctl").exists():
            return Path(c)
    raise RuntimeError(
        "no PostgreSQL server binaries (initdb, pg_ctl) found; install the server "
        "(Debian: apt-get install postgresql) or set AGENTPLANE_JOURNAL_TEST_PG_URL"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The test cluster trades durability for speed: nothing it holds outlives the session.
FAST_SETTINGS = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
#: What a user's server runs with (PostgreSQL's defaults, spelled out): a commit waits for
#: its WAL flush. Benchmarks use these, or their figures describe a database nobody runs.
DURABLE_SETTINGS = "-c fsync=on -c synchronous_commit=on -c full_page_writes=on"


class Cluster:
    """A running throwaway cluster; ``url`` is its superuser's asyncpg URL.

    ``durable=True`` starts it with :data:`DURABLE_SETTINGS` instead of the test suite's
    :data:`FAST_SETTINGS`; ``options`` are extra ``-c name=value`` server settings (later
    ones win). ``replica_of``: instead of ``initdb``, take a base backup of that running
    cluster with ``pg_basebackup -R``, so this one starts as its streaming standby.
    """

    def __init__(
        self, *, durable: bool = False, options: str = "", replica_of: Cluster | None = None
    ) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="apj-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        if replica_of is None:
            self._run(
                [
                    str(self.bindir / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ]
            )
        else:
            self._run(
                [
                    str(self.bindir / "pg_basebackup"),
                    "-D",
                    str(self.data),
                    "-d",
                    f"host=127.0.0.1 port={replica_of.port} user=postgres",
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                    "--no-sync",
                ]
            )
        self.options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            f"{DURABLE_SETTINGS if durable else FAST_SETTINGS} "
            f"-c max_connections=300 -c shared_buffers=128MB {options}"
        )
        self.start()
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self.pg_ctl(
            "-o", self.options, "-l", str(self.root / "server.log"), "-w", "-t", "60", "start"
        )

    def pg_ctl(self, *argv: str) -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), *argv])

    def _run(self, argv: list[str]) -> None:
        if self.as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        result = subprocess.run(argv, capture_output=True, text=True, cwd=self.root)
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():  # not already stopped by a test
                self.pg_ctl("-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
