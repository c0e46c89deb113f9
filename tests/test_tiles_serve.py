"""``agentplane-journal serve``: the log over HTTP, read by tlog-scales and a real browser.

The command runs as a user runs it (a subprocess on a loopback port, on both dialects):
``tlog-scales``' HTTP client computes our checkpoint's root from the served tiles and
gets our inclusion proofs; the caching headers are the spec's (full tiles immutable,
partial ones short, the checkpoint not cached); and Debian's Chromium, headless, loads
the audit page: a run whose record was edited after its seal shows as FAILING, a sealed
run's inclusion proof as verified.

Chromium and tlog-scales skip when absent, unless ``CI`` is set (then they fail).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from agentplane_journal import Append, RunId, SqlJournalStore
from agentplane_journal.web import page

from support.chromium import _need, chromium_dom
from support.logs import SEED, bulk_seal, check_with_scales, sealed_leaves

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
READER_TOKEN = "test-reader-token-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str, reader: bool = False) -> tuple[int, dict[str, str], bytes]:
    """GET ``url``; as a reader of every tenant with ``reader``."""
    request = urllib.request.Request(url)
    if reader:
        request.add_header("Authorization", f"Bearer {READER_TOKEN}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture
def serve(database_url: str, tmp_path: Path) -> Iterator[object]:
    """``start(tenant)`` -> the base URL of a running ``serve`` (stopped afterwards)."""
    _need("ok" if _has("starlette") and _has("uvicorn") else None, "the serve extra")
    key = tmp_path / "log.key"
    key.write_bytes(SEED)
    key.chmod(0o600)
    readers = tmp_path / "readers"
    readers.write_text(f"* {READER_TOKEN}\n")
    readers.chmod(0o600)
    started: list[subprocess.Popen[bytes]] = []

    def start(tenant: str) -> str:
        port = _free_port()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentplane_journal",
                "serve",
                "--url",
                database_url,
                "--tenant",
                tenant,
                "--sign-key-file",
                str(key),
                "--port",
                str(port),
                "--reader-token-file",
                str(readers),
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        started.append(proc)
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode() if proc.stderr else "exited")
            try:
                with urllib.request.urlopen(base + "/", timeout=5):
                    return base
            except OSError:
                time.sleep(0.1)
        raise AssertionError("serve did not start")

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=30)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


async def make_runs(store: SqlJournalStore) -> tuple[RunId, RunId]:
    """Two real sealed runs; the second's note is edited after its seal (raw bytes changed)."""
    good, bad = RunId.generate(), RunId.generate()
    for run in (good, bad):
        await store.append(0, [Append(run, "Note", {"text": "a note"})])
        await store.append(0, [Append(run, "Note", {"text": "<b>second</b>"})])
        await store.seal(run, 0, "succeeded")
    async with store.engine.begin() as conn:
        raw = (
            await conn.execute(
                text("SELECT raw FROM journal WHERE tenant=:t AND run_id=:r AND seq=2"),
                {"t": store.tenant, "r": str(bad)},
            )
        ).scalar_one()
        edited = bytes(raw).replace(b"second", b"SECOND")
        await conn.execute(
            text("UPDATE journal SET raw=:raw WHERE tenant=:t AND run_id=:r AND seq=2"),
            {"raw": edited, "t": store.tenant, "r": str(bad)},
        )
    return good, bad


def reader_page(url: str, path: Path) -> str:
    """The page at ``url`` as a reader is served it, saved to ``path``: its file URL."""
    status, _, body = get(url, reader=True)
    assert status in (200, 500) and b"<html" in body  # 500: a page saying FAILING
    path.write_bytes(body)
    return path.as_uri()


async def test_served_log_is_read_by_tlog_scales_with_the_specs_headers(
    store: SqlJournalStore, serve: object
) -> None:
    await make_runs(store)
    await bulk_seal(store, sealed_leaves(300))
    leaves = [(str(r), bytes(h), 0, "") for r, h in await store.sealed_runs()]
    base = serve(store.tenant)  # type: ignore[operator]
    log = f"{base}/{store.tenant}"
    await check_with_scales(log + "/", store, leaves)

    status, headers, body = get(log + "/checkpoint")
    assert status == 200 and headers["cache-control"] == "no-cache"
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert body.decode().startswith(f"{store.origin}\n302\n")
    status, headers, body = get(log + "/tile/0/000")
    assert status == 200 and len(body) == 8192
    assert headers["cache-control"] == "public, max-age=31536000, immutable"
    assert headers["content-type"] == "application/octet-stream"
    status, headers, body = get(log + "/tile/entries/001.p/46")
    assert status == 200 and len(body) == 46 * 34
    assert headers["cache-control"] == "public, max-age=10"
    assert get(log + "/tile/0/001")[0] == 404  # not full yet
    assert get(log + "/tile/0/001.p/47")[0] == 404  # wider than the log
    assert get(log + "/tile/0/01")[0] == 404  # not the spec's spelling

    # A damaged stored tree (a node deleted around the store): FAILING, never a crash.
    async with store.engine.begin() as conn:
        await conn.execute(
            text("DELETE FROM log_tree WHERE tenant=:t AND level=8 AND idx=0"),
            {"t": store.tenant},
        )
    status, _, body = get(log + "/")
    assert status == 500 and b'data-status="failing"' in body and b"level 8" in body
    status, _, body = get(log + "/checkpoint")
    assert status == 500 and b"damaged" in body
    assert get(base + "/")[0] == 200


