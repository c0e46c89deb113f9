"""Hostile witnesses on loopback ports, and a garbage row in the cosignature table.

A tiny HTTP server (asyncio streams) answers as a witness would not: a byte every half
second, a 256 MiB body, a 409 whose size is no uint64 or more than any log holds. Each is
that witness's ``unavailable`` alone, reported beside an honest witness's cosignature, within
the round's deadline and without reading the huge body. A garbage stored cosignature (a size
beyond the log, a line that never verified) makes neither ``witness`` report a fork nor
``receipt`` fail. Both dialects.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from agentplane_journal import NoteSigner, SqlJournalStore
from agentplane_journal.tlog.cosignature import Cosigner
from agentplane_journal.witness.client import witness_round

from support.witnesses import W1, FakeWitness, seal_runs, witness_policy

LOG_SEED = bytes(range(32))
HUGE = 256 * 1024 * 1024

Serve = Callable[[str], Any]


async def _answer(mode: str, fake: FakeWitness, body: bytes, writer: asyncio.StreamWriter) -> None:
    if mode == "honest":
        request = httpx.Request("POST", "http://honest/add-checkpoint", content=body)
        response = fake.handle(request)
        head = (
            f"HTTP/1.1 {response.status_code} X\r\nContent-Length: {len(response.content)}\r\n"
            f"Content-Type: {response.headers.get('content-type', 'text/plain')}\r\n\r\n"
        )
        writer.write(head.encode() + response.content)
    elif mode == "slow":
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(1000):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.5)
    elif mode == "huge":
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {HUGE}\r\n\r\n".encode())
        chunk = b"A" * (1 << 20)
        for _ in range(HUGE // len(chunk)):
            writer.write(chunk)
            await writer.drain()
    else:  # a 409 whose body is ``mode``
        payload = mode.encode()
        writer.write(
            b"HTTP/1.1 409 Conflict\r\nContent-Type: text/x.tlog.size\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
    await writer.drain()


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``serve(mode, fake=None)`` -> the URL of a loopback witness answering as ``mode``."""
    servers: list[asyncio.Server] = []

    async def start(mode: str, fake: Any = None) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                await _answer(mode, fake, body, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass  # the client hung up: what a bounded client does
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.close()


async def test_hostile_witnesses_are_each_their_own_failure(
    store: SqlJournalStore, serve: Serve
) -> None:
    signer = NoteSigner(store.origin, LOG_SEED)
    honest = FakeWitness(W1, signer.verifier_key)
    hostile = {
        "slow": "slow",
        "huge": "huge",
        "uint64max": str((1 << 64) - 1),  # a valid uint64, more than any log holds
        "beyond": str(1 << 64),  # no uint64
        "negative": "-1",
        "hex": "0x10",
    }
    witnesses: list[tuple[str, Cosigner, str | None]] = [("a", W1, await serve("honest", honest))]
    for i, (name, mode) in enumerate(hostile.items()):
        cosigner = Cosigner(f"witness.example/{name}", bytes([i + 10] * 32))
        witnesses.append((name, cosigner, await serve(mode)))
    policy = witness_policy(*witnesses, quorum="quorum a")
    await seal_runs(store, 3)

    tracemalloc.start()
    started = time.monotonic()
    try:
        result = await witness_round(store, signer, policy, request_timeout=2.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    took = time.monotonic() - started
    outcomes = {o.witness: o for o in result.outcomes}
    assert outcomes["a"].status == "cosigned" and result.quorum_met and not result.forked
    for name in hostile:
        assert outcomes[name].status == "unavailable", outcomes[name]
    assert "within 2 s" in outcomes["slow"].detail
    assert "larger than 65536 bytes" in outcomes["huge"].detail
    assert "more leaves than any log" in outcomes["uint64max"].detail
    assert "not a tree size" in outcomes["beyond"].detail
    assert took < 10, took  # the deadline is per request, not per socket read
    assert peak < 32 * 1024 * 1024, peak  # the 256 MiB answer was not read


async def test_a_garbage_cosignature_row_is_never_used(
    store: SqlJournalStore, serve: Serve
) -> None:
    from agentplane_journal.cli.witness import _receipt

    signer = NoteSigner(store.origin, LOG_SEED)
    honest = FakeWitness(W1, signer.verifier_key)
    policy = witness_policy(("a", W1, await serve("honest", honest)), quorum="quorum a")
    runs = await seal_runs(store, 2)
    first = await witness_round(store, signer, policy)
    assert first.quorum_met
    async with store.engine.begin() as conn:
        for size in (1_000_000, (1 << 63) - 1):
            await conn.execute(
                text(
                    "INSERT INTO log_cosignature (tenant, tree_size, cosigner, key_id, root, "
                    "vkey, cosigned_at, line) VALUES (:t, :s, :c, :k, :r, :v, 1, 'garbage')"
                ),
                {
                    "t": store.tenant,
                    "s": size,
                    "c": W1.key.name,
                    "k": W1.key.key_hash,
                    "r": b"\x01" * 32,
                    "v": W1.key.vkey,
                },
            )
    await seal_runs(store, 1)
    second = await witness_round(store, signer, policy)
    (outcome,) = second.outcomes
    assert outcome.status == "cosigned" and "old size 2" in outcome.detail, outcome
    assert not second.forked and second.quorum_met
    receipt, cosigned, findings = await _receipt(store, str(runs[0]), signer)
    assert cosigned == 1 and receipt.index == 0
    assert any("beyond this log" in f for f in findings), findings
