"""The durable-steps layer in agentplane 0.22's bytes, and a run that outlives a migration.

``tests/test_steps.py`` runs the whole protocol on a tenant in each profile; here what only
the bytes can show: a 0.22 tenant's run is 0.22 records (record version 1, ``canon``, the
idempotency key, ``declared``) sealed over RFC 8785 bytes, its effect keys are 0.22's
derivation (a float argument's key differs from 0.4's), it is replayed from those records
after a crash without a second call, and a run admitted in 0.4 and resumed after the tenant
migrated keeps the keys it was admitted with.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from agentplane_journal import (
    AGENTPLANE_0_4,
    AGENTPLANE_0_22,
    DidNotHappen,
    Finished,
    Landed,
    SqlJournalStore,
    Steps,
    verify_chain,
)
from agentplane_journal.core.canon import canonical_bytes
from agentplane_journal.core.canon_v1 import canonical_bytes_v1
from agentplane_journal.steps.records import DECLARED

from support.clock import FakeClock

pytestmark = pytest.mark.slow

TTL = 30
AMOUNT = 100.0  # 100.0 in 0.4's bytes, 100 in 0.22's: a different key in each


class Crash(BaseException):
    """The process died here."""


def crash_at(name: str) -> Any:
    left = [1]

    def hook(at: str) -> None:
        if at == name and left[0]:
            left[0] -= 1
            raise Crash(at)

    return hook


def build(steps: Steps, calls: Counter[str]) -> Any:
    async def check(order: str, amount: float) -> Any:
        calls["reconcile"] += 1
        return Landed({"paid": amount}) if calls["pay"] else DidNotHappen()

    @steps.effect("pay", reconcile=check)
    async def pay(order: str, amount: float) -> dict[str, Any]:
        calls["pay"] += 1
        return {"paid": amount}

    @steps.effect("mail")
    async def mail(order: str, amount: float) -> str:
        calls["mail"] += 1
        return "sent"

    @steps.workflow("checkout")
    async def checkout(order: str, amount: float) -> dict[str, Any]:
        return {"receipt": await pay(order, amount), "note": await mail(order, amount)}

    return checkout


def args(*values: Any) -> dict[str, Any]:
    return {"args": list(values), "kwargs": {}}


@pytest.mark.parametrize("boundary", ["after_call", "after_result"])
async def test_a_022_run_is_022_records_replayed_after_a_crash(
    make_store: Any, clock: FakeClock, boundary: str
) -> None:
    calls: Counter[str] = Counter()
    dead = Steps(
        await make_store(profile="agentplane-0.22"),
        instance="dead",
        lease_ttl=TTL,
        _boundary=crash_at(boundary),
    )
    checkout = build(dead, calls)
    with pytest.raises(Crash):
        await checkout.start("order-1", "o1", AMOUNT)
    clock.advance(TTL + 1)
    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    alive = Steps(store, instance="alive", lease_ttl=TTL)
    build(alive, calls)
    (resumed,) = (await alive.sweeper().drain()).resumed
    assert resumed.error is None and resumed.result == {"receipt": {"paid": 100}, "note": "sent"}
    # replayed: the recorded call (or the reconciled one) is never made again
    assert calls["pay"] == 1 and calls["mail"] == 1
    assert calls["reconcile"] == (1 if boundary == "after_call" else 0)

    records = await store.read(resumed.run_id)
    kinds = [r.kind for r in records]
    middle = ["EffectReconciled"] if boundary == "after_call" else ["EffectDone"]
    assert kinds[:3] == ["RunAdmitted", "EffectStarted", *middle]
    assert kinds[3:] == ["EffectStarted", "EffectDone", "Note", "RunSealed"]  # the result note
    for record in records:  # every record is 0.22's: v1 over RFC 8785 bytes
        assert record.body["v"] == 1
        assert record.raw == canonical_bytes_v1(record.body, path="body")
    admitted = records[0]
    assert admitted.canon == 1 and admitted.idempotency_key == "order-1"
    assert b'"args":["o1",100]' in admitted.raw
    # the landed answer carries what the effect declared, in EffectDone and EffectReconciled
    assert records[2].declared == DECLARED and records[4].declared == DECLARED
    started = records[1]
    key = AGENTPLANE_0_22.effect_key(0, "forward", 0, 1, "pay", args("o1", AMOUNT))
    assert started.effect_key == key
    assert key != AGENTPLANE_0_4.effect_key(0, "forward", 0, 1, "pay", args("o1", AMOUNT))
    assert records[4].effect_key == AGENTPLANE_0_22.effect_key(
        0, "forward", 1, 1, "mail", args("o1", AMOUNT)
    )
    head = await store.verify(resumed.run_id)
    assert head == verify_chain(records) == records[-1].hash
    inclusion = await store.inclusion_proof(resumed.run_id)
    assert inclusion is not None and inclusion.verify((await store.checkpoint()).root)
    again = await checkout.start("order-1", "o1", AMOUNT)
    assert isinstance(again, Finished) and again.outcome.result == resumed.result


async def test_a_run_admitted_in_04_keeps_its_keys_after_the_tenant_migrates(
    make_store: Any, clock: FakeClock
) -> None:
    """Admitted and paid in 0.4; the tenant migrates; a worker dies after mailing (its start
    written in 0.22's bytes, the amount journaled as ``100``); the next one replays both."""
    calls: Counter[str] = Counter()
    old: SqlJournalStore = await make_store()
    assert old.profile is AGENTPLANE_0_4
    dead = Steps(old, instance="dead", lease_ttl=TTL, _boundary=crash_at("after_result"))
    with pytest.raises(Crash):
        await build(dead, calls).start("order-2", "o2", AMOUNT)
    await old.migrate_profile("agentplane-0.22")
    clock.advance(TTL + 1)
    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    dying = Steps(store, instance="dying", lease_ttl=TTL, _boundary=crash_at("after_result"))
    build(dying, calls)
    with pytest.raises(Crash):
        await dying.sweeper().drain()
    clock.advance(TTL + 1)
    alive = Steps(store, instance="alive", lease_ttl=TTL)
    build(alive, calls)
    (resumed,) = (await alive.sweeper().drain()).resumed
    assert resumed.error is None
    assert resumed.result == {"receipt": {"paid": 100.0}, "note": "sent"}
    assert calls["pay"] == 1 and calls["mail"] == 1  # both found under the run's 0.4 keys
    records = await store.read(resumed.run_id)
    assert [r.body["v"] for r in records] == [4, 4, 4, 1, 1, 1, 1]  # ..., result note, seal
    assert records[0].canon is None and b'"args":["o2",100]' in records[3].raw
    # keys stay the run's (0.4's derivation); bytes are the journal's from the migration on
    assert records[1].effect_key == AGENTPLANE_0_4.effect_key(
        0, "forward", 0, 1, "pay", args("o2", AMOUNT)
    )
    assert records[3].effect_key == AGENTPLANE_0_4.effect_key(
        0, "forward", 1, 1, "mail", args("o2", AMOUNT)
    )
    for record in records:
        canon = canonical_bytes if record.body["v"] == 4 else canonical_bytes_v1
        assert record.raw == canon(record.body, path="body")
    await store.verify(resumed.run_id)


async def test_a_run_started_before_canon_v1_followed_agentplanes_ties_keeps_its_keys(
    make_store: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 0.22 run whose arguments hold an exact tie, paid under the old rule (RFC 8785's even
    digits, before issue 36) and resumed under agentplane's: the payment is found under the
    key it was recorded with, not made twice."""
    from agentplane_journal.core import canon_v1

    tie = 1973340522371668.25  # RFC 8785: ...668.2, agentplane: ...668.3
    calls: Counter[str] = Counter()
    with monkeypatch.context() as old_rule:
        old_rule.setattr(canon_v1, "_tie_upper", lambda *_: None)
        dead = Steps(
            await make_store(profile="agentplane-0.22"),
            instance="dead",
            lease_ttl=TTL,
            _boundary=crash_at("after_result"),
        )
        with pytest.raises(Crash):
            await build(dead, calls).start("order-t", "ot", tie)
    clock.advance(TTL + 1)
    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    alive = Steps(store, instance="alive", lease_ttl=TTL)
    build(alive, calls)
    (resumed,) = (await alive.sweeper().drain()).resumed
    assert resumed.error is None
    assert calls["pay"] == 1 and calls["mail"] == 1
    records = await store.read(resumed.run_id)
    assert b"1973340522371668.2]" in records[1].raw  # the old bytes, as stored
    (mail,) = [r for r in records if r.kind == "EffectStarted" and b'"mail"' in r.raw]
    assert b"1973340522371668.3]" in mail.raw  # started under the new rule
    assert mail.effect_key == AGENTPLANE_0_22.effect_key(
        0, "forward", 1, 1, "mail", args("ot", tie)
    )


async def test_a_022_run_written_the_old_way_resumes_and_reads(
    make_store: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records written before issue 36 (no ``input_label``, a bare-string recovery, an
    ``ordinal``, the result on ``RunSealed``) still drive a resume, and a run concluded that
    way still answers its result; what is written from then on is agentplane 0.22's form."""
    from agentplane_journal.steps import records as steps_records

    calls: Counter[str] = Counter()
    with monkeypatch.context() as old:
        old.setattr(steps_records, "_is_022", lambda _: False)  # the writer before issue 36
        dead = Steps(
            await make_store(profile="agentplane-0.22"),
            instance="dead",
            lease_ttl=TTL,
            _boundary=crash_at("after_result"),
        )
        with pytest.raises(Crash):
            await build(dead, calls).start("order-o", "oo", 5.0)
        done = Steps(await make_store(profile="agentplane-0.22"), instance="done", lease_ttl=TTL)
        finished = await build(done, calls).start("order-p", "op", 6.0)
    clock.advance(TTL + 1)
    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    alive = Steps(store, instance="alive", lease_ttl=TTL)
    checkout = build(alive, calls)
    (resumed,) = (await alive.sweeper().drain()).resumed
    assert resumed.error is None and resumed.result == {"receipt": {"paid": 5}, "note": "sent"}
    assert calls["pay"] == 2 and calls["mail"] == 2  # one each per run, none twice
    records = await store.read(resumed.run_id)
    old_start, new_start = [r.body for r in records if r.kind == "EffectStarted"]
    assert old_start["recovery"] == "reconcile" and old_start["ordinal"] == 0
    assert "input_label" not in records[0].body
    assert new_start["recovery"] == {"mode": "requires_operator"} and "ordinal" not in new_start
    assert [r.kind for r in records][-2:] == ["Note", "RunSealed"]
    assert "output" not in records[-1].body
    again = await checkout.start("order-p", "op", 6.0)  # concluded the old way
    assert isinstance(again, Finished) and again.outcome.result == finished.result
    sealed = (await store.read(again.run_id))[-1]
    assert sealed.body["output"] == {"receipt": {"paid": 6}, "note": "sent"}


async def test_022_steps_records_are_agentplanes(make_store: Any) -> None:
    """input_label on the admission, Recovery's tagged form, no ordinal, the result in a
    note: the members agentplane 0.22's typed decode requires and keeps."""
    calls: Counter[str] = Counter()
    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    steps = Steps(store, instance="w", lease_ttl=TTL)
    done = await build(steps, calls).start("order-q", "oq", 7.0)
    records = await store.read(done.run_id)
    assert records[0].body["input_label"] == {
        "provenance": [],
        "trust": "untrusted",
        "sensitivity": "internal",
    }
    started = [r.body for r in records if r.kind == "EffectStarted"]
    assert [s["recovery"] for s in started] == [
        {"mode": "reconcile"},
        {"mode": "requires_operator"},
    ]
    assert not any("ordinal" in s for s in started)
    note, sealed = records[-2:]
    assert note.kind == "Note" and note.body["text"].startswith("agentplane_journal.steps.output ")
    assert sealed.kind == "RunSealed" and "output" not in sealed.body
    assert sealed.body["chain_head"] == note.hash.hex()
