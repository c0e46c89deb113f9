"""Fake tlog witnesses, witness policies and sealed runs to cosign, for the witness and receipt
tests."""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx

from agentplane_journal import Checkpoint, Digest, RunId, SqlJournalStore
from agentplane_journal.tlog.cosignature import Cosigner
from agentplane_journal.tlog.merkle import EMPTY_ROOT, verify_consistency
from agentplane_journal.tlog.policy import parse_policy

from support.helpers import admitted, concluded, key, note, started

LOG_SEED = bytes(range(32))


W1 = Cosigner("witness.example/w1", bytes(range(1, 33)))


class FakeWitness:
    """A tlog-witness in memory: verifies the log signature and the consistency proof."""

    def __init__(self, cosigner: Cosigner, log_vkey: str) -> None:
        self.cosigner = cosigner
        self.log_vkey = log_vkey
        self.state: dict[str, tuple[int, Digest]] = {}
        self.requests = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        body = request.content.decode()
        head, _, note_text = body.partition("\n\n")
        lines = head.split("\n")
        old = int(lines[0].removeprefix("old "))
        proof = [Digest(base64.b64decode(x)) for x in lines[1:]]
        try:
            cp = Checkpoint.from_signed_note(note_text, [self.log_vkey])
        except ValueError:
            return httpx.Response(403)
        if old > cp.size:
            return httpx.Response(400)
        size, root = self.state.get(cp.origin, (0, EMPTY_ROOT))
        if old != size:
            return httpx.Response(
                409, content=f"{size}\n", headers={"content-type": "text/x.tlog.size"}
            )
        if old == cp.size:
            ok = root == cp.root
        elif old == 0:
            ok = not proof
        else:
            ok = verify_consistency(old, root, cp.size, cp.root, proof)
        if not ok:
            return httpx.Response(422)
        self.state[cp.origin] = (cp.size, cp.root)
        cosig = self.cosigner.cosign(cp.to_note(), int(time.time()))
        return httpx.Response(200, content=cosig.line)


def witness_policy(
    *witnesses: tuple[str, Cosigner, str | None], quorum: str, logs: str = ""
) -> Any:
    lines = [logs] if logs else []
    for name, cosigner, url in witnesses:
        lines.append(f"witness {name} {cosigner.key.vkey}" + (f" {url}" if url else ""))
    lines.append(quorum)
    return parse_policy("\n".join(lines) + "\n")


async def seal_runs(store: SqlJournalStore, n: int) -> list[RunId]:
    runs = []
    for _ in range(n):
        run = RunId.generate()
        lease = await store.acquire(run, "worker", 60)
        await store.append(lease.epoch, [admitted(run), started(run, key(1)), note(run)])
        await store.append(lease.epoch, [concluded(run, "succeeded")])
        await store.seal(run, lease.epoch, "succeeded")
        runs.append(run)
    return runs
