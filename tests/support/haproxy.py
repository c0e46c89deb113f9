"""HAProxy in front of a Patroni cluster, routing to the leader by Patroni's health check.

The other way operators reach a Patroni leader (besides a multi-host URL with
``target_session_attrs=read-write``): one address, a TCP proxy, and Patroni's REST API as the
health check. ``GET /primary`` answers 200 on the node that holds the leader key and runs
as primary, 503 elsewhere, so HAProxy sends new connections to the leader only; with
``on-marked-down shutdown-sessions`` it cuts the connections it holds to a node that stops
being the leader (a demoted primary keeps running as a standby and would otherwise keep
answering on them, read-only). This is the configuration Patroni's documentation gives
(``haproxy.cfg`` in its repository), with shorter check intervals for a test.

Tests call :func:`need_haproxy`: skipped on a machine without the package, a failure in CI
(``CI`` set), where ``.ci/run`` installs it (Debian's ``haproxy``).
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from support.patroni import PatroniCluster
from support.pgcluster import _free_port
from support.pgtopology import need_binary

CONFIG = """global
    maxconn 200

defaults
    mode tcp
    retries 2
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 1s

listen leader
    bind 127.0.0.1:{port}
    option httpchk GET /primary
    http-check expect status 200
    default-server inter 300ms fall 2 rise 1 on-marked-down shutdown-sessions
{servers}
"""


def need_haproxy() -> str:
    """The ``haproxy`` binary, or skip (locally) / fail (in CI) without it."""
    return need_binary("haproxy")


class HAProxy:
    """HAProxy on a loopback port in front of ``cluster``'s nodes (see the module)."""

    def __init__(self, cluster: PatroniCluster, directory: Path) -> None:
        binary = need_haproxy()
        self.port = _free_port()
        servers = "\n".join(
            f"    server {n.name} 127.0.0.1:{n.port} check port {n.rest}" for n in cluster.nodes
        )
        self.config = directory / "haproxy.cfg"
        self.config.write_text(CONFIG.format(port=self.port, servers=servers))
        self.log = directory / "haproxy.log"
        with self.log.open("wb") as log:
            # -db: stay in the foreground, as the test's child
            self.process = subprocess.Popen(
                [binary, "-db", "-f", str(self.config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 20
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"haproxy exited: {self.log.read_text(errors='replace')}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("haproxy did not listen within 20 s") from None
                time.sleep(0.1)

    def url(self, database: str = "postgres") -> str:
        """The one address clients use: whichever node leads now."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
