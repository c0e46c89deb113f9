"""Journals for agentplane 0.22's verdict (tests/test_interop22.py): what the steps layer
writes, a signed journal, and an agentplane-0.4-profile tenant, each exported to a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentplane_journal import Ed25519Signer, RunId, SqlJournalStore, Steps
from agentplane_journal.journal.export import write_export

from support.helpers import TRUSTED

SEED = bytes(range(32))
KEY_ID = "interop-k1"
# Numbers in every layout canon v1 has: exact ties (Rust's upper digit string), the
# [2^64, 1e21) doubles it prints as integers, exponent forms, integers at the u64 edge.
NUMBERS: list[Any] = [
    2.9802322387695312e-08,
    1973340522371668.2,
    1e20,
    2.0**64,
    9.999999999999999e20,
    1e21,
    1e-7,
    100.0,
    -0.0,
    0.1,
    2**64 - 1,
    -(2**63),
    5e-324,
]


def key_arg() -> str:
    """``--key ID=HEX`` for the signed journal's public key."""
    return f"{KEY_ID}=" + Ed25519Signer(KEY_ID, SEED).public_key.hex()


async def export(store: SqlJournalStore, path: Path) -> Path:
    with path.open("w", encoding="utf-8", newline="\n") as out:
        await write_export(store, out)
    return path


async def steps_journal(store: SqlJournalStore) -> None:
    """A workflow through the steps layer: an effect with a reconcile hook (its recovery),
    one without, numbers in the arguments and the output, sealed."""
    steps = Steps(store, instance="interop", lease_ttl=30)

    async def check(order: str, amounts: list[Any]) -> Any:
        from agentplane_journal import DidNotHappen

        return DidNotHappen()

    @steps.effect("pay", reconcile=check)
    async def pay(order: str, amounts: list[Any]) -> dict[str, Any]:
        return {"paid": amounts}

    @steps.effect("mail")
    async def mail(order: str, amounts: list[Any]) -> str:
        return "sent"

    @steps.workflow("checkout")
    async def checkout(order: str, amounts: list[Any]) -> dict[str, Any]:
        return {"receipt": await pay(order, amounts), "note": await mail(order, amounts)}

    for i in range(3):
        await checkout.start(f"order-{i}", f"o{i}", NUMBERS)


async def plain_journal(store: SqlJournalStore, runs: int = 4) -> None:
    """Records as a host writes them through the store (admission, an effect, notes with
    every number layout), sealed; signed when the store has a signer."""
    for i in range(runs):
        run = RunId.generate()
        p = store.profile
        admitted = {"capability": "c", "input": {"n": NUMBERS, "i": i}, "input_label": TRUSTED}
        await store.append(1, [p.append(run, "RunAdmitted", admitted)])
        args = {"n": NUMBERS, "i": i}
        effect = p.effect_key(0, "forward", i, 1, "probe", args)
        started = {
            "descriptor": {"kind": "probe", "args": args},
            "recovery": {"mode": "retry"},
            "mutates": True,
            "attempt": 1,
            "backoff_ms": 0,
        }
        await store.append(
            1,
            [
                p.append(run, "EffectStarted", started, step=0, effect_key=effect),
                p.append(run, "Note", {"text": f"run {i}"}),
            ],
        )
        head = await store.head(run)
        sealed = {"outcome": "succeeded", "chain_head": head.hash.hex()}
        await store.append(1, [p.append(run, "RunSealed", sealed)])
        await store.seal(run, 1, "succeeded")


def signer() -> Ed25519Signer:
    return Ed25519Signer(KEY_ID, SEED)
