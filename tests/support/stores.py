"""Opening stores for a test and closing every one afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from support.clock import FakeClock


@asynccontextmanager
async def store_factory(
    cls: Any, url: str, tenant: str, clock: FakeClock
) -> AsyncIterator[Callable[..., Any]]:
    """``await make(**kw)`` -> a ``cls`` (journal or push store) on ``url``, closed afterwards."""
    opened: list[Any] = []

    async def make(**kw: Any) -> Any:
        kw.setdefault("tenant", tenant)
        kw.setdefault("clock", clock)
        store = await cls.connect(url, **kw)
        opened.append(store)
        return store

    try:
        yield make
    finally:
        for store in opened:
            await store.close()
