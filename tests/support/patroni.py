"""A throwaway Patroni cluster: etcd and two PostgreSQL 15 nodes managed by Patroni.

What an operator runs for automatic failover, started by the tests on loopback ports:

* one etcd member (``etcd-server``), data in a temporary directory, the DCS Patroni keeps
  its leader key, its member list and its ``/sync`` key in;
* two Patroni nodes (``patroni``): the first bootstraps (``initdb``) and takes the leader
  key, the second clones it and streams; with ``synchronous=True`` Patroni's
  ``synchronous_mode`` makes the second the synchronous standby, and only it may be promoted.

Timeouts are short (``ttl`` 8 s, ``loop_wait`` 1 s, ``retry_timeout`` 3 s) so a failover
takes seconds, not the defaults' half minute. :meth:`PatroniCluster.url` is the multi-host
URL with ``target_session_attrs=read-write`` that clients reach the leader by, whichever node
it is. :meth:`crash` kills a node the way a machine dies (``SIGKILL`` to Patroni, the
postmaster and every backend, so nothing is shut down cleanly and no walsender lives on);
:meth:`switchover` is the planned move, by ``patronictl``.

Patroni runs ``initdb``, which refuses root, so as root everything runs as ``postgres``.
Tests call :func:`need_patroni`: skipped on a machine without the packages, a failure in CI
(``CI`` set), where ``.ci/run`` installs them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from support.pgcluster import _bindir, _free_port


def need_patroni() -> tuple[str, str, str]:
    """``(patroni, patronictl, etcd)``, or skip (locally) / fail (in CI) without them."""
    patroni, patronictl, etcd = (shutil.which(b) for b in ("patroni", "patronictl", "etcd"))
    if patroni and patronictl and etcd:
        return patroni, patronictl, etcd
    message = "patroni and etcd are not installed (Debian: apt-get install patroni etcd-server)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must install them (.ci/run)")
    pytest.skip(message)


def _wait(what: str, ok: Any, within: float, log: Path | None = None) -> Any:
    deadline = time.monotonic() + within
    while True:
        try:
            result = ok()
        except Exception:  # not up yet: connection refused, bad JSON, ...
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
            raise AssertionError(f"timed out after {within}s waiting for {what}\n{tail}")
        time.sleep(0.1)


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
        return json.loads(response.read())


class Node:
    """One Patroni-managed PostgreSQL: its name, its ports, its process."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.dir = root / name
        self.dir.mkdir()
        self.config = self.dir / "patroni.yml"
        self.log = self.dir / "patroni.log"
        self.data = self.dir / "data"
        self.port = _free_port()
        self.rest = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def postmaster(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


class PatroniCluster:
    """etcd plus ``nodes`` Patroni nodes, the first one the leader; :meth:`stop` removes all.

    ``synchronous``: Patroni's ``synchronous_mode`` (not strict: a leader left alone keeps
    accepting writes, see docs/operations/patroni.md). ``maximum_lag_on_failover``: bytes a
    standby may be behind and still be promoted. ``parameters``: extra PostgreSQL settings.
    """

    def __init__(
        self,
        *,
        nodes: int = 2,
        synchronous: bool = True,
        maximum_lag_on_failover: int = 1 << 20,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self.patroni, self.patronictl, etcd = need_patroni()
        self.bindir = _bindir()
        self.synchronous = synchronous
        self.as_root = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="apj-patroni-"))
        self.scope = f"apj{uuid.uuid4().hex[:8]}"
        self.etcd_port, peer = _free_port(), _free_port()
        self.nodes = [Node(self.root, f"node{i}") for i in range(nodes)]
        self.etcd: subprocess.Popen[bytes] | None = None
        self._lag = maximum_lag_on_failover
        self._parameters = parameters or {}
        if self.as_root:
            for path in [self.root, *self.root.iterdir()]:
                shutil.chown(path, "postgres", "postgres")
        try:
            client = f"http://127.0.0.1:{self.etcd_port}"
            peers = f"http://127.0.0.1:{peer}"
            self.etcd = self._spawn(
                [
                    etcd,
                    "--name=apj",
                    f"--data-dir={self.root / 'etcd'}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peers}",
                    f"--initial-advertise-peer-urls={peers}",
                    f"--initial-cluster=apj={peers}",
                    "--initial-cluster-state=new",
                    "--log-level=error",
                ],
                self.root / "etcd.log",
            )
            _wait("etcd", lambda: _get(self.etcd_port, "/health"), 30, self.root / "etcd.log")
            for node in self.nodes:
                node.config.write_text(self._config(node))
                if self.as_root:
                    shutil.chown(node.config, "postgres", "postgres")
            self.start(self.nodes[0])
            _wait(
                "the first node to lead",
                lambda: self.leader() is self.nodes[0],
                90,
                self.nodes[0].log,
            )
            for node in self.nodes[1:]:
                self.start(node)
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _config(self, node: Node) -> str:
        parameters = {
            "max_connections": 300,
            "fsync": "off",  # processes are killed, never the machine: the page cache survives
            "synchronous_commit": "on",
            "wal_level": "replica",
            "max_wal_senders": 10,
            "max_replication_slots": 10,
            "hot_standby": "on",
            "unix_socket_directories": str(node.dir),
            **self._parameters,
        }
        config: dict[str, Any] = {
            "scope": self.scope,
            "namespace": "/apj/",
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"127.0.0.1:{node.rest}",
                "connect_address": f"127.0.0.1:{node.rest}",
            },
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    # ttl >= loop_wait + 2 * retry_timeout (Patroni's rule); a leader that
                    # cannot update its key for retry_timeout demotes itself, so not less
                    # than 3 s on a loaded machine
                    "ttl": 8,
                    "loop_wait": 1,
                    "retry_timeout": 3,
                    "maximum_lag_on_failover": self._lag,
                    "primary_start_timeout": 0,
                    "synchronous_mode": self.synchronous,
                    "synchronous_mode_strict": False,
                    "postgresql": {
                        "use_pg_rewind": False,
                        "use_slots": True,
                        "parameters": parameters,
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "no-sync"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.port}",
                "connect_address": f"127.0.0.1:{node.port}",
                "data_dir": str(node.data),
                "bin_dir": str(self.bindir),
                "pgpass": str(node.dir / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "postgres", "password": "postgres"},
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
                "parameters": {"unix_socket_directories": str(node.dir)},
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }
        return json.dumps(config, indent=1)  # JSON is YAML

    def _spawn(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            if self.as_root:
                shutil.chown(log, "postgres", "postgres")
            return subprocess.Popen(
                argv,
                user="postgres" if self.as_root else None,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,  # a signal to the test's group never reaches it
            )

    def start(self, node: Node) -> None:
        node.process = self._spawn([self.patroni, str(node.config)], node.log)

    # -- what Patroni says --------------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """Patroni's ``/cluster`` view from any node that answers."""
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            try:
                return list(_get(node.rest, "/cluster")["members"])
            except (OSError, ValueError, KeyError):
                continue
        return []

    def leader(self) -> Node | None:
        """The node holding the leader key and running as primary, if any."""
        for m in self.members():
            if m.get("role") == "leader" and m.get("state") == "running":
                return self.node(m["name"])
        return None

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def healthy(self) -> bool:
        """A leader, and every other live node streaming (the sync standby, in sync mode)."""
        members = self.members()
        alive = {n.name for n in self.nodes if n.process and n.process.poll() is None}
        if len([m for m in members if m["name"] in alive]) != len(alive):
            return False
        if not any(m.get("role") == "leader" and m.get("state") == "running" for m in members):
            return False
        standbys = [m for m in members if m["name"] in alive and m.get("role") != "leader"]
        if not all(m.get("state") in ("streaming", "running") for m in standbys):
            return False
        if self.synchronous and standbys:
            return any(m.get("role") == "sync_standby" for m in standbys)
        return True

    def wait_healthy(self, within: float = 90) -> None:
        _wait("a healthy Patroni cluster", self.healthy, within, self.nodes[-1].log)

    def wait_new_leader(self, old: Node, within: float = 60) -> Node:
        leader: Node = _wait(
            f"a leader other than {old.name}",
            lambda: (lead := self.leader()) is not None and lead is not old and lead,
            within,
            self.nodes[-1].log,
        )
        return leader

    def url(self, database: str = "postgres") -> str:
        """The multi-host URL: every node, and only a read-write session will do."""
        hosts = "&".join(f"host=127.0.0.1:{n.port}" for n in self.nodes)
        return f"postgresql+asyncpg://postgres@/{database}?{hosts}&target_session_attrs=read-write"

    def node_url(self, node: Node, database: str = "postgres") -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{node.port}/{database}"

    # -- what happens to it -------------------------------------------------------------------

    def crash(self, node: Node) -> None:
        """The machine dies: SIGKILL to Patroni, the postmaster and every backend at once."""
        victims: list[int] = []
        if node.process is not None and node.process.poll() is None:
            victims.append(node.process.pid)
        postmaster = node.postmaster()
        if postmaster is not None and _alive(postmaster):
            victims += [postmaster, *_children(postmaster)]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if node.process is not None:
            node.process.wait()

    def switchover(self, leader: Node, candidate: Node) -> subprocess.CompletedProcess[str]:
        """``patronictl switchover --force``: the planned move of the leader key."""
        argv = [
            self.patronictl,
            "-c",
            str(leader.config),
            "switchover",
            self.scope,
            "--leader",
            leader.name,
            "--candidate",
            candidate.name,
            "--force",
        ]
        if self.as_root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    def stop(self) -> None:
        """Kill every node (nothing it holds is kept), then stop etcd; remove everything."""
        try:
            for node in self.nodes:  # nothing is kept: no clean shutdown to wait for
                self.crash(node)
            if self.etcd is not None and self.etcd.poll() is None:
                self.etcd.terminate()
                try:
                    self.etcd.wait(10)
                except subprocess.TimeoutExpired:
                    self.etcd.kill()
                    self.etcd.wait()
        finally:
            if os.environ.get("AGENTPLANE_JOURNAL_TEST_PATRONI_KEEP") == "1":
                print(f"kept {self.root} (AGENTPLANE_JOURNAL_TEST_PATRONI_KEEP=1)")
            else:
                shutil.rmtree(self.root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists()


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (a postmaster's backends), from ``/proc``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found
