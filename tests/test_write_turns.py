"""SQLite's write turns (agentplane_journal/db/turns.py): one at a time, bounded, never leaked."""

from __future__ import annotations

import asyncio

from agentplane_journal.db.turns import WriteTurn


async def test_turns_are_taken_one_at_a_time_in_arrival_order() -> None:
    turn = WriteTurn()
    inside: list[int] = []
    order: list[int] = []

    async def writer(i: int) -> None:
        async with turn.taken():
            inside.append(i)
            assert len(inside) == 1, inside
            await asyncio.sleep(0.01)
            order.append(i)
            inside.remove(i)

    await asyncio.gather(*(writer(i) for i in range(5)))
    assert order == [0, 1, 2, 3, 4]


async def test_a_turn_not_given_in_time_goes_on_without_it() -> None:
    """A holder that keeps the turn past the timeout does not stall the next writer for
    good: it goes on to the database, whose busy handler judges (never a deadlock)."""
    turn = WriteTurn(timeout=0.05)
    release = asyncio.Event()

    async def holder() -> None:
        async with turn.taken():
            await release.wait()

    task = asyncio.create_task(holder())
    await asyncio.sleep(0)
    async with turn.taken():
        pass  # reached after the timeout, without the turn
    release.set()
    await task
    async with turn.taken():  # and the turn is free again afterwards
        pass


async def test_a_waiter_cancelled_while_waiting_leaves_the_turn_free() -> None:
    turn = WriteTurn()
    release = asyncio.Event()

    async def holder() -> None:
        async with turn.taken():
            await release.wait()

    async def waiter() -> None:
        async with turn.taken():
            raise AssertionError("a cancelled waiter took the turn")

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    second = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    second.cancel()
    release.set()
    await first
    await asyncio.gather(second, return_exceptions=True)
    await asyncio.wait_for(_take(turn), 1)  # free: taken at once


async def _take(turn: WriteTurn) -> None:
    async with turn.taken():
        pass


async def test_a_turn_just_handed_to_a_waiter_still_bounds_a_newcomer() -> None:
    """The free turn's fast path (no timer) is not taken in the loop turn between a release
    and the woken waiter taking the turn: a newcomer then queues with its timeout, so a
    waiter that keeps the turn cannot stall it for good. Seen red (hung) with the fast path
    looking only at ``locked()``."""
    turn = WriteTurn(timeout=0.05)
    got_in, done = asyncio.Event(), asyncio.Event()

    async def holder_then_newcomer() -> None:
        async with turn.taken():
            await asyncio.sleep(0.01)  # the waiter queues meanwhile
        # Released: the waiter is woken but has not run; come in at once, in this step.
        async with asyncio.timeout(1):
            await _take(turn)  # goes on without the turn after its timeout
        got_in.set()

    async def waiter() -> None:
        async with turn.taken():
            await done.wait()  # keeps the turn until the newcomer got through

    first = asyncio.create_task(holder_then_newcomer())
    await asyncio.sleep(0)
    second = asyncio.create_task(waiter())
    try:
        await first
        assert got_in.is_set()
    finally:
        done.set()
        await second
