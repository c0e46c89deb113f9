"""One validation layer for both dialects, shown by property: for every public argument, a
value is either refused with ``ValueError``/``TypeError`` before any statement runs, or it is
stored and reads back equal — on SQLite and on PostgreSQL alike. A value SQLite stores and
PostgreSQL refuses (NUL, a lone surrogate, an index row too long, ``now + ttl`` past 2^63)
used to fail only on PostgreSQL, inside the transaction; that is a validation bug.

Hypothesis drives plain (synchronous) tests; each dialect's store lives on its own event
loop for the module, and counts the statements its engine sends.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import event

from agentplane_journal import (
    Append,
    Cancellation,
    Ed25519Signer,
    LeaseHeldError,
    RunId,
    RunSealedError,
    SqlJournalStore,
)

from support.clock import FakeClock
from support.helpers import note

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: Strings as an attacker or a careless caller hands them over: anything, including NUL,
#: newlines and other control characters, lone surrogates, and values kilobytes long.
NASTY = st.sampled_from(["\x00", "\n", "\r", "\t", "\x1b", "\x7f", "\x85", "\ud800", "\udfff"])
TEXT = st.one_of(
    st.text(max_size=20),
    st.text(st.one_of(NASTY, st.characters()), max_size=20),
    st.builds(lambda c, n: c * n, st.characters(), st.integers(0, 4000)),
    st.builds(lambda s: s, st.characters(exclude_categories=())),
)
INTS = st.one_of(
    st.integers(-(2**64), 2**64),
    st.sampled_from([-1, 0, 1, 2**31, 2**63 - 1, 2**63, 2**64]),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)


class Harness:
    """A store on its own event loop, and the number of statements its engine has sent."""

    def __init__(self, url: str, clock: FakeClock) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = clock
        self.store: SqlJournalStore = self.run(
            SqlJournalStore.connect(url, tenant=f"v{uuid.uuid4().hex[:10]}", clock=clock)
        )
        self.statements = 0

        def count(*_: Any) -> None:
            self.statements += 1

        event.listen(self.store.engine.sync_engine, "before_cursor_execute", count)

    def run(self, coro: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self.store.close())
        self.loop.close()

    def stored_or_refused(
        self, call: Callable[[], Awaitable[Any]], check: Callable[[Any], Awaitable[None]]
    ) -> None:
        """``call()`` is refused before any statement, or ``check`` its stored result."""
        before = self.statements
        try:
            result = self.run(call())
        except (ValueError, TypeError):
            assert self.statements == before, "refused, but only after a statement ran"
            return
        self.run(check(result))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def h(
    request: pytest.FixtureRequest,
    sqlite_template: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Harness]:
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("validation") / "journal.db"
        shutil.copyfile(sqlite_template, path)
        url = f"sqlite+aiosqlite:///{path}"
    else:
        url = request.getfixturevalue("pg_battery_url")
    harness = Harness(url, FakeClock())
    yield harness
    harness.close()


@SETTINGS
@given(kind=TEXT)
@example(kind="a\x00b").via("NUL: PostgreSQL refuses it in text")
@example(kind="\ud800").via("a lone surrogate")
def test_kind(h: Harness, kind: Any) -> None:
    run = RunId.generate()

    async def check(records: Any) -> None:
        assert [r.kind for r in await h.store.read(run)] == [kind]

    h.stored_or_refused(lambda: h.store.append(1, [Append(run, kind)]), check)


@SETTINGS
@given(outcome=TEXT)
@example(outcome="x" * 3000).via("over the btree index row limit")
@example(outcome="ok\x00").via("NUL")
def test_a_run_sealed_records_outcome(h: Harness, outcome: Any) -> None:
    run = RunId.generate()

    async def append() -> Any:
        return await h.store.append(1, [Append(run, "RunSealed", {"outcome": outcome})])

    async def check(_: Any) -> None:
        assert run in await h.store.runs_by_outcome(outcome, 1000)
        assert (await h.store.read(run))[0].body["outcome"] == outcome

    h.stored_or_refused(append, check)


@SETTINGS
@given(outcome=TEXT)
@example(outcome="done\x00").via("NUL")
@example(outcome="x" * 3000).via("long")
def test_a_seals_outcome(h: Harness, outcome: Any) -> None:
    run = RunId.generate()
    h.run(h.store.append(1, [note(run)]))

    async def check(_: Any) -> None:
        with pytest.raises(RunSealedError) as sealed:
            await h.store.append(1, [note(run)])
        assert sealed.value.outcome == outcome

    h.stored_or_refused(lambda: h.store.seal(run, 1, outcome), check)
    h.stored_or_refused(lambda: h.store.runs_by_outcome(outcome, 1), _nothing)


@SETTINGS
@given(owner=TEXT, ttl=st.one_of(INTS, st.integers(1, 2**63)))
@example(owner="w", ttl=2**63 - 1).via("now + ttl overflows a bigint")
@example(owner="w\x00", ttl=60).via("NUL")
def test_a_leases_owner_and_ttl(h: Harness, owner: Any, ttl: Any) -> None:
    run = RunId.generate()

    async def check(lease: Any) -> None:
        assert lease.owner == owner
        with pytest.raises(LeaseHeldError) as held:
            await h.store.acquire(run, "somebody else", 60)
        assert held.value.owner == owner and held.value.remaining_secs == int(ttl)

    h.stored_or_refused(lambda: h.store.acquire(run, owner, ttl), check)


def _whole_seconds(ttl: Any) -> int:
    """A TTL as the store counts it: whole seconds, truncated (``check_ttl``)."""
    if isinstance(ttl, timedelta):
        return ttl // timedelta(seconds=1)
    return math.trunc(ttl)


@SETTINGS
@given(ttl=st.one_of(INTS, st.integers(1, 2**63), st.timedeltas()))
@example(ttl=timedelta(milliseconds=500)).via("sub-second: refused, never one second")
@example(ttl=timedelta(seconds=1.5)).via("truncated to whole seconds")
@example(ttl=2**63 - 1).via("now + ttl overflows a bigint")
def test_a_renewals_ttl(h: Harness, ttl: Any) -> None:
    run = RunId.generate()
    lease = h.run(h.store.acquire(run, "w", 60))

    async def check(renewed: Any) -> None:
        assert renewed == lease
        with pytest.raises(LeaseHeldError) as held:
            await h.store.acquire(run, "somebody else", 60)
        assert held.value.remaining_secs == _whole_seconds(ttl)

    h.stored_or_refused(lambda: h.store.renew(run, "w", lease.epoch, ttl), check)


@SETTINGS
@given(actor=TEXT, reason=TEXT)
@example(actor="ops\x00", reason="r").via("NUL")
@example(actor="ops", reason="r\x00").via("NUL")
def test_a_cancellations_actor_and_reason(h: Harness, actor: Any, reason: Any) -> None:
    run = RunId.generate()

    async def check(recorded: Any) -> None:
        assert recorded is True
        assert await h.store.cancellation(run) == Cancellation(actor, reason)

    h.stored_or_refused(lambda: h.store.request_cancel(run, actor, reason), check)


@SETTINGS
@given(key_id=TEXT)
@example(key_id="k\x00").via("NUL")
@example(key_id="k\nforged: line").via("newline")
@example(key_id="k" * 1_000_000).via("a megabyte")
@example(key_id="\udc80").via("a lone surrogate")
def test_a_signers_key_id(h: Harness, key_id: Any) -> None:
    run = RunId.generate()

    async def append() -> Any:
        signer = Ed25519Signer(key_id, bytes(32))
        signed = SqlJournalStore(h.store.engine, tenant=h.store.tenant, signer=signer)
        return await signed.append(1, [note(run)])

    async def check(_: Any) -> None:
        (record,) = await h.store.read(run)
        assert record.attestation is not None and record.attestation.key_id == key_id

    h.stored_or_refused(append, check)


@SETTINGS
@given(value=TEXT, name=TEXT)
def test_a_payload_field(h: Harness, value: Any, name: Any) -> None:
    run = RunId.generate()

    async def check(_: Any) -> None:
        (record,) = await h.store.read(run)
        assert record.body[name] == value

    h.stored_or_refused(lambda: h.store.append(1, [Append(run, "Note", {name: value})]), check)


@SETTINGS
@given(tenant=TEXT)
def test_a_tenant_name(h: Harness, tenant: Any) -> None:
    run = RunId.generate()

    async def append() -> Any:
        return await h.store.for_tenant(tenant).append(1, [note(run)])

    async def check(written: Any) -> None:
        assert await h.store.for_tenant(tenant).read(run) == written

    h.stored_or_refused(append, check)


@SETTINGS
@given(epoch=INTS, step=INTS)
def test_an_epoch_and_a_step(h: Harness, epoch: Any, step: Any) -> None:
    run = RunId.generate()

    async def check(_: Any) -> None:
        (record,) = await h.store.read(run)
        assert (record.epoch, record.step) == (epoch, step)

    h.stored_or_refused(lambda: h.store.append(epoch, [Append(run, "Note", step=step)]), check)


@SETTINGS
@given(number=INTS)
def test_the_integer_arguments_of_the_readers(h: Harness, number: Any) -> None:
    run = RunId.generate()
    for call in (
        lambda: h.store.read(run, number),
        lambda: h.store.recent_runs(None, number),
        lambda: h.store.runs_by_outcome("succeeded", number),
        lambda: h.store.release_lease(run, number),
        lambda: h.store.consistency_proof(number),
        lambda: h.store.audit_runs(None, number),
    ):
        try:
            h.stored_or_refused(call, _nothing)
        except Exception as error:  # a log smaller than old_size is the store's answer
            assert "larger than this log" in str(error), error


async def _nothing(_: Any) -> None:
    return None
