"""``serve`` publishes only what it verified: a damaged stored tree is never signed or served.

The app runs in-process (httpx over ASGI, on the store's own event loop) on both dialects.
Each damage is one row edited around the store, as an attacker with write access to the
database (and no key) would: the last leaf deleted (a rollback), a node of the checkpoint's
frontier edited (a root no sealed heads produce), a leaf in the middle edited (a tile that
would not verify). Before and after the server has seen the intact log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from test_log import bulk_seal
from test_tiles import SEED, sealed_leaves

from agentplane_journal import SqlJournalStore
from agentplane_journal.core.note import NoteSigner
from agentplane_journal.web.app import make_app

Client = Callable[[], Any]


@pytest.fixture
async def client(store: SqlJournalStore) -> AsyncIterator[Client]:
    """``client()`` -> a fresh app (nothing verified yet) over ``store``, as an httpx client."""
    opened: list[httpx.AsyncClient] = []

    def make() -> httpx.AsyncClient:
        app = make_app(store, lambda origin: NoteSigner(origin, SEED))
        c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        opened.append(c)
        return c

    yield make
    for c in opened:
        await c.aclose()


DAMAGE = {
    "deleted last leaf": "DELETE FROM log_tree WHERE tenant=:t AND level=0 AND idx=301",
    "edited interior node": "UPDATE log_tree SET hash=:h WHERE tenant=:t AND level=8 AND idx=0",
    "edited leaf": "UPDATE log_tree SET hash=:h WHERE tenant=:t AND level=0 AND idx=5",
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

    async with store.engine.begin() as conn:
        await conn.execute(text(DAMAGE[damage]), {"t": t, "h": b"\x07" * 32})

    for c in (warm, client()):  # the server that saw the intact log, and a fresh one
        tile = await c.get(f"/{t}/tile/0/000")
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
    r = await c.get(f"/{t}/checkpoint")
    assert r.status_code == 200 and r.text.startswith(f"{store.origin}\n0\n")
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
