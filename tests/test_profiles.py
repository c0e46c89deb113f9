"""Wire profiles: both, on both dialects, through what touches bytes; a journal refusing the other.

The battery subset (append on the hot path and the general one, append_atomic, read, verify,
seal, the checkpoint and an inclusion proof) runs once per profile and dialect; the bytes
are checked against each profile's rule (record version, ``RunAdmitted.canon``, the float
layout). Then the durable part: a tenant's profile is recorded, a handle in the other one is
refused before it writes, and ``migrate_profile`` is the only way across.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, pool, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from agentplane_journal import (
    AGENTPLANE_0_4,
    AGENTPLANE_0_22,
    Append,
    RunId,
    SqlJournalStore,
    WireProfile,
    WireProfileError,
    verify_chain,
)
from agentplane_journal.core.canon import canonical_bytes
from agentplane_journal.core.canon_v1 import canonical_bytes_v1
from agentplane_journal.core.ids import EffectKey
from agentplane_journal.core.profile import profile_named, profile_of_record
from agentplane_journal.db.models import Journal, JournalProfile
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations import commands as migrate

from support.helpers import TRUSTED
from support.tamper import tamper_cli

PROFILES = [AGENTPLANE_0_4, AGENTPLANE_0_22]
DECLARED = {"sensitivity": "public", "trust": "trusted"}
#: A payload whose bytes differ between the profiles (and one that does not).
AMOUNTS = {"amount": 100.0, "big": 1e16, "neg": -0.0, "exact": 2**53 + 1}


def _admitted(profile: WireProfile, run: RunId) -> Append:
    return profile.append(
        run, "RunAdmitted", {"capability": "c", "input": AMOUNTS, "input_label": TRUSTED}
    )


async def _count(store: SqlJournalStore, table: Any) -> int:
    async with store.engine.connect() as conn:
        stmt = select(func.count()).select_from(table).where(table.tenant == store.tenant)
        return int((await conn.execute(stmt)).scalar_one())


# -- pure: what each profile writes -------------------------------------------------------


def test_profiles_are_named_and_typed() -> None:
    assert profile_named("agentplane-0.4") is AGENTPLANE_0_4
    assert profile_named("agentplane-0.22") is AGENTPLANE_0_22
    assert (AGENTPLANE_0_4.record_version, AGENTPLANE_0_4.canon_version) == (4, None)
    assert (AGENTPLANE_0_22.record_version, AGENTPLANE_0_22.canon_version) == (1, 1)
    with pytest.raises(ValueError, match=r"agentplane-0\.4, agentplane-0\.22"):
        profile_named("agentplane-1.0")
    assert profile_of_record({"v": 1}) is AGENTPLANE_0_22
    assert profile_of_record({"v": 4}) is AGENTPLANE_0_4
    assert profile_of_record({"v": 3}) is None


def test_effect_keys_are_derived_from_the_profiles_canonical_bytes() -> None:
    args = {"amount": 100.0}
    old = AGENTPLANE_0_4.effect_key(0, "forward", 0, 1, "pay", args)
    new = AGENTPLANE_0_22.effect_key(0, "forward", 0, 1, "pay", args)
    assert old == EffectKey.derive(0, "forward", 0, 1, "pay", b'{"amount":100.0}')
    assert new == EffectKey.derive(0, "forward", 0, 1, "pay", b'{"amount":100}')
    assert old != new
    # without floats the two rules agree, so the keys do too
    ints = {"amount": 100, "to": "acct"}
    assert AGENTPLANE_0_4.effect_key(1, "compensating", 2, 3, "pay", ints) == (
        AGENTPLANE_0_22.effect_key(1, "compensating", 2, 3, "pay", ints)
    )


def test_profile_append_and_refusal() -> None:
    run = RunId.generate()
    new = _admitted(AGENTPLANE_0_22, run)
    assert new.v == 1 and new.payload["canon"] == 1
    assert AGENTPLANE_0_22.refusal(new) is None
    old = _admitted(AGENTPLANE_0_4, run)
    assert old.v == 4 and "canon" not in old.payload
    assert AGENTPLANE_0_4.refusal(old) is None
    refused = AGENTPLANE_0_22.refusal(old)
    assert refused is not None and "v=4" in refused and "profile.append" in refused
    assert "with a 'canon' member" in (
        AGENTPLANE_0_4.refusal(Append(run, "RunAdmitted", {"canon": 1})) or ""
    )
    no_canon = Append(run, "RunAdmitted", {"capability": "c"}, v=1)
    assert "must carry 'canon': 1" in (AGENTPLANE_0_22.refusal(no_canon) or "")


def test_the_022_members_are_checked_by_json_type() -> None:
    run = RunId.generate()
    for kind, payload, message in [
        ("RunSealed", {"outcome": "failed", "reason": None}, "'reason' member must be a string"),
        ("EffectFailed", {"error": "e", "permanent": 1}, "'permanent' member must be a boolean"),
        ("EffectDone", {"output": 1, "declared": "trusted"}, "'declared' member must be an obj"),
        ("EffectReconciled", {"declared": {"trust": 1}}, "'declared' member must be an object"),
        ("CaseBound", {"case_kind": "k", "correlation": {}}, "'correlation' member must be an"),
        ("RunAdmitted", {"canon": "1"}, "'canon' member must be an integer"),
        ("BudgetReadmitted", {}, "needs a 'limit' member"),
        ("BreakGlass", {"actor": "a", "roles": ["r"], "reason": " "}, "'reason' member must be a"),
        ("BreakGlass", {"actor": "a", "roles": [1], "reason": "r"}, "array of strings"),
    ]:
        with pytest.raises(ValueError, match=message):
            Append(run, kind, payload)
    # an EffectDone without 'declared' is 0.4.0's shape: 0.22 refuses it
    done = AGENTPLANE_0_22.append(run, "EffectDone", {"output": 1})
    assert "must carry 'declared'" in (AGENTPLANE_0_22.refusal(done) or "")


# -- both profiles, both dialects: the bytes through the store ----------------------------


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
async def test_the_byte_battery_in_each_profile(
    make_store: Callable[..., Any], profile: WireProfile
) -> None:
    store: SqlJournalStore = await make_store(profile=profile)
    assert store.profile is profile
    canon = canonical_bytes if profile is AGENTPLANE_0_4 else canonical_bytes_v1
    run = RunId.generate()
    epoch = (await store.acquire(run, "owner", 300)).epoch
    # the general unit (an admission, then a conclusion) and the hot path (notes, an effect)
    written = await store.append(epoch, [_admitted(profile, run)])
    effect = profile.effect_key(0, "forward", 0, 1, "pay", AMOUNTS)
    written += await store.append(
        epoch,
        [
            profile.append(run, "Note", {"text": "x", "score": 0.5, "whole": 3.0}),
            profile.append(
                run,
                "EffectStarted",
                {"descriptor": {"kind": "pay", "args": AMOUNTS}, "attempt": 1},
                step=0,
                effect_key=effect,
            ),
        ],
    )

    async def work(session: AsyncSession) -> list[Append]:
        return [profile.append(run, "EffectDone", {"output": 1e21, "declared": DECLARED})]

    written += await store.append_atomic(run, epoch, work)
    written += await store.append(
        epoch,
        [profile.append(run, "RunSealed", {"outcome": "succeeded", "reason": "all steps done"})],
    )
    assert [r.seq for r in written] == [1, 2, 3, 4, 5]
    for record in written:
        # every record is the profile's canonical bytes of its body, at its record version
        assert record.raw == canon(record.body, path="body")
        assert record.body["v"] == profile.record_version
        assert profile_of_record(record.body) is profile
    admission = json.loads(written[0].raw)
    if profile is AGENTPLANE_0_22:
        assert admission["canon"] == 1
        assert b'"amount":100,"big":10000000000000000,"exact":9007199254740993,"neg":0' in (
            written[0].raw
        )
        assert b'"output":1e+21' in written[3].raw
    else:
        assert "canon" not in admission
        assert b'"amount":100.0,"big":1e+16,"exact":9007199254740993,"neg":-0.0' in (written[0].raw)
    assert written[2].effect_key == effect
    # the typed view of 0.22.0's members, on what was written and read back
    assert written[0].canon == profile.canon_version
    assert written[3].declared == DECLARED and written[4].reason == "all steps done"
    assert written[1].canon is None and written[1].reason is None
    assert await store.read(run) == written
    head = await store.verify(run)
    assert head == written[-1].hash == verify_chain(written)
    sealed = await store.seal(run, epoch, "succeeded")
    assert sealed == head
    checkpoint = await store.checkpoint()
    inclusion = await store.inclusion_proof(run)
    assert inclusion is not None and inclusion.seal == head
    assert inclusion.verify(checkpoint.root)


# -- durable: recorded, refused, migrated -------------------------------------------------


async def test_a_journal_in_one_profile_refuses_a_handle_in_the_other(
    make_store: Callable[..., Any],
) -> None:
    new: SqlJournalStore = await make_store(profile="agentplane-0.22")
    run = RunId.generate()
    await new.append(0, [_admitted(AGENTPLANE_0_22, run)])
    with pytest.raises(
        WireProfileError,
        match=r"is in wire profile agentplane-0\.22.*opened with profile agentplane-0\.4",
    ) as caught:
        await make_store(profile="agentplane-0.4")
    assert (caught.value.recorded, caught.value.requested) == ("agentplane-0.22", "agentplane-0.4")
    # the journal's own profile, when none is asked for
    own: SqlJournalStore = await make_store()
    assert (await own.wire_profile()) is AGENTPLANE_0_22
    assert len(await own.read(run)) == 1
    # an append in the other profile's bytes is refused before anything is written
    with pytest.raises(ValueError, match="v=4 cannot be written"):
        await new.append(0, [_admitted(AGENTPLANE_0_4, RunId.generate())])
    with pytest.raises(ValueError, match="must carry 'canon': 1"):
        await new.append(0, [Append(RunId.generate(), "RunAdmitted", {"capability": "c"}, v=1)])
    assert await _count(new, Journal) == 1


async def test_a_04_journal_with_records_refuses_022_unless_migrated(
    make_store: Callable[..., Any],
) -> None:
    # a journal from before profiles: records, no journal_profile row
    old: SqlJournalStore = await make_store()
    assert (await old.wire_profile()) is AGENTPLANE_0_4
    run = RunId.generate()
    before = await old.append(0, [_admitted(AGENTPLANE_0_4, run)])
    assert await _count(old, JournalProfile) == 0  # opening as 0.4 writes nothing
    with pytest.raises(WireProfileError, match="written before wire profiles were recorded"):
        await make_store(profile=AGENTPLANE_0_22)
    assert await _count(old, JournalProfile) == 0  # the refused claim left nothing
    # explicitly across: old records keep their bytes and verify; new ones are 0.22's
    assert await old.migrate_profile(AGENTPLANE_0_22) is AGENTPLANE_0_4
    assert old.profile is AGENTPLANE_0_22
    after = await old.append(0, [AGENTPLANE_0_22.append(run, "Note", {"text": "v1", "x": 1.0})])
    assert after[0].raw.endswith(b'"text":"v1","v":1,"x":1}')
    records = await old.read(run)
    assert records == before + after
    assert [profile_of_record(r.body) for r in records] == [AGENTPLANE_0_4, AGENTPLANE_0_22]
    assert [r.profile for r in records] == [AGENTPLANE_0_4, AGENTPLANE_0_22]
    assert await old.verify(run) == after[0].hash
    reopened: SqlJournalStore = await make_store(profile=AGENTPLANE_0_22)
    assert await reopened.verify(run) == after[0].hash
    with pytest.raises(WireProfileError):
        await make_store(profile=AGENTPLANE_0_4)


async def test_each_tenant_has_its_own_profile(make_store: Callable[..., Any]) -> None:
    store: SqlJournalStore = await make_store()
    other = store.for_tenant(f"t{uuid.uuid4().hex[:8]}", profile="agentplane-0.22")
    assert (await other.wire_profile()) is AGENTPLANE_0_22
    assert (await store.wire_profile()) is AGENTPLANE_0_4
    with pytest.raises(WireProfileError):
        await store.for_tenant(other.tenant, profile="agentplane-0.4").wire_profile()


async def test_the_cli_shows_and_migrates_the_profile(
    make_store: Callable[..., Any], database_url: str
) -> None:
    store: SqlJournalStore = await make_store()
    await store.append(0, [_admitted(AGENTPLANE_0_4, RunId.generate())])
    common = ["--url", database_url, "--tenant", store.tenant]
    shown = await tamper_cli("profile", "--json", *common)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {
        "tenant": store.tenant,
        "profile": "agentplane-0.4",
        "record_version": 4,
        "canon_version": None,
    }
    moved = await tamper_cli("migrate-profile", "agentplane-0.22", *common)
    assert moved.returncode == 0, moved.stderr
    assert "agentplane-0.4 -> agentplane-0.22" in moved.stdout
    shown = await tamper_cli("profile", *common)
    assert "wire profile agentplane-0.22 (record v1, canon version 1)" in shown.stdout
    with pytest.raises(WireProfileError):
        await make_store(profile=AGENTPLANE_0_4)


async def test_the_new_kinds_and_members_are_accepted_and_read_typed(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store(profile=AGENTPLANE_0_22)
    run = RunId.generate()
    p = store.profile
    written = await store.append(
        0,
        [
            p.append(run, "RunAdmitted", {"capability": "c", "idempotency_key": "msg-1"}),
            p.append(run, "CaseBound", {"case_kind": "k", "opened": True, "correlation": ["m"]}),
            p.append(run, "EffectFailed", {"error": "no", "permanent": True}),
            p.append(run, "EffectReconciled", {"output": 2, "declared": DECLARED}),
            p.append(run, "BudgetReadmitted", {"limit": "tokens 2000"}, step=1),
            p.append(run, "BreakGlass", {"actor": "op", "roles": ["sre"], "reason": "incident"}),
            p.append(run, "RunSealed", {"outcome": "failed", "reason": "refused"}),
        ],
    )
    back = await store.read(run)
    assert back == written
    assert back[0].idempotency_key == "msg-1" and back[0].canon == 1
    assert back[1].correlation == ["m"] and back[0].correlation == []
    assert back[2].permanent is True and back[3].permanent is False
    assert back[3].declared == DECLARED
    assert [r.kind for r in back[4:6]] == ["BudgetReadmitted", "BreakGlass"]
    assert back[6].reason == "refused"
    assert await store.admitted_as("msg-1") == run
    assert await store.runs_by_outcome("failed", 10) == [run]


async def _downgrade(url: str, revision: str) -> None:
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(lambda c: migrate.downgrade_connection(c, revision))
    finally:
        await engine.dispose()


@pytest.fixture
def own_url(dialect: str, request: pytest.FixtureRequest) -> str:
    """A migrated database of this test's own (the PostgreSQL battery's is shared)."""
    if dialect == "sqlite":
        return str(request.getfixturevalue("sqlite_database")())
    return str(request.getfixturevalue("pg_database")())


async def test_the_revision_downgrades_only_when_no_tenant_would_change_profile(
    own_url: str,
) -> None:
    store = await SqlJournalStore.connect(own_url, profile=AGENTPLANE_0_22)
    run = RunId.generate()
    await store.append(0, [_admitted(AGENTPLANE_0_22, run)])
    await store.close()
    with pytest.raises(ValueError, match=r"tenant\(s\) are recorded in a wire profile other"):
        await _downgrade(own_url, "0004_checks")
    # Refused before any step ran: 0006's downgrade asks 0005's question first, since
    # SQLite's alembic commits each revision by itself (nothing dropped, not even 0006's).
    assert await migrate.current_revision(own_url) == HEAD_REVISION
    again = await SqlJournalStore.connect(own_url)
    try:
        assert again.profile is AGENTPLANE_0_22  # nothing was changed
        await again.migrate_profile(AGENTPLANE_0_4)
    finally:
        await again.close()
    await _downgrade(own_url, "0004_checks")
    assert await migrate.current_revision(own_url) == "0004_checks"
    await migrate.upgrade(own_url)
    back = await SqlJournalStore.connect(own_url)
    try:
        assert back.profile is AGENTPLANE_0_4
        assert len(await back.read(run)) == 1
    finally:
        await back.close()
