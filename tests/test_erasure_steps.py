"""Durable steps over a SealingStore: effect arguments, results and the run's result sealed
under the run's scope with no change to the steps layer; a resumed run replays from opened
records; after an erasure the run still verifies and lists, its payloads stay sealed."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import Finished, SqlJournalStore, Steps
from agentplane_journal.core.sealed import is_sealed
from agentplane_journal.keyring import FileKeySource, Keyring, SealedJournal
from agentplane_journal.keyring.store import SealingStore


class Crash(BaseException):
    """The process died here."""


@pytest.mark.parametrize("profile", ["agentplane-0.4", "agentplane-0.22"])
async def test_steps_seal_their_payloads_and_resume_from_opened_records(
    make_store: Any, clock: Any, tmp_path: Path, profile: str
) -> None:
    store: SqlJournalStore = await make_store(profile=profile)
    keyring = Keyring(FileKeySource(tmp_path / "keys.json"))
    sealing = SealingStore(store, keyring)
    calls: list[str] = []
    left = [1]

    def crash_once(at: str) -> None:
        if at == "after_result" and left[0] > 0:
            left[0] -= 1
            raise Crash(at)

    def build(steps: Steps) -> Any:
        @steps.effect("charge")
        async def charge(card: str, amount: int) -> dict[str, Any]:
            calls.append(card)
            return {"charge": f"ch_{card}", "amount": amount}

        @steps.workflow("checkout")
        async def checkout(card: str, amount: int) -> dict[str, Any]:
            return await charge(card, amount)

        return checkout

    dying = build(Steps(sealing, instance="dead", lease_ttl=30, _boundary=crash_once))
    with pytest.raises(Crash):
        await dying.start("order-1", "4111", 100)
    clock.advance(31)
    alive = Steps(sealing, instance="w1", lease_ttl=30)
    checkout = build(alive)
    report = await alive.sweeper().drain()
    (run,) = await store.runs_by_outcome("succeeded", 10)
    assert [r.run_id for r in report.resumed] == [run] and report.resumed[0].error is None
    assert calls == ["4111"], "the effect ran again on resume"

    raw = b"".join(r.raw for r in await store.read(run))
    assert b"4111" not in raw and b"ch_4111" not in raw
    bodies = [r.body for r in await store.read(run)]
    assert any(b["kind"] == "EffectDone" and is_sealed(b["output"]) for b in bodies)
    opened = [r.body for r in await sealing.read(run)]
    done = next(b for b in opened if b["kind"] == "EffectDone")
    assert done["output"] == {"charge": "ch_4111", "amount": 100}
    again = await checkout.start("order-1", "4111", 100)  # the recorded outcome
    assert isinstance(again, Finished)
    assert again.outcome.result == {"charge": "ch_4111", "amount": 100}

    head = await store.verify(run)
    journal = SealedJournal(store, keyring)
    await journal.erase(journal.scope(run), by="dpo")
    assert await store.verify(run) == head
    after = [r.body for r in await sealing.read(run)]
    assert is_sealed(next(b for b in after if b["kind"] == "EffectDone")["output"])


async def test_steps_for_another_tenant_seal_under_that_tenants_scopes(
    make_store: Any, tmp_path: Path
) -> None:
    store: SqlJournalStore = await make_store()
    other = f"{store.tenant}-other"
    steps = Steps(
        SealingStore(store, Keyring(FileKeySource(tmp_path / "k.json"))),
        instance="w",
        tenant=other,
    )

    @steps.effect("echo")
    async def echo(text: str) -> str:
        return text

    @steps.workflow("hello")
    async def hello(text: str) -> str:
        return await echo(text)

    done = await hello.start("k-1", "secret words")
    acme = store.for_tenant(other)
    raw = b"".join(r.raw for r in await acme.read(done.run_id))
    assert b"secret words" not in raw and f"{other}/run_".encode() in b"".join(
        base64.b64decode(r.body["input"]["$sealed"])
        for r in await acme.read(done.run_id)
        if r.kind == "RunAdmitted"
    )
