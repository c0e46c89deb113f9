"""The tamper cases: each edits an honest run's rows the way an attacker with write access
to the database (and no signing key) could, and names the runs it broke. Shared by the tamper
battery (tests/test_tamper.py) and the lean reads' (tests/test_lean_reads.py)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import text

from agentplane_journal import CaseId, RunId, SqlJournalStore

from support.helpers import key
from support.tamper import Victim, honest_run


def _body(victim: Victim, **members: Any) -> bytes:
    body = {"seq": 3, "run": victim.run.ulid, "epoch": 1, "v": 4, "kind": "Note", "text": "x"}
    body.update(members)
    return json.dumps(
        {k: v for k, v in body.items() if v is not _DROP}, separators=(",", ":")
    ).encode()


_DROP = object()
_OTHER = RunId.generate()


# -- the cases: each edits one thing --------------------------------------------------------

#: A case returns the runs it broke, or None for just the victim.
Tamper = Callable[[Victim], Awaitable["list[RunId] | None"]]
CASES: dict[str, Tamper] = {}


def case(name: str) -> Callable[[Tamper], Tamper]:
    def register(fn: Tamper) -> Tamper:
        CASES[name] = fn
        return fn

    return register


@case("kind column")
async def _kind(v: Victim) -> None:
    await v.sql("UPDATE journal SET kind='Note' WHERE tenant=:t AND run_id=:r AND seq=2")


@case("effect_key column edited")
async def _effect_key(v: Victim) -> None:
    await v.sql(
        "UPDATE journal SET effect_key=:k WHERE tenant=:t AND run_id=:r AND seq=2", k=key(9).hex()
    )


@case("effect_key column removed")
async def _effect_key_null(v: Victim) -> None:
    await v.sql("UPDATE journal SET effect_key=NULL WHERE tenant=:t AND run_id=:r AND seq=2")


@case("effect_key column added")
async def _effect_key_added(v: Victim) -> None:
    await v.sql(
        "UPDATE journal SET effect_key=:k WHERE tenant=:t AND run_id=:r AND seq=3", k=key(9).hex()
    )


@case("case_id column edited")
async def _case_edited(v: Victim) -> None:
    await v.sql(
        "UPDATE journal SET case_id=:c WHERE tenant=:t AND run_id=:r AND seq=1",
        c=str(CaseId.generate()),
    )


@case("case_id column removed")
async def _case_removed(v: Victim) -> None:
    await v.sql("UPDATE journal SET case_id=NULL WHERE tenant=:t AND run_id=:r AND seq=1")


@case("case_id column added")
async def _case_added(v: Victim) -> None:
    await v.sql(
        "UPDATE journal SET case_id=:c WHERE tenant=:t AND run_id=:r AND seq=3", c=str(v.case)
    )


@case("epoch column")
async def _epoch(v: Victim) -> None:
    await v.sql("UPDATE journal SET epoch=7 WHERE tenant=:t AND run_id=:r AND seq=2")


@case("seq column")
async def _seq(v: Victim) -> None:
    await v.sql("UPDATE journal SET seq=9 WHERE tenant=:t AND run_id=:r AND seq=3")


@case("run_id column of one row")
async def _run_id(v: Victim) -> list[RunId]:
    other = RunId.generate()
    await v.sql(
        "UPDATE journal SET run_id=:o WHERE tenant=:t AND run_id=:r AND seq=1", o=str(other)
    )
    return [v.run, other]  # seq 1 of v.run now lives under `other`: both runs are broken


@case("rows copied under another run id")
async def _copied(v: Victim) -> list[RunId]:
    other = RunId.generate()
    await v.sql(
        "INSERT INTO journal (tenant, run_id, seq, epoch, kind, effect_key, prev_hash, hash, "
        "raw, key_id, signature, case_id) SELECT tenant, :o, seq, epoch, kind, effect_key, "
        "prev_hash, hash, raw, key_id, signature, case_id FROM journal "
        "WHERE tenant=:t AND run_id=:r",
        o=str(other),
    )
    await v.sql(
        "INSERT INTO run_activity (tenant, run_id, updated_at) VALUES (:t, :o, 1)", o=str(other)
    )
    return [other]  # the copy is what must not verify


@case("head forged")
async def _head(v: Victim) -> None:
    await v.sql(
        "UPDATE journal SET hash=:h WHERE tenant=:t AND run_id=:r AND seq=3", h=os.urandom(32)
    )


@case("activity row deleted")
async def _activity(v: Victim) -> None:
    await v.sql("DELETE FROM run_activity WHERE tenant=:t AND run_id=:r")
    await v.sql("UPDATE journal SET epoch=5 WHERE tenant=:t AND run_id=:r AND seq=3")


@case(
    "tail deleted under a seal",
)
async def _sealed_tail(v: Victim) -> None:
    await v.sql("DELETE FROM journal WHERE tenant=:t AND run_id=:r AND seq=4")


@case("every record deleted under a seal")
async def _sealed_all(v: Victim) -> None:
    await v.sql("DELETE FROM journal WHERE tenant=:t AND run_id=:r")
    await v.sql("DELETE FROM run_activity WHERE tenant=:t AND run_id=:r")


@case("a record appended under a seal")
async def _sealed_extended(v: Victim) -> None:
    _, raw = await v.row(4)
    body = json.loads(raw)
    body.update(seq=5, kind="Note", text="after the seal")
    body.pop("outcome"), body.pop("chain_head")
    extra = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    prev = await _hash(v, 4)
    await v.sql(
        "INSERT INTO journal (tenant, run_id, seq, epoch, kind, prev_hash, hash, raw) "
        "VALUES (:t, :r, 5, 1, 'Note', :p, :h, :raw)",
        p=prev,
        h=hashlib.sha256(prev + extra).digest(),
        raw=extra,
    )


async def _hash(v: Victim, seq: int) -> bytes:
    async with v.store.engine.connect() as conn:
        return bytes(
            (
                await conn.execute(
                    text("SELECT hash FROM journal WHERE tenant=:t AND run_id=:r AND seq=:s"),
                    {**v.params, "s": seq},
                )
            ).scalar_one()
        )


@case("100k-deep body")
async def _deep(v: Victim) -> None:
    await v.rewrite_body(3, b'{"seq":3,"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}")


@case("200-deep body")
async def _deepish(v: Victim) -> None:
    await v.rewrite_body(3, _body(v, text=json.loads("[" * 200 + "]" * 200)))


@case("body without epoch")
async def _no_epoch(v: Victim) -> None:
    await v.rewrite_body(3, _body(v, epoch=_DROP))


@case("body with a text epoch")
async def _text_epoch(v: Victim) -> None:
    await v.rewrite_body(3, _body(v, epoch="1"))


@case("body with a run that is not an id")
async def _bad_run(v: Victim) -> None:
    await v.rewrite_body(3, _body(v, run="not-a-ulid"))


@case("body with a case that is not an id")
async def _bad_case(v: Victim) -> None:
    await v.rewrite_body(3, _body(v, case=12))


@case("body with an effect key that is not a key")
async def _bad_key(v: Victim) -> None:
    await v.rewrite_body(3, _body(v, effect_key="ek:nothex"))


@case("body that is an array")
async def _array(v: Victim) -> None:
    await v.rewrite_body(3, b"[1,2,3]")


@case("body naming another run")
async def _foreign_run(v: Victim) -> None:
    await v.rewrite_body(3, _body(v, run=_OTHER.ulid))


_ROW = "WHERE tenant=:t AND run_id=:r AND seq=3"
SQLITE_ONLY: dict[str, str] = {
    "raw as TEXT": f"UPDATE journal SET raw=CAST(raw AS TEXT) {_ROW}",
    "hash as TEXT": f"UPDATE journal SET hash='0123456789abcdef0123456789abcdef' {_ROW}",
    "prev_hash as TEXT": f"UPDATE journal SET prev_hash=hex(prev_hash) {_ROW}",
    "seq as TEXT": f"UPDATE journal SET seq='three' {_ROW}",
    "epoch as TEXT": f"UPDATE journal SET epoch='one' {_ROW}",
    "kind as BLOB": f"UPDATE journal SET kind=CAST('Note' AS BLOB) {_ROW}",
    "key_id as BLOB": f"UPDATE journal SET key_id=CAST(key_id AS BLOB) {_ROW}",
    "signature as TEXT": f"UPDATE journal SET signature='sig' {_ROW}",
    # The row drops out of `run_id = ?` (a BLOB never equals TEXT): a sealed run shows it.
    "run_id as BLOB (sealed run)": f"UPDATE journal SET run_id=CAST(run_id AS BLOB) {_ROW}",
}

SEALED = {
    "tail deleted under a seal",
    "every record deleted under a seal",
    "a record appended under a seal",
    "run_id as BLOB (sealed run)",
}


async def tamper(store: SqlJournalStore, name: str) -> tuple[Victim, list[RunId]]:
    """Build an honest run, apply case ``name``; the victim and every run it broke."""
    victim = await honest_run(store, seal=name in SEALED)
    if name in SQLITE_ONLY:
        await victim.sql(SQLITE_ONLY[name])
        return victim, [victim.run]
    broken = await CASES[name](victim)
    return victim, [victim.run] if broken is None else broken
