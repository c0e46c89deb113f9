"""Every committed record against the real-time order of the acknowledgements (PostgreSQL).

Many tasks on separate stores (each its own engine, so its own connections and its own
hot-path writer) append epoch-0 and leased records to many runs (by the hot statements,
groups, and ``append_atomic`` units whose work takes a moment) while others acquire, renew,
take over (the shared fake clock lets leases lapse), release and finally seal them. The moment a
lease change or a seal returns, the run's head is read on the primary: every record past
that head committed *after* the acknowledgement, and so must obey it, whatever the
interleaving:

* no record past the head read after a seal returned;
* no epoch-0 record past the head read after any acquire returned;
* no record at an epoch below E past the head read after an acquire of epoch E returned;
* no record at epoch e past the head read after the release of epoch e returned.

The check is sound (a record is held only to what returned before it became visible), so
any violation is real. Seen red with the run mutex taken out of ``acquire``
(:meth:`RunControl._take_mutex` returning at once): epoch-0 and stale records past a first
acquire's or a takeover's head.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentplane_journal import (
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
    RunId,
    RunSealedError,
    SqlJournalStore,
)

from support.clock import FakeClock
from support.helpers import note

pytestmark = [pytest.mark.postgres, pytest.mark.race]

STORES = 8
RUNS = 12
SECONDS = 3.0
#: The race is sized by what it reached, not by the clock, so a loaded machine slows it but
#: never leaves it too little to judge: owners take their first lease only after this many
#: epoch-0 records committed, and sealers seal only after this many leased ones did (each
#: wait capped by CAP seconds, after which the guard below says what was missing).
ZERO_WANTED = 30
LEASED_WANTED = 10
CAP = 120.0


@dataclass
class History:
    """Appends by text; per run, each acknowledged lease change or seal with the head read
    right after it returned: (head seq, epoch)."""

    appends: dict[str, tuple[RunId, int]] = field(default_factory=dict)
    acquired: dict[RunId, list[tuple[int, int]]] = field(default_factory=dict)
    released: dict[RunId, list[tuple[int, int]]] = field(default_factory=dict)
    sealed: dict[RunId, list[int]] = field(default_factory=dict)
    epochs: dict[RunId, int] = field(default_factory=dict)  # the newest epoch handed out
    unexpected: list[BaseException] = field(default_factory=list)
    committed: dict[bool, int] = field(default_factory=lambda: {False: 0, True: 0})
    wanted: dict[bool, tuple[int, asyncio.Event]] = field(default_factory=dict)

    def commit(self, leased: bool) -> None:
        self.committed[leased] += 1
        if leased in self.wanted and self.committed[leased] >= self.wanted[leased][0]:
            self.wanted[leased][1].set()

    async def reached(self, leased: bool, count: int) -> None:
        """Until ``count`` records (leased or epoch-0) committed, or CAP seconds."""
        if self.committed[leased] >= count:
            return
        event = self.wanted.setdefault(leased, (count, asyncio.Event()))[1]
        try:
            await asyncio.wait_for(event.wait(), CAP)
        except TimeoutError:
            pass

    async def after(
        self, store: SqlJournalStore, run: RunId, into: dict[RunId, list[Any]], epoch: int | None
    ) -> None:
        seen = (await store.head(run)).seq
        into.setdefault(run, []).append(seen if epoch is None else (seen, epoch))


async def appender(
    store: SqlJournalStore, run: RunId, h: History, leased: bool, stop: Any, atomic: bool = False
) -> None:
    """Appends until stopped; ``atomic``: by ``append_atomic`` whose work takes a moment
    (between the fence and the commit, where a lease change must not overtake it)."""
    rng = random.Random(f"{run}{leased}{atomic}")
    for n in itertools.count():
        if stop.is_set():
            return
        epoch = h.epochs.get(run, 0) if leased else 0
        text = f"{id(store)}-{run}-{leased}-{atomic}-{n}"
        h.appends[text] = (run, epoch)

        async def work(session: Any, text: str = text) -> list[Any]:
            await asyncio.sleep(rng.random() * 0.003)
            return [note(run, text)]

        try:
            if atomic:
                await store.append_atomic(run, epoch, work)
            else:
                await store.append(epoch, [note(run, text)])
            h.commit(epoch > 0)
        except (FencedError, RunSealedError):
            await asyncio.sleep(0)
        except Exception as exc:
            h.unexpected.append(exc)


async def owner(
    store: SqlJournalStore, run: RunId, h: History, clock: FakeClock, stop: Any, name: str
) -> None:
    rng = random.Random(name)
    await h.reached(False, ZERO_WANTED)  # epoch-0 records poured in first, then
    await asyncio.sleep(rng.random() * SECONDS * 0.6)  # first acquires all along the race
    held: int | None = None  # the epoch this owner holds
    while not stop.is_set():
        try:
            if held is None:
                lease = await store.acquire(run, name, 2)
            else:  # the heartbeat (acquire never renews)
                lease = await store.renew(run, name, held, 2)
        except LeaseNotHeldError:
            held = None  # it lapsed (and may have been taken over): claim it again
            continue
        except LeaseHeldError:
            await asyncio.sleep(0.005)
            if rng.random() < 0.1:
                clock.advance(3)  # let the holder's lease lapse: a takeover follows
            continue
        except Exception as exc:
            h.unexpected.append(exc)
            continue
        held = lease.epoch
        await h.after(store, run, h.acquired, lease.epoch)
        h.epochs[run] = max(h.epochs.get(run, 0), lease.epoch)
        await asyncio.sleep(rng.random() * 0.02)
        if rng.random() < 0.1:
            await store.release_lease(run, lease.epoch)
            held = None
            await h.after(store, run, h.released, lease.epoch)


async def sealer(store: SqlJournalStore, run: RunId, h: History, clock: FakeClock) -> None:
    await asyncio.sleep(SECONDS * 0.8)
    await h.reached(True, LEASED_WANTED)
    for _ in range(500):
        try:
            lease = await store.acquire(run, "sealer", 60)
        except LeaseHeldError:
            clock.advance(3)
            await asyncio.sleep(0.002)
            continue
        await h.after(store, run, h.acquired, lease.epoch)
        h.epochs[run] = max(h.epochs.get(run, 0), lease.epoch)
        try:
            await store.seal(run, lease.epoch, "done")
        except FencedError:
            continue  # an owner took it over in between
        await h.after(store, run, h.sealed, None)
        return


async def first_owner(store: SqlJournalStore, run: RunId, h: History, name: str) -> None:
    """One first acquire at a random moment of the race, while epoch-0 appends pour in."""
    await asyncio.sleep(random.Random(name).random() * SECONDS * 0.8)
    lease = await store.acquire(run, name, 300)
    await h.after(store, run, h.acquired, lease.epoch)
    h.epochs[run] = lease.epoch


def violations(h: History, records: dict[RunId, list[Any]]) -> list[str]:
    found = []
    for run, chain in records.items():
        for r in chain:
            text = r.body.get("text")
            if text not in h.appends:
                continue
            epoch = h.appends[text][1]
            assert r.epoch == epoch
            if any(r.seq > seen for seen in h.sealed.get(run, [])):
                found.append(f"{text} (seq {r.seq}): committed after a seal returned")
            for seen, e in h.acquired.get(run, []):
                if r.seq > seen and epoch < e:
                    found.append(f"{text} (seq {r.seq}): epoch {epoch} after epoch {e} returned")
            for seen, e in h.released.get(run, []):
                if r.seq > seen and epoch == e:
                    found.append(f"{text} (seq {r.seq}): epoch {epoch} after its release returned")
    return found


async def test_every_committed_record_respects_every_acknowledged_lease_change_and_seal(
    pg_battery_url: str, clock: FakeClock
) -> None:
    tenant = f"lin{uuid.uuid4().hex[:10]}"
    stores = [
        await SqlJournalStore.connect(pg_battery_url, tenant=tenant, clock=clock)
        for _ in range(STORES)
    ]
    try:
        runs = [RunId.generate() for _ in range(RUNS)]
        for run in runs:  # every store knows every head: the hot paths are in play
            for s in stores:
                await s.append(0, [note(run, "warm")])
        h = History()
        stop = asyncio.Event()
        tasks = []
        for i, run in enumerate(runs):
            for j in range(3):
                s = stores[(i + j) % STORES]
                tasks.append(appender(s, run, h, leased=j % 2 == 1, stop=stop, atomic=j == 2))
            for j in range(2):
                s = stores[(i + j + 4) % STORES]
                tasks.append(owner(s, run, h, clock, stop, f"owner-{i}-{j}"))
        sealers = [sealer(stores[(i + 6) % STORES], run, h, clock) for i, run in enumerate(runs)]

        async def stopper() -> None:
            # Until every run is sealed (the last acknowledgement the race judges), and at
            # least SECONDS: the race ends by what happened, not by the clock alone.
            await asyncio.gather(asyncio.gather(*sealers), asyncio.sleep(SECONDS))
            stop.set()

        await asyncio.wait_for(asyncio.gather(*tasks, stopper()), 2 * CAP + 120)
        assert not h.unexpected, h.unexpected[:3]
        records = {run: await stores[0].read(run) for run in runs}
        for run in runs:
            await stores[0].verify(run)
            assert h.sealed.get(run), f"{run} was never sealed"
        written = [r for c in records.values() for r in c if r.body.get("text") in h.appends]
        zero, leased = sum(r.epoch == 0 for r in written), sum(r.epoch > 0 for r in written)
        acquires = sum(map(len, h.acquired.values()))
        assert zero > 20 and leased > 5 and acquires > 10 and any(h.released.values()), (
            f"too little happened to judge: {zero} epoch-0 and {leased} leased records, "
            f"{acquires} acquires"
        )
        found = violations(h, records)
        assert not found, found[:5]
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_no_epoch_0_record_commits_after_a_first_acquire_returned(
    pg_battery_url: str, clock: FakeClock
) -> None:
    """The first lease of many runs, each taken while epoch-0 appends to it pour in from
    other stores (hot statements, groups and general units alike)."""
    tenant = f"lin{uuid.uuid4().hex[:10]}"
    stores = [
        await SqlJournalStore.connect(pg_battery_url, tenant=tenant, clock=clock)
        for _ in range(STORES)
    ]
    try:
        runs = [RunId.generate() for _ in range(4 * RUNS)]
        for run in runs:
            for s in stores[:3]:
                await s.append(0, [note(run, "warm")])
        h = History()
        stop = asyncio.Event()
        tasks = []
        for i, run in enumerate(runs):
            for j in range(3):
                s = stores[(i + j) % STORES]
                tasks.append(appender(s, run, h, leased=False, stop=stop, atomic=j == 2))
            tasks.append(first_owner(stores[(i + 3) % STORES], run, h, f"first-{i}"))

        async def stopper() -> None:
            await asyncio.sleep(SECONDS)
            stop.set()

        await asyncio.wait_for(asyncio.gather(*tasks, stopper()), SECONDS + 60)
        assert not h.unexpected, h.unexpected[:3]
        records = {run: await stores[0].read(run) for run in runs}
        assert sum(map(len, h.acquired.values())) == len(runs)
        found = violations(h, records)
        assert not found, found[:5]
    finally:
        await asyncio.gather(*(s.close() for s in stores))