# The page is the same on both dialects (its reads are tested on both); one browser run.
@pytest.mark.parametrize("dialect", ["sqlite"])
@pytest.mark.chromium
async def test_audit_page_in_chromium(
    store: SqlJournalStore, serve: object, tmp_path: Path
) -> None:
    _need(shutil.which("chromium"), "chromium (apt-get install chromium)")
    good, bad = await make_runs(store)
    await bulk_seal(store, sealed_leaves(3))
    # A hostile seal row written around the store: not a run id, markup for an outcome,
    # a head of 3 bytes. The page shows it as failing text; the tiles are unaffected.
    async with store.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO run_seal (tenant, run_id, chain_head, log_index, sealed_at, outcome)"
                " VALUES (:t, '<img src=x onerror=alert(1)>', :h, 999, 1, '<script>x</script>')"
            ),
            {"t": store.tenant, "h": b"abc"},
        )
    base = serve(store.tenant)  # type: ignore[operator]
    # Anyone: the public page (checkpoint and status), loaded from the server.
    dom = chromium_dom(f"{base}/{store.tenant}/", tmp_path / "profile0")
    assert "The runs are private" in dom and str(good) not in dom
    # A reader (the runs and records are private): headless Chromium sends no HTTP Basic
    # credentials, so the page a reader is served is saved and loaded as it is (it loads
    # nothing from elsewhere).
    dom = chromium_dom(reader_page(f"{base}/{store.tenant}/", tmp_path / "t.html"), tmp_path / "p1")
    assert f"Log {store.origin}" in dom
    # A seal no leaf is of: the log disagrees with its seals, so nothing is signed for it.
    log_status = dom.split('id="log"', 1)[1].split("</p>", 1)[0]
    assert 'data-status="failing"' in log_status and "the last sealed run is" in log_status
    assert "<script>x" not in dom and "&lt;script&gt;x&lt;/script&gt;" in dom
    assert "<img" not in dom and "is not a run id" in dom
    assert 'data-status="failing"' in dom  # the edited run
    rows = {line for line in dom.split("<tr>") if str(good) in line or str(bad) in line}
    assert any(str(bad) in r and 'data-status="failing"' in r for r in rows), rows
    assert any(str(good) in r and 'data-status="verified"' in r for r in rows), rows
    assert "No witness cosignatures" in dom

    run_page = reader_page(f"{base}/{store.tenant}/run/{good}", tmp_path / "r.html")
    dom = chromium_dom(run_page, tmp_path / "p2")
    proof = dom.split('id="proof"', 1)[1].split("</p>", 1)[0]
    assert 'data-status="failing"' in proof and "the last sealed run is" in proof
    assert "&lt;b&gt;second&lt;/b&gt;" in dom  # a record's body is shown, never interpreted
    # The edited run's own page (plain HTTP: the browser already showed the page loads).
    status, _, body = get(f"{base}/{store.tenant}/run/{bad}", reader=True)
    chain = body.decode().split('id="chain"', 1)[1].split("</p>", 1)[0]
    assert status == 200 and 'data-status="failing"' in chain and "seq 2" in chain
    assert get(f"{base}/{store.tenant}/run/{RunId.generate()}")[0] == 404
    assert get(f"{base}/{store.tenant}/run/not-a-run")[0] == 404


def test_hostile_values_are_escaped() -> None:
    hostile = "<script>alert(1)</script>\ud800"
    html = page.tenant_page(
        page.TenantView(
            tenant="t",
            origin=hostile,
            size=1,
            root_hex="00",
            note=hostile,
            verifier_key="k",
            cosignatures=[hostile],
            runs=[page.RunRow(hostile, hostile, hostile, hostile, False, hostile, hostile)],
            private=False,
        )
    )
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'data-status="failing"' in html
    # A name in a link is one percent-encoded path segment: never a link off the site.
    front = page.index_page([page.LogRow("\\evil.example", None, hostile, {hostile: hostile})])
    assert 'href="/%5Cevil.example/"' in front and "<script>" not in front
    assert "/run/%3Cscript%3Ealert%281%29%3C%2Fscript%3E%3F" in front
