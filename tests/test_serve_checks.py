"""``serve`` publishes only what it verified, only to whom it may, and never crashes on a URL.

The app runs in-process (httpx over ASGI, on the store's own event loop) on both dialects.

* Damage: one row edited around the store, as an attacker with write access to the
  database (and no key) would: the last leaf deleted (a rollback), a node of the
  checkpoint's frontier edited (a root no sealed heads produce), a leaf in the middle
  edited (a tile that would not verify); before and after the server saw the intact log.
* Privacy: the tenant list, a tenant's runs and a run's records only to a reader token of
  that tenant; tiles, checkpoints and proofs to anyone.
* Hostile URLs: a 5,000-digit tile index, tenant names that are no plain path segment or
  no tenant at all.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from agentplane_journal import Append, RunId, SqlJournalStore
from agentplane_journal.tlog.note import NoteSigner
from agentplane_journal.web.app import make_app
from agentplane_journal.web.readers import parse_readers

from support.chromium import CHROMIUM_FLAGS
from support.logs import SEED, bulk_seal, sealed_leaves

TOKEN_A = "reader-of-a-" + "x" * 20
TOKEN_ALL = "operator-" + "y" * 20

Client = Callable[[], Any]


@pytest.fixture
async def client(store: SqlJournalStore) -> AsyncIterator[Client]:
    """``client()`` -> a fresh app (nothing verified yet) over ``store``, as an httpx client."""
    opened: list[httpx.AsyncClient] = []

    def make(readers: str = "") -> httpx.AsyncClient:
        app = make_app(store, lambda origin: NoteSigner(origin, SEED), parse_readers(readers))
        c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        opened.append(c)
        return c

    yield make
    for c in opened:
        await c.aclose()


DAMAGE = {  # the edit, and the tile holding the damaged row
    "deleted last leaf": (
        "DELETE FROM log_tree WHERE tenant=:t AND level=0 AND idx=301",
        "tile/0/001.p/46",
    ),
    "edited interior node": (
        "UPDATE log_tree SET hash=:h WHERE tenant=:t AND level=8 AND idx=0",
        "tile/1/000.p/1",
    ),
    "edited leaf": (
        "UPDATE log_tree SET hash=:h WHERE tenant=:t AND level=0 AND idx=5",
        "tile/0/000",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
async def test_a_damaged_tree_is_never_signed_nor_served(
    store: SqlJournalStore, client: Client, damage: str
) -> None:
    await bulk_seal(store, sealed_leaves(302))
    t = store.tenant
    warm = client()
    r = await warm.get(f"/{t}/checkpoint")
    assert r.status_code == 200 and r.text.startswith(f"{store.origin}\n302\n")
    assert (await warm.get(f"/{t}/tile/0/000")).status_code == 200
    assert (await warm.get(f"/{t}/tile/entries/000")).status_code == 200

    edit, damaged_tile = DAMAGE[damage]
    assert (await warm.get(f"/{t}/{damaged_tile}")).status_code == 200
    async with store.engine.begin() as conn:
        await conn.execute(text(edit), {"t": t, "h": b"\x07" * 32})

    for c in (warm, client()):  # the server that saw the intact log, and a fresh one
        tile = await c.get(f"/{t}/{damaged_tile}")
        assert tile.status_code == 500 and "damaged" in tile.text, tile.status_code
        cp = await c.get(f"/{t}/checkpoint")
        assert cp.status_code == 500 and "damaged" in cp.text, cp.text
        assert "— " not in cp.text  # no signature line: nothing signed
        assert (await c.get(f"/{t}/tile/entries/000")).status_code == 500
        page = await c.get(f"/{t}/")
        assert page.status_code == 500
        log = page.text.split('id="log"', 1)[1].split("</p>", 1)[0]
        assert 'data-status="failing"' in log and "FAILING" in log, log


async def test_an_intact_log_is_served_as_it_grows(store: SqlJournalStore, client: Client) -> None:
    """Verification is incremental: every new size is checked and served, tiles included."""
    c = client()
    t = store.tenant
    assert (await c.get(f"/{t}/checkpoint")).status_code == 404  # no run yet: no such log
    for n in (1, 255, 300):
        await bulk_seal(store, sealed_leaves(n - (await store.checkpoint()).size))
        r = await c.get(f"/{t}/checkpoint")
        assert r.status_code == 200 and r.text.startswith(f"{store.origin}\n{n}\n"), r.text
    assert (await c.get(f"/{t}/tile/0/000")).status_code == 200
    assert (await c.get(f"/{t}/tile/0/001.p/44")).status_code == 200
    assert (await c.get(f"/{t}/tile/entries/001.p/44")).status_code == 200
    assert (await c.get(f"/{t}/tile/1/000.p/1")).status_code == 200
    page = await c.get(f"/{t}/")
    assert page.status_code == 200 and 'data-status="verified"' in page.text


async def _run(store: SqlJournalStore, text: str) -> RunId:
    run = RunId.generate()
    await store.append(0, [Append(run, "Note", {"text": text})])
    await store.seal(run, 0, "succeeded")
    return run


async def test_content_is_private_proofs_are_public(store: SqlJournalStore, client: Client) -> None:
    other = store.for_tenant("tenant-b")
    run_a = await _run(store, "SECRET-A")
    run_b = await _run(other, "SECRET-B")
    t = store.tenant
    readers = f"{t} {TOKEN_A}\n# the operator\n* {TOKEN_ALL}\n"
    anon, reader, operator = client(readers), client(readers), client(readers)
    reader.headers["Authorization"] = f"Bearer {TOKEN_A}"
    operator.auth = httpx.BasicAuth("anyone", TOKEN_ALL)  # what a browser sends

    # Anyone: the tiles, the checkpoint, the proof; not the list, the runs, the records.
    assert (await anon.get(f"/{t}/checkpoint")).status_code == 200
    assert (await anon.get(f"/{t}/tile/entries/000.p/1")).status_code == 200
    front = await anon.get("/")
    assert front.status_code == 200 and "tenant-b" not in front.text and t not in front.text
    assert (await anon.get("/signin")).status_code == 401
    tenant = await anon.get(f"/{t}/")
    assert tenant.status_code == 200 and str(run_a) not in tenant.text
    assert "The runs are private" in tenant.text
    run = await anon.get(f"/{t}/run/{run_a}")
    assert run.status_code == 200 and "SECRET-A" not in run.text
    assert "The records are private" in run.text
    assert 'data-status="verified"' in run.text.split('id="proof"', 1)[1].split("</p>", 1)[0]
    wrong = client(readers)
    wrong.headers["Authorization"] = "Bearer " + "z" * 30
    assert "SECRET-A" not in (await wrong.get(f"/{t}/run/{run_a}")).text

    # A reader of tenant a: its runs and records, never tenant b's, nor b in the list.
    page = await reader.get(f"/{t}/run/{run_a}")
    assert "SECRET-A" in page.text and page.headers["cache-control"] == "private, no-store"
    assert str(run_a) in (await reader.get(f"/{t}/")).text
    assert "SECRET-B" not in (await reader.get(f"/tenant-b/run/{run_b}")).text
    front = await reader.get("/")
    assert t in front.text and "tenant-b" not in front.text
    assert (await reader.get("/signin")).status_code == 303
    for target, where in (("/x/", "/x/"), ("//evil.example/", "/"), ("/\\evil.example/", "/")):
        moved = await reader.get("/signin", params={"next": target})
        assert moved.status_code == 303 and moved.headers["location"] == where, target

    # The operator (every tenant), by HTTP Basic.
    front = await operator.get("/")
    assert "tenant-b" in front.text and f'href="/{t}/"' in front.text
    assert "SECRET-B" in (await operator.get(f"/tenant-b/run/{run_b}")).text


async def test_hostile_urls_are_answers_not_tracebacks(
    store: SqlJournalStore, client: Client
) -> None:
    await _run(store, "x")
    odd = await _run(store.for_tenant("a?b#c%d"), "y")
    await _run(store.for_tenant("\\evil.example"), "z")
    t = store.tenant
    c = client(f"* {TOKEN_ALL}")
    c.headers["Authorization"] = f"Bearer {TOKEN_ALL}"
    assert (await c.get(f"/{t}/tile/0/" + "1" * 5000)).status_code == 404
    assert (await c.get(f"/{t}/tile/0/" + "x001/" * 2000 + "000")).status_code == 404
    assert (await c.get(f"/{t}/tile/entries/" + "9" * 4301)).status_code == 404
    assert (await c.get(f"/{t}/?before=" + "9" * 5000)).status_code == 200
    assert (await c.get("/no-such-tenant/")).status_code == 404
    assert (await c.get("/no-such-tenant/checkpoint")).status_code == 404
    assert (await c.get(f"/no-such-tenant/run/{odd}")).status_code == 404
    assert (await c.get("/%5Cevil.example/")).status_code == 404  # no plain path segment
    front = (await c.get("/")).text
    assert 'href="/\\' not in front and 'href="/%5Cevil.example/"' in front
    assert 'href="/a%3Fb%23c%25d/"' in front
    page = await c.get("/a%3Fb%23c%25d/")
    assert page.status_code == 200 and f'href="/a%3Fb%23c%25d/run/{odd}"' in page.text


async def test_the_runs_page_back_with_times_and_the_front_page_names_failures(
    store: SqlJournalStore, client: Client
) -> None:
    runs = [await _run(store, f"note {i}") for i in range(55)]
    t = store.tenant
    # A reader of this tenant alone: PostgreSQL's tenants of other tests share the database.
    c = client(f"{t} {TOKEN_A}")
    c.headers["Authorization"] = f"Bearer {TOKEN_A}"
    first = (await c.get(f"/{t}/")).text
    assert str(runs[-1]) in first and str(runs[5]) in first and str(runs[4]) not in first
    assert first.count('data-status="verified"') >= 50 and "(UTC)" in first
    older = first.split('id="older" href="', 1)[1].split('"', 1)[0]
    assert older == f"/{t}/?before=5"
    second = (await c.get(older)).text
    assert all(str(r) in second for r in runs[:5]) and str(runs[5]) not in second
    assert 'id="older"' not in second and "newest runs" in second
    year = str(__import__("datetime").datetime.now(__import__("datetime").UTC).year)
    assert f"<td>{year}-" in second  # the time each run was sealed

    front = (await c.get("/")).text
    assert 'data-status="verified"' in front.split('id="failing"', 1)[1].split("</p>", 1)[0]
    # A record edited after its seal: the page that shows the run says so, and from then
    # on the front page names the run.
    async with store.engine.begin() as conn:
        raw = (
            await conn.execute(
                text("SELECT raw FROM journal WHERE tenant=:t AND run_id=:r AND seq=1"),
                {"t": t, "r": str(runs[2])},
            )
        ).scalar_one()
        await conn.execute(
            text("UPDATE journal SET raw=:raw WHERE tenant=:t AND run_id=:r AND seq=1"),
            {"raw": bytes(raw).replace(b"note 2", b"note X"), "t": t, "r": str(runs[2])},
        )
    assert 'data-status="failing"' in (await c.get(older)).text
    front = await c.get("/")
    alert = front.text.split('id="failing"', 1)[1].split("</div>", 1)[0]
    assert "FAILING" in alert and str(runs[2]) in alert and "seq 1" in alert
    # The stored tree damaged: the front page names the log's checkpoint as failing.
    async with store.engine.begin() as conn:
        await conn.execute(
            text("DELETE FROM log_tree WHERE tenant=:t AND level=0 AND idx=54"), {"t": t}
        )
    alert = (await c.get("/")).text.split('id="failing"', 1)[1].split("</div>", 1)[0]
    assert f'href="/{t}/"' in alert and "corrupt log at position" in alert, alert


WIDTH_PROBE = (
    "<script>document.body.setAttribute('data-width',"
    " String(document.documentElement.scrollWidth))</script>"
)


def _chromium(args: list[str], profile: Path) -> str:
    binary = shutil.which("chromium")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the audit page's layout test: chromium is not installed")
        pytest.skip("chromium is not installed")
    done = subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1280,800", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


# The layout is the same on both dialects (the pages' reads are tested on both): one run.
@pytest.mark.parametrize("dialect", ["sqlite"])
@pytest.mark.chromium
async def test_the_audit_pages_fit_a_1280_pixel_window(
    store: SqlJournalStore, client: Client, tmp_path: Path
) -> None:
    long_tenant = store.for_tenant("t" * 64)
    wide = "W" * 3000  # one unbroken word: the widest thing a record can hold
    run = RunId.generate()
    await long_tenant.append(0, [Append(run, "Note", {"text": wide, "more": {"k" * 200: wide}})])
    await long_tenant.seal(run, 0, "o" * 60)
    for i in range(3):
        await _run(long_tenant, f"{i}")
    async with store.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO run_seal (tenant, run_id, chain_head, log_index, sealed_at, outcome)"
                " VALUES (:t, :r, :h, 999, 1, :o)"
            ),
            {"t": long_tenant.tenant, "r": "R" * 500, "h": b"abc", "o": "O" * 500},
        )
    c = client(f"* {TOKEN_ALL}")
    c.headers["Authorization"] = f"Bearer {TOKEN_ALL}"
    base = "/" + "t" * 64
    pages = {"front": "/", "tenant": base + "/", "run": f"{base}/run/{run}"}
    for name, path in pages.items():
        body = (await c.get(path)).text
        assert wide[:100] in body or name != "run"
        page_file = tmp_path / f"{name}.html"
        page_file.write_text(body.replace("</body>", WIDTH_PROBE + "</body>"))
        dom = await asyncio.to_thread(
            _chromium, ["--dump-dom", page_file.as_uri()], tmp_path / f"p-{name}"
        )
        width = int(dom.split('data-width="', 1)[1].split('"', 1)[0])
        assert width <= 1280, (name, width)
    shot = tmp_path / "tenant.png"
    await asyncio.to_thread(
        _chromium,
        [f"--screenshot={shot}", (tmp_path / "tenant.html").as_uri()],
        tmp_path / "p-shot",
    )
    png = shot.read_bytes()
    if os.environ.get("KEEP_SHOT"):
        shutil.copy(shot, os.environ["KEEP_SHOT"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(png[16:20], "big") == 1280  # the IHDR width: the window's
