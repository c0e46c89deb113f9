"""The lease protocol of agentplane 0.22.0 and its recovery queue, on both dialects.

agentplane 0.22.0's conformance battery, restated in our words (the battery's name of each
check is in its test's docstring): ``acquire`` claims and never renews, ``renew`` extends only
what is still held and never claims, a stale epoch cannot seal, the recovery queue names
the dead and not the finished, a sub-second TTL is refused rather than clamped, and an
unparsable stored run id is corruption, never skipped. The races are in
``tests/test_lease_races.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal import (
    CorruptRecordError,
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
    RunId,
    SqlJournalStore,
    StoreError,
)
from agentplane_journal.core.checks import MAX_I64

from support.clock import FakeClock
from support.helpers import admitted, note

LEASE = 300
SHORT = 1


@contextmanager
def statements(store: SqlJournalStore) -> Iterator[list[tuple[str, Any]]]:
    """The statements ``store``'s engine sends inside the block, with their parameters."""
    sent: list[tuple[str, Any]] = []

    def count(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    engine = store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", count)


async def holder(store: SqlJournalStore, run: RunId) -> LeaseHeldError:
    """Who holds ``run`` now, as a third party's refused claim reports it."""
    with pytest.raises(LeaseHeldError) as held:
        await store.acquire(run, "a-third-party", LEASE)
    return held.value


# -- acquire: a pure claim ---------------------------------------------------------------


async def test_acquire_refuses_a_live_lease_even_to_its_own_holder(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    """``acquire_claims_and_never_renews``: a same-owner acquire of a live lease is
    ``LeaseHeldError`` and changes nothing (no new expiry, no new epoch)."""
    run = RunId.generate()
    lease = await store.acquire(run, "instance-a", 60)
    clock.advance(20)
    with pytest.raises(LeaseHeldError) as caught:
        await store.acquire(run, "instance-a", 600)
    err = caught.value
    assert (err.run, err.owner, err.epoch, err.remaining_secs) == (run, "instance-a", 1, 40)
    assert lease.epoch == 1
    # the refused claim did not extend it: 40 s on, it is free, and the next claim fences it
    clock.advance(40)
    again = await store.acquire(run, "instance-a", 60)
    assert again.epoch == 2
    with pytest.raises(FencedError):
        await store.append(lease.epoch, [note(run)])


async def test_a_live_lease_is_not_stolen(store: SqlJournalStore) -> None:
    """``a_live_lease_is_not_stolen``: another owner's claim of a live lease is refused."""
    run = RunId.generate()
    await store.acquire(run, "instance-a", LEASE)
    with pytest.raises(LeaseHeldError) as caught:
        await store.acquire(run, "instance-b", LEASE)
    assert caught.value.owner == "instance-a"


@pytest.mark.parametrize("how", ["lapsed", "released"])
async def test_every_claim_advances_the_epoch_past_the_previous_holder(
    store: SqlJournalStore, clock: FakeClock, how: str
) -> None:
    """``a_takeover_advances_the_epoch`` and ``a_released_lease_is_free_at_once``: a claim
    of a lapsed or released lease is epoch + 1, for the previous owner itself too, and the
    previous epoch is fenced."""
    run = RunId.generate()
    first = await store.acquire(run, "instance-a", SHORT)
    await store.append(first.epoch, [admitted(run)])
    if how == "lapsed":
        clock.advance(SHORT)  # expires_at <= now is lapsed
    else:
        await store.release_lease(run, first.epoch)  # free at once: no TTL wait
    for owner, epoch in (("instance-a", 2), ("instance-b", 3)):
        lease = await store.acquire(run, owner, SHORT)
        assert lease.epoch == epoch
        with pytest.raises(FencedError):
            await store.append(epoch - 1, [note(run, "stale")])
        await store.release_lease(run, lease.epoch)


# -- renew: extends only what is still held ----------------------------------------------


async def test_a_renewal_extends_the_held_lease_and_keeps_its_epoch(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    """``a_renewal_extends_only_what_is_still_held``, the one case that succeeds."""
    run = RunId.generate()
    lease = await store.acquire(run, "instance-a", 10)
    await store.append(lease.epoch, [admitted(run)])
    for _ in range(3):  # a heartbeat: each renewal well inside the lease
        clock.advance(8)
        renewed = await store.renew(run, "instance-a", lease.epoch, 10)
        assert renewed == lease  # same run, owner and epoch: never fenced by its own heartbeat
    held = await holder(store, run)
    assert (held.owner, held.epoch, held.remaining_secs) == ("instance-a", 1, 10)
    await store.append(lease.epoch, [note(run, "still mine")])
    # a renewal may also shorten the lease: it sets now + ttl
    await store.renew(run, "instance-a", lease.epoch, timedelta(seconds=3))
    assert (await holder(store, run)).remaining_secs == 3


@pytest.mark.parametrize(
    "owner, epoch_delta",
    [("instance-b", 0), ("instance-a", 1), ("instance-a", -1)],
    ids=["another-owner", "a-fabricated-epoch", "an-older-epoch"],
)
async def test_a_renewal_by_anyone_but_the_holder_is_refused(
    store: SqlJournalStore, clock: FakeClock, owner: str, epoch_delta: int
) -> None:
    """``a_renewal_extends_only_what_is_still_held``: the wrong owner or the wrong epoch is
    a refusal, not a theft, and leaves the lease as it was."""
    run = RunId.generate()
    first = await store.acquire(run, "instance-a", SHORT)
    clock.advance(SHORT)
    lease = await store.acquire(run, "instance-a", 60)  # epoch 2, so an older epoch exists
    with pytest.raises(LeaseNotHeldError) as caught:
        await store.renew(run, owner, lease.epoch + epoch_delta, 600)
    err = caught.value
    assert (err.run, err.owner, err.epoch) == (run, owner, lease.epoch + epoch_delta)
    assert "held by 'instance-a' at epoch 2 for another 60s" in err.found
    assert "stop working on the run" in str(err)
    assert first.epoch == 1
    held = await holder(store, run)
    assert (held.owner, held.epoch, held.remaining_secs) == ("instance-a", 2, 60)


async def test_a_renewal_after_release_fails_and_the_run_is_never_abandoned(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    """``a_renewal_extends_only_what_is_still_held``: the heartbeat that races its run's
    conclusion. Released is gone: the late renewal fails, writes nothing, and the run never
    appears in the recovery queue, now or after any TTL."""
    run = RunId.generate()
    lease = await store.acquire(run, "instance-a", LEASE)
    await store.append(lease.epoch, [admitted(run)])
    await store.release_lease(run, lease.epoch)
    with pytest.raises(LeaseNotHeldError) as caught:
        await store.renew(run, "instance-a", lease.epoch, LEASE)
    assert caught.value.found == "the lease was released at epoch 1"
    with pytest.raises(FencedError):  # still released: every epoch fenced
        await store.append(lease.epoch, [note(run)])
    for _ in range(2):
        assert run not in await store.abandoned_runs(100)
        clock.advance(10 * LEASE)
    assert (await store.acquire(run, "instance-b", LEASE)).epoch == 2


async def test_a_renewal_of_a_lapsed_lease_fails_and_does_not_claim_it(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    """A lapsed lease is not its old owner's to renew, even when nobody has taken it yet:
    anyone may have, and whoever claims it next must fence the old epoch."""
    run = RunId.generate()
    lease = await store.acquire(run, "instance-a", 5)
    clock.advance(7)
    with pytest.raises(LeaseNotHeldError) as caught:
        await store.renew(run, "instance-a", lease.epoch, 60)
    assert caught.value.found == "'instance-a''s lease at epoch 1 lapsed 2s ago"
    assert await store.abandoned_runs(10) == [run]  # still stranded: the renewal wrote nothing
    assert (await store.acquire(run, "instance-b", 60)).epoch == 2


async def test_a_renewal_of_an_unleased_run_fails_and_creates_no_lease(
    store: SqlJournalStore,
) -> None:
    """A renewal never claims: an unleased run stays unleased (epoch-0 appends still land)."""
    run = RunId.generate()
    with pytest.raises(LeaseNotHeldError) as caught:
        await store.renew(run, "instance-a", 1, LEASE)
    assert caught.value.found == "the run has no lease"
    await store.append(0, [admitted(run)])
    assert (await store.acquire(run, "instance-a", LEASE)).epoch == 1


async def test_a_renewal_in_the_hosts_session_commits_with_it(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    """``session=``: the renewal is the host's transaction's; a rollback undoes it."""
    run = RunId.generate()
    lease = await store.acquire(run, "instance-a", 10)
    async with AsyncSession(store.engine) as session:
        async with session.begin():
            await store.renew(run, "instance-a", lease.epoch, 100, session=session)
            await session.rollback()
    assert (await holder(store, run)).remaining_secs == 10
    async with AsyncSession(store.engine) as session:
        async with session.begin():
            await store.renew(run, "instance-a", lease.epoch, 100, session=session)
            assert await store.abandoned_runs(10, session=session) == []
    assert (await holder(store, run)).remaining_secs == 100


# -- seal is fenced ----------------------------------------------------------------------


async def test_a_stale_epoch_cannot_seal(store: SqlJournalStore, clock: FakeClock) -> None:
    """``a_stale_epoch_cannot_seal``: a fabricated epoch and a fenced one are refused, and
    leave the run open; the current epoch seals it."""
    run = RunId.generate()
    old = await store.acquire(run, "instance-a", SHORT)
    await store.append(old.epoch, [admitted(run)])
    with pytest.raises(FencedError):
        await store.seal(run, old.epoch + 7, "succeeded")
    clock.advance(SHORT)
    lease = await store.acquire(run, "instance-b", LEASE)
    with pytest.raises(FencedError):
        await store.seal(run, old.epoch, "succeeded")
    assert await store.inclusion_proof(run) is None
    await store.append(lease.epoch, [note(run, "the new owner's")])
    head = await store.seal(run, lease.epoch, "succeeded")
    assert head == (await store.head(run)).hash


# -- the recovery queue ------------------------------------------------------------------


async def test_abandonment_names_the_dead_not_the_finished(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    """``abandonment_names_the_dead_not_the_finished``: of a run whose instance died
    holding it, one released, one sealed (and never released), one live, one taken over from
    the dead, one renewed and one never leased, only the dead one is listed."""
    dead, finished, sealed, alive, recovered, renewed, unleased = (
        RunId.generate() for _ in range(7)
    )
    for run in (dead, finished, sealed, recovered, renewed):
        lease = await store.acquire(run, f"owner-of-{run}", SHORT)
        await store.append(lease.epoch, [admitted(run)])
    await store.release_lease(finished, 1)
    await store.seal(sealed, 1, "succeeded")
    await store.acquire(alive, "instance-c", LEASE)
    await store.append(0, [admitted(unleased)])
    await store.renew(renewed, f"owner-of-{renewed}", 1, LEASE)
    assert await store.abandoned_runs(10) == []  # nothing has lapsed yet
    clock.advance(SHORT)
    assert set(await store.abandoned_runs(10)) == {dead, recovered}
    await store.acquire(recovered, "sweeper", LEASE)  # a takeover: it has an owner again
    assert await store.abandoned_runs(10) == [dead]


async def test_abandoned_runs_come_oldest_expiry_first_and_bounded(
    store: SqlJournalStore, clock: FakeClock
) -> None:
    """Oldest expiry first (the longest stranded is recovered first), ties by run id, at
    most ``limit``; expiry as ``acquire`` judges it (``expires_at <= now``)."""
    ttls = [5, 1, 3, 3, 3, 2]
    runs = [RunId.generate() for _ in ttls]
    for run, ttl in zip(runs, ttls, strict=True):
        await store.acquire(run, "instance-a", ttl)
    clock.advance(3)  # the 5 s lease is live; the 3 s ones lapsed exactly now
    by_expiry = sorted(zip(ttls, map(str, runs), runs, strict=True))
    expected = [run for ttl, _, run in by_expiry if ttl <= 3]
    assert await store.abandoned_runs(100) == expected
    assert await store.abandoned_runs(2) == expected[:2]
    assert await store.abandoned_runs(0) == []
    clock.advance(2)
    assert await store.abandoned_runs(100) == [run for _, _, run in by_expiry]


async def test_abandoned_runs_are_the_tenants_own(store: SqlJournalStore, clock: FakeClock) -> None:
    run, theirs = RunId.generate(), RunId.generate()
    other = store.for_tenant("another")
    await store.acquire(run, "instance-a", SHORT)
    await other.acquire(theirs, "instance-a", SHORT)
    clock.advance(SHORT)
    assert await store.abandoned_runs(10) == [run]
    assert await other.abandoned_runs(10) == [theirs]


@pytest.mark.parametrize(
    "value, error",
    [(-1, ValueError), (MAX_I64 + 1, ValueError), ("10", TypeError), (True, TypeError)],
)
async def test_abandoned_runs_checks_its_limit_before_any_statement(
    store: SqlJournalStore, value: Any, error: type[Exception]
) -> None:
    await store.head(RunId.generate())  # the schema check is done
    with statements(store) as sent, pytest.raises(error):
        await store.abandoned_runs(value)
    assert sent == []


@pytest.mark.parametrize("bad", ["run_not-a-ulid", "01J0000000000000000000000X", ""])
async def test_an_unparsable_run_id_in_the_queue_is_corruption(
    store: SqlJournalStore, clock: FakeClock, bad: str
) -> None:
    """``postgres_reports_an_unparsable_run_id_as_corruption``: a stranded run dropped from
    this list is never recovered, so a stored id that does not parse (or is not in its
    canonical ``run_<ULID>`` form) is ``CorruptRecordError``, never skipped."""
    fine = RunId.generate()
    await store.acquire(fine, "instance-a", SHORT)
    async with store.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO run_lease (tenant, run_id, owner, epoch, expires_at)"
                " VALUES (:tenant, :run_id, 'ghost', 1, :expires)"
            ),
            {"tenant": store.tenant, "run_id": bad, "expires": int(clock()) + SHORT},
        )
    assert await store.abandoned_runs(10) == []  # not lapsed yet: nothing to report
    clock.advance(SHORT)
    with pytest.raises(CorruptRecordError) as caught:
        await store.abandoned_runs(10)
    assert "run_lease.run_id" in str(caught.value)


# -- TTLs: whole seconds, refused rather than clamped --------------------------------------

SUB_SECOND = [
    timedelta(milliseconds=500),
    timedelta(microseconds=1),
    timedelta(0),
    timedelta(seconds=-1),
    timedelta(milliseconds=-500),
    0,
    -1,
    0.999,
    -0.5,
    float("nan"),
    float("inf"),
]


def _overflowing(clock: FakeClock) -> list[Any]:
    now = int(clock())
    return [MAX_I64 - now + 1, MAX_I64, float(MAX_I64), 2**64]


def _claims(store: SqlJournalStore, run: RunId) -> dict[str, Callable[[Any], Awaitable[Any]]]:
    return {
        "acquire": lambda ttl: store.acquire(run, "instance-a", ttl),
        "renew": lambda ttl: store.renew(run, "instance-a", 1, ttl),
    }


@pytest.mark.parametrize("call", ["acquire", "renew"])
async def test_a_sub_second_or_overflowing_ttl_is_refused_before_any_statement(
    store: SqlJournalStore, clock: FakeClock, call: str
) -> None:
    """``a_sub_second_lease_ttl_is_refused_not_clamped``: a TTL that truncates to zero
    seconds (or below) is a ``ValueError``, never a one-second lease, and so is one whose
    ``now + ttl`` does not fit the 64-bit ``expires_at`` (it would wrap into a lease born
    expired). Nothing is sent to the database."""
    run = RunId.generate()
    if call == "renew":
        await store.acquire(run, "instance-a", 60)
    else:
        await store.head(run)  # the schema check is done
    attempt = _claims(store, run)[call]
    for ttl in [*SUB_SECOND, *_overflowing(clock)]:
        with statements(store) as sent, pytest.raises(ValueError):
            await attempt(ttl)
        assert sent == [], f"ttl {ttl!r} was refused only after a statement"
    for ttl in ("60", True, None):
        with statements(store) as sent, pytest.raises(TypeError):
            await attempt(ttl)
        assert sent == []
    if call == "acquire":  # nothing was claimed
        with pytest.raises(LeaseNotHeldError):
            await store.renew(run, "instance-a", 1, 60)
    else:  # nothing was extended
        assert (await holder(store, run)).remaining_secs == 60


@pytest.mark.parametrize("call", ["acquire", "renew"])
@pytest.mark.parametrize(
    "ttl, whole", [(timedelta(seconds=1.5), 1), (timedelta(seconds=2.999), 2), (7.9, 7), (1, 1)]
)
async def test_a_fractional_ttl_is_truncated_to_whole_seconds(
    store: SqlJournalStore, clock: FakeClock, call: str, ttl: Any, whole: int
) -> None:
    """Whole-second granularity is the contract: 1.5 s is a 1-second lease, never 2."""
    run = RunId.generate()
    if call == "renew":
        await store.acquire(run, "instance-a", 60)
    await _claims(store, run)[call](ttl)
    assert (await holder(store, run)).remaining_secs == whole
    clock.advance(whole)
    assert (await store.acquire(run, "instance-b", LEASE)).epoch == 2


async def test_lease_not_held_is_a_store_error_with_its_fields() -> None:
    run = RunId.generate()
    err = LeaseNotHeldError(run, "instance-a", 3, "the lease was released at epoch 3")
    assert isinstance(err, StoreError)
    assert (err.run, err.owner, err.epoch) == (run, "instance-a", 3)
    assert str(run) in str(err) and "released at epoch 3" in str(err)
    assert "you no longer own it" in str(err)
    assert LeaseNotHeldError(str(run), "o", 1).run == run  # text is parsed, like the others


async def test_the_recovery_queue_is_read_from_its_partial_index(
    store: SqlJournalStore, dialect: str, clock: FakeClock
) -> None:
    """``abandoned_runs`` is served by ``run_lease_abandoned`` (``WHERE owner <> ''``), even
    where released rows dominate the table, and on PostgreSQL in a generic plan too (seen
    red with the literal ``''`` made a bound parameter: a sequential scan)."""
    now = int(clock())
    async with store.engine.begin() as conn:
        released = [
            {"tenant": store.tenant, "run_id": str(RunId.generate()), "owner": "", "exp": 0}
            for _ in range(3000)
        ]
        held = [
            {"tenant": store.tenant, "run_id": str(RunId.generate()), "owner": "w", "exp": now - i}
            for i in range(5)
        ]
        await conn.execute(
            text(
                "INSERT INTO run_lease (tenant, run_id, owner, epoch, expires_at)"
                " VALUES (:tenant, :run_id, :owner, 1, :exp)"
            ),
            released + held,
        )
        await conn.execute(text("ANALYZE run_lease" if dialect == "postgresql" else "ANALYZE"))
    with statements(store) as sent:
        listed = await store.abandoned_runs(3)
    assert [str(r) for r in listed] == [h["run_id"] for h in held[::-1][:3]]
    query, params = next((q, p) for q, p in sent if "run_lease" in q)
    async with store.engine.connect() as conn:
        if dialect == "sqlite":
            plans = [await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + query, params)]
        else:  # the plan of a prepared statement, as asyncpg runs it: custom, then generic
            await conn.exec_driver_sql(f"PREPARE abandoned AS {query}")
            args = ", ".join(f"'{p}'" if isinstance(p, str) else str(p) for p in params)
            plans = []
            for mode in ("force_custom_plan", "force_generic_plan"):
                await conn.exec_driver_sql(f"SET plan_cache_mode = {mode}")
                plans.append(await conn.exec_driver_sql(f"EXPLAIN EXECUTE abandoned({args})"))
        for rows in plans:
            plan = "\n".join(str(row[-1]) for row in rows)
            assert "run_lease_abandoned" in plan, plan
