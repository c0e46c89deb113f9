"""What a production topology adds to the test cluster: PgBouncer, and streaming standbys.

* :class:`PgBouncer` runs Debian's ``pgbouncer`` in transaction-pooling mode on a free
  loopback port in front of a cluster (as the ``postgres`` user when the tests run as root).
* ``Cluster(replica_of=primary)`` (``pgcluster.py``) is a streaming standby of ``primary``,
  made with ``pg_basebackup -R``; :func:`wait_replayed` waits until it has replayed what the
  primary has written.

Tests that need ``pgbouncer`` call :func:`need_pgbouncer`: skipped on a developer's machine
without it, a failure in CI (``CI`` set), where ``.ci/run`` installs it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from support.pgcluster import Cluster, _free_port


def need_binary(name: str) -> str:
    """Debian's ``name`` binary (its package has the same name), or skip (locally) / fail
    (in CI, where ``.ci/run`` must install it) without it."""
    found = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None
    )
    if found:
        return found
    message = f"{name} is not installed (Debian: apt-get install {name})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must install it (.ci/run)")
    pytest.skip(message)


def need_pgbouncer() -> str:
    """The ``pgbouncer`` binary, or skip (locally) / fail (in CI) without it."""
    return need_binary("pgbouncer")


class PgBouncer:
    """PgBouncer in ``pool_mode = transaction`` in front of the server of ``server_url``.

    ``url(database)`` is an asyncpg URL through the pooler, with ``?pgbouncer=true``.
    """

    def __init__(self, server_url: str, *, pool_size: int = 20, round_robin: bool = False) -> None:
        binary = need_pgbouncer()
        server = make_url(server_url)
        self.root = Path(tempfile.mkdtemp(prefix="apj-pgbouncer-"))
        self.port = _free_port()
        as_root = os.geteuid() == 0
        (self.root / "userlist.txt").write_text('"postgres" ""\n')
        config = self.root / "pgbouncer.ini"
        config.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.root / 'userlist.txt'}",
                    "admin_users = postgres",
                    "pool_mode = transaction",
                    "max_client_conn = 2000",
                    f"default_pool_size = {pool_size}",
                    "max_db_connections = 0",
                    # round robin: each transaction on the next server connection (the trap
                    # test wants them to move; LIFO, the default, often hands one back)
                    f"server_round_robin = {int(round_robin)}",
                    # Prepared statements a client leaves behind on a server connection
                    # are cleared when the server connection is handed back.
                    "server_reset_query = DISCARD ALL",
                    "server_reset_query_always = 0",
                    f"logfile = {self.root / 'pgbouncer.log'}",
                    f"pidfile = {self.root / 'pgbouncer.pid'}",
                    "",
                ]
            )
        )
        if as_root:
            shutil.chown(self.root, "postgres", "postgres")
            for f in self.root.iterdir():
                shutil.chown(f, "postgres", "postgres")
        self.process = subprocess.Popen(
            [binary, str(config)],
            user="postgres" if as_root else None,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.root / "pgbouncer.log").read_text(errors="replace")
                    self.stop()
                    raise RuntimeError(f"pgbouncer did not start:\n{log}") from None
                time.sleep(0.05)

    def url(self, server_url: str, *, pgbouncer: bool = True) -> str:
        """``server_url`` (a database on the pooled server) through the pooler."""
        u = make_url(server_url).set(host="127.0.0.1", port=self.port)
        if pgbouncer:
            u = u.update_query_dict({"pgbouncer": "true"})
        return u.render_as_string(hide_password=False)

    def stop(self) -> None:
        try:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def wait_replayed(primary: Cluster, standby: Cluster, within: float = 30) -> None:
    """Wait until ``standby`` has replayed everything ``primary`` has written so far."""
    p = await asyncpg.connect(dsn(primary.url))
    s = await asyncpg.connect(dsn(standby.url))
    try:
        target = await p.fetchval("SELECT pg_current_wal_lsn()")
        deadline = time.monotonic() + within
        while not await s.fetchval("SELECT pg_last_wal_replay_lsn() >= $1", target):
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby did not replay up to {target} in {within}s")
            await asyncio.sleep(0.05)
    finally:
        await p.close()
        await s.close()
