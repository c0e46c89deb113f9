"""What ``case_history`` can see, and that ``verify`` reports what it cannot (issue 18).

``case_history`` finds a record by its ``case_id`` column or by its case's ULID in its bytes.
A hash-valid record that spells its case with JSON escapes and whose ``case_id`` column was
NULLed offers neither: ``case_history`` cannot see it. Such a record is corrupt (every read
refuses a ``case`` member not written literally, and the column disagrees with the body),
and ``verify`` of its run, which reads every record, names it. On both dialects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from agentplane_journal import CorruptRecordError

from support.tamper import VERIFIER, Victim, honest_run


def _escaped(victim: Victim, *, escape_key: bool = False) -> bytes:
    """Seq 3 (a Note) naming the victim's case, its last ULID character as ``\\u00XX``."""
    ulid = victim.case.ulid
    body = {"seq": 3, "run": victim.run.ulid, "epoch": 1, "v": 4, "kind": "Note", "case": ulid}
    text = json.dumps(body, separators=(",", ":"))
    spelled = ulid[:-1] + f"\\u{ord(ulid[-1]):04x}"
    text = text.replace(f'"{ulid}"', f'"{spelled}"')
    if escape_key:
        text = text.replace('"case"', '"\\u0063ase"')
    assert json.loads(text)["case"] == ulid and ulid.encode() not in text.encode()
    return text.encode()


@pytest.mark.parametrize("escape_key", [False, True])
async def test_a_case_spelled_with_escapes_and_a_nulled_column_is_reported_by_verify(
    make_store: Callable[..., Any], escape_key: bool
) -> None:
    store = await make_store()
    victim = await honest_run(store)
    await victim.rewrite_body(3, _escaped(victim, escape_key=escape_key))
    # The case_id column of seq 3 is NULL (a Note was written without a case): exactly what
    # an attacker who NULLs the column of a record naming the case leaves behind.

    # case_history cannot see it: neither the column nor the bytes name the case.
    history = await store.case_history(victim.case, 10)
    assert [(r.run, r.seq) for r in history] == [(victim.run, 1)]
    # verify (and every read of the run) reports it.
    with pytest.raises(CorruptRecordError) as caught:
        await store.verify(victim.run)
    assert caught.value.seq == 3
    with pytest.raises(CorruptRecordError):
        await store.read(victim.run)


async def test_a_case_spelled_with_escapes_under_its_column_is_refused_by_case_history(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    victim = await honest_run(store)
    await victim.rewrite_body(3, _escaped(victim))
    await victim.sql(
        "UPDATE journal SET case_id=:c WHERE tenant=:t AND run_id=:r AND seq=3",
        c=str(victim.case),
    )
    with pytest.raises(CorruptRecordError) as caught:
        await store.case_history(victim.case, 10)
    assert caught.value.seq == 3
    with pytest.raises(CorruptRecordError):
        await store.verify(victim.run, VERIFIER)


async def test_a_nulled_case_column_is_refused_by_case_history_and_verify(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    victim = await honest_run(store)
    await victim.sql("UPDATE journal SET case_id=NULL WHERE tenant=:t AND run_id=:r AND seq=1")
    with pytest.raises(CorruptRecordError, match="case_id") as caught:
        await store.case_history(victim.case, 10)
    assert caught.value.seq == 1
    with pytest.raises(CorruptRecordError, match="case_id"):
        await store.verify(victim.run)
