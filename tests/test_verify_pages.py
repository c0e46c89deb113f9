"""``store.verify`` over a run of several pages, on both dialects (issue 32's row pass).

An unsigned ``verify`` checks each page's rows and chain without building its records
(``db/row_chain.py``), the next page fetched meanwhile. Here a run of three pages verifies
to its head, and edits in a later page (a row deleted, a second ``EffectStarted`` of a key
started pages before, rewritten with valid hashes) are still each caught, named by seq,
signed or not.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from agentplane_journal import Append, CorruptRecordError, RunId, SqlJournalStore
from agentplane_journal.core.record import Record
from agentplane_journal.journal.reads import STREAM_PAGE

from support.helpers import key
from support.tamper import VERIFIER

N = 2 * STREAM_PAGE + 200  # three pages


async def _run(store: SqlJournalStore) -> RunId:
    run = RunId.generate()
    await store.append(1, [Append(run, "EffectStarted", {"n": 0}, step=1, effect_key=key(1))])
    for start in range(1, N, 500):
        appends = [Append(run, "Note", {"n": i}) for i in range(start, min(N, start + 500))]
        await store.append(1, appends)
    return run


async def _sql(store: SqlJournalStore, statement: str, **params: object) -> None:
    async with store.engine.begin() as conn:
        result = await conn.execute(text(statement), {"t": store.tenant, **params})
        assert result.rowcount == 1


async def test_a_run_of_three_pages_verifies_to_its_head(store: SqlJournalStore) -> None:
    run = await _run(store)
    head = await store.head(run)
    assert head.seq == N
    assert await store.verify(run) == head.hash
    assert await store.verify(run, VERIFIER) == head.hash


async def test_a_row_deleted_in_the_last_page_is_named(store: SqlJournalStore) -> None:
    run = await _run(store)
    gone = 2 * STREAM_PAGE + 50
    await _sql(
        store,
        "DELETE FROM journal WHERE tenant = :t AND run_id = :r AND seq = :s",
        r=str(run),
        s=gone,
    )
    for verifier in (None, VERIFIER):
        with pytest.raises(CorruptRecordError) as caught:
            await store.verify(run, verifier)
        assert caught.value.seq == gone + 1


@pytest.mark.parametrize("seq", [STREAM_PAGE + 7, 2 * STREAM_PAGE + 7])
async def test_a_second_start_rewritten_pages_after_the_first_is_named(
    store: SqlJournalStore, seq: int
) -> None:
    """A hash-valid rewrite of a later record into a second start of the first's key, every
    record after it rechained (the unique index keeps its effect_key column empty, so the
    row's columns and body disagree: the row pass doubts, the full checks name it)."""
    run = await _run(store)
    records = await store.read(run)
    prev = records[seq - 2].hash
    for record in records[seq - 1 :]:
        body = dict(record.body)
        if body["seq"] == seq:
            body = Append(run, "EffectStarted", {"n": 1}, step=2, effect_key=key(1)).body(seq, 1)
        new = Record.seal(body, prev)
        await _sql(
            store,
            "UPDATE journal SET prev_hash = :p, hash = :h, raw = :raw, kind = :k,"
            " effect_key = :e WHERE tenant = :t AND run_id = :r AND seq = :s",
            p=bytes(prev),
            h=bytes(new.hash),
            raw=new.raw,
            k=body["kind"],
            e=None,
            r=str(run),
            s=body["seq"],
        )
        prev = new.hash
    for verifier in (None, VERIFIER):
        with pytest.raises(CorruptRecordError, match="effect_key") as caught:
            await store.verify(run, verifier)
        assert caught.value.seq == seq
