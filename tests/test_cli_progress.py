"""Long work shows progress on a terminal, and nothing else does (issue 34, item 5).

``export``, ``verify-export``, ``restore`` and ``drill`` run as subprocesses with stderr on a
pseudo-terminal (``pty``): a ``\\r`` progress line (runs, records, rate) appears and is
erased at the end. With stderr a pipe, or with ``--json``, stderr stays empty. ``serve``
says where it listens and logs each request in the Common Log Format.
"""

from __future__ import annotations

import asyncio
import os
import pty
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.cli.progress import Meter
from agentplane_journal.web.access_log import clf_line

from support.helpers import admitted, note

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "agentplane_journal"]
CLF = re.compile(
    r"^127\.0\.0\.1 - - \[\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} \+0000\] "
    r'"GET /default/checkpoint HTTP/1\.1" 200 \d+$'
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTPLANE_JOURNAL_")}
    return {**env, "PYTHONPATH": str(ROOT)}


async def _populate(url: str) -> None:
    for tenant in ("default", "acme"):
        store = await SqlJournalStore.connect(url, tenant=tenant)
        try:
            for i in range(30):
                run = RunId.generate()
                await store.append(1, [admitted(run), note(run, f"n{i}")])
                if i % 2:
                    await store.seal(run, 1, "succeeded")
        finally:
            await store.close()


def _on_a_terminal(*args: str) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal; return its exit code and what the
    terminal received."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=_env(),
    )
    os.close(slave)
    received = bytearray()
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child has closed the terminal
            break
        if not data:
            break
        received += data
    os.close(master)
    return proc.wait(timeout=120), received.decode("utf-8", "replace")


def _piped(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=_env(), timeout=120, check=False
    )


def test_long_work_shows_progress_on_a_terminal_and_nowhere_else(
    fresh: Callable[..., str], tmp_path: Path
) -> None:
    source = fresh()
    asyncio.run(_populate(source))
    backup = tmp_path / "backup"
    code, shown = _on_a_terminal("export", "--all", "--url", source, "-o", str(backup))
    assert code == 0, shown
    assert re.search(r"\rexporting 'acme': \d+ run\(s\), \d+ record\(s\), [\d,]+ records/s", shown)
    assert "\r\x1b[K" in shown  # erased at the end
    code, shown = _on_a_terminal("verify-export", str(backup))
    assert code == 0 and "\rverifying 'default': " in shown, shown
    target = fresh()
    code, shown = _on_a_terminal("restore", str(backup), "--url", target)
    assert code == 0 and "\rrestoring 'acme': " in shown and "records/s" in shown, shown
    code, shown = _on_a_terminal("drill", "--url", source)
    assert code == 0, shown
    for verb in ("exporting", "verifying", "restoring"):
        assert f"\r{verb} " in shown, (verb, shown)
    # --json on a terminal: no progress.
    for args in (
        ("verify-export", str(backup), "--json"),
        ("drill", "--url", source, "--json"),
    ):
        code, shown = _on_a_terminal(*args)
        assert code == 0 and "records/s" not in shown and "\r" not in shown, (args, shown)
    # stderr not a terminal: nothing on it at all.
    again = tmp_path / "again"
    for args in (
        ("export", "--all", "--url", source, "-o", str(again)),
        ("verify-export", str(backup)),
        ("restore", str(backup), "--url", fresh()),
        ("drill", "--url", source),
    ):
        done = _piped(*args)
        assert done.returncode == 0 and done.stderr == "", (args, done.stderr)


class _Terminal:
    def __init__(self) -> None:
        self.written: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.written.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_the_meter_is_throttled_and_erased() -> None:
    term = _Terminal()
    meter = Meter("exporting", stream=term)  # type: ignore[arg-type]
    for n in range(10_000):
        meter.show("'t'", n, 3 * n)
    assert 1 <= len(term.written) <= 5, len(term.written)
    meter.done()
    assert term.written[-1] == "\r\x1b[K"
    quiet = Meter("exporting", stream=term, quiet=True)  # type: ignore[arg-type]
    quiet.show("'t'", 1, 1)
    quiet.done()
    assert len([w for w in term.written if "records/s" in w]) == len(term.written) - 1


def test_an_access_line_escapes_what_a_client_sent() -> None:
    scope = {
        "type": "http",
        "client": ("10.0.0.1", 5000),
        "method": "GET",
        "raw_path": b'/a"b\nc\\',
        "query_string": b"x=1",
        "http_version": "1.1",
    }
    line = clf_line(scope, 404, 0, 0.0)
    assert line == (
        '10.0.0.1 - - [01/Jan/1970:00:00:00 +0000] "GET /a\\x22b\\x0ac\\x5c?x=1 HTTP/1.1" 404 -'
    )


def _lines(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))


def _next_line(lines: queue.Queue[str], pattern: re.Pattern[str], seen: list[str]) -> str:
    while True:
        try:
            line = lines.get(timeout=30)
        except queue.Empty:
            raise AssertionError(f"no line matching {pattern.pattern}; saw {seen}") from None
        seen.append(line)
        if pattern.search(line):
            return line


def test_serve_says_where_it_listens_and_logs_each_request(
    fresh: Callable[..., str], tmp_path: Path
) -> None:
    url = fresh()
    asyncio.run(_populate(url))  # serve answers 404 for a tenant with no runs
    key = tmp_path / "log.key"
    key.write_bytes(bytes(range(32)))
    proc = subprocess.Popen(
        [*CLI, "serve", "--url", url, "--sign-key-file", str(key), "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stderr, lines), daemon=True).start()
    seen: list[str] = []
    try:
        address = _next_line(lines, re.compile(r"serving on http://127\.0\.0\.1:(\d+)/"), seen)
        port = re.search(r":(\d+)/", address)
        assert port is not None
        answer = httpx.get(f"http://127.0.0.1:{port.group(1)}/default/checkpoint", timeout=10)
        assert answer.status_code == 200
        logged = _next_line(lines, re.compile(r"GET /default/checkpoint"), seen)
        assert CLF.match(logged), logged
        assert logged.endswith(f" {len(answer.content)}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
