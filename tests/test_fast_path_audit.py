"""An adversarial review of issue 32's fast paths: ``export --all``'s pages (one statement,
SQLite's cut by bytes as the rows are stepped) and its body written from the read's own
parse (``db/row_bodies.plain_line``), and the lean reads, against rows written by someone
with write access to the tables and no signing key.

Both dialects, real databases, migrations only. What is pinned, end to end through the
databases (the row checks themselves have their unit batteries: tests/test_read_rows.py,
test_export_rows.py):

* a row that lies about itself (its bytes not its hash's preimage, a column that disagrees
  with its hashed body, a value of the wrong storage type, another run's row) never stops
  the export: its run is named unreadable in the trailer with nothing of it written, every
  other run is written and verify-export calls exactly those sound; each lean read of it is
  ``CorruptRecordError``, never another exception;
* a row rewritten with its hashes recomputed (self-consistent, so export writes it) is never
  called sound by verify-export, in an open run (the next link breaks) or a sealed one (the
  seal no longer matches), nor is an edited seal or a moved leaf;
* a side fact whose lie is harmless stays harmless: ``run_seal.log_index`` (export orders
  its pages by it, but writes each run's leaf from ``log_tree``) swapped between two runs
  leaves a file that verifies sound and restores to the same root.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import CorruptRecordError, RunId, SqlJournalStore
from agentplane_journal.journal.restore import restore_export

from support.exports import build, export_to, lines_of, other_tenant, verify_lines

N = 8


async def _sql(store: SqlJournalStore, statement: str, **params: Any) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(text(statement), {"t": store.tenant, **params})


async def _one(store: SqlJournalStore, statement: str, **params: Any) -> Any:
    async with store.engine.begin() as conn:
        return (await conn.execute(text(statement), {"t": store.tenant, **params})).one()


async def _forge(store: SqlJournalStore, run: RunId, seq: int, old: bytes, new: bytes) -> None:
    """Rewrite record ``seq``'s bytes (``old`` replaced by ``new``) with its hash recomputed:
    a row consistent with itself, as anyone can write one without a key."""
    prev, raw = await _one(
        store,
        "SELECT prev_hash, raw FROM journal WHERE tenant=:t AND run_id=:r AND seq=:s",
        r=str(run),
        s=seq,
    )
    edited = bytes(raw).replace(old, new)
    assert edited != bytes(raw)
    digest = hashlib.sha256(bytes(prev) + edited).digest()
    await _sql(
        store,
        "UPDATE journal SET raw=:raw, hash=:h WHERE tenant=:t AND run_id=:r AND seq=:s",
        raw=edited,
        h=digest,
        r=str(run),
        s=seq,
    )


def _open_victim(made: dict[str, Any]) -> RunId:
    """An open run of three records (admitted, an effect started, a note)."""
    runs: list[RunId] = made["runs"]
    return next(
        r for r in runs if r not in made["sealed"] and r not in (made["long"], made["handed"])
    )


# -- rows that lie about themselves ---------------------------------------------------------

#: (name, dialects it can be written on, the statement, the seq a lean read by seq finds it
#: at or None): each rewrites a row of the victim run ``:r`` (another run's is ``:o``).
LYING_ROWS: list[tuple[str, tuple[str, ...], str, int | None]] = [
    (
        "bytes-not-the-hash-preimage",
        ("sqlite", "postgresql"),
        "UPDATE journal SET raw = :edited WHERE tenant=:t AND run_id=:r AND seq=2",
        2,
    ),
    (
        "case_id-column-added",
        ("sqlite", "postgresql"),
        "UPDATE journal SET case_id = 'case_01ARZ3NDEKTSV4RRFFQ69G5FAV'"
        " WHERE tenant=:t AND run_id=:r AND seq=3",
        3,
    ),
    (
        "effect_key-column-moved",
        ("sqlite", "postgresql"),
        "UPDATE journal SET effect_key = '"
        + "ab" * 32
        + "' WHERE tenant=:t AND run_id=:r AND seq=2",
        2,
    ),
    (
        "epoch-column-changed",
        ("sqlite", "postgresql"),
        "UPDATE journal SET epoch = 7 WHERE tenant=:t AND run_id=:r AND seq=2",
        2,
    ),
    (
        "another-runs-row-at-the-head",
        ("sqlite", "postgresql"),
        "INSERT INTO journal (tenant, run_id, seq, epoch, kind, effect_key, prev_hash, hash, raw,"
        " key_id, signature, case_id) SELECT tenant, :r, 4, epoch, kind, effect_key, prev_hash,"
        " hash, raw, key_id, signature, case_id FROM journal"
        " WHERE tenant=:t AND run_id=:o AND seq=3",
        4,
    ),
    (
        "half-an-attestation",
        ("sqlite", "postgresql"),
        "UPDATE journal SET key_id = 'k1' WHERE tenant=:t AND run_id=:r AND seq=3",
        3,
    ),
    (
        "bytes-stored-as-text",
        ("sqlite",),
        "UPDATE journal SET raw = CAST(raw AS TEXT) WHERE tenant=:t AND run_id=:r AND seq=2",
        2,
    ),
    (
        "seq-stored-as-real",
        ("sqlite",),
        "UPDATE journal SET seq = 2.5 WHERE tenant=:t AND run_id=:r AND seq=2",
        None,
    ),
    (
        "kind-text-not-utf8",
        ("sqlite",),
        "UPDATE journal SET kind = CAST(x'ff4e6f7465' AS TEXT)"
        " WHERE tenant=:t AND run_id=:r AND seq=3",
        3,
    ),
    (
        "hash-column-short",
        ("sqlite", "postgresql"),
        "UPDATE journal SET hash = :short WHERE tenant=:t AND run_id=:r AND seq=3",
        3,
    ),
]


@pytest.mark.parametrize(
    ("name", "dialects", "statement", "at"), LYING_ROWS, ids=[r[0] for r in LYING_ROWS]
)
async def test_a_lying_row_is_named_unreadable_by_export_and_corrupt_to_every_lean_read(
    store: SqlJournalStore,
    dialect: str,
    tmp_path: Path,
    name: str,
    dialects: tuple[str, ...],
    statement: str,
    at: int | None,
) -> None:
    if dialect not in dialects:
        pytest.skip(f"{name}: {dialect} stores only its column's type")
    made = await build(store, N, long=False)
    victim = _open_victim(made)
    other = next(r for r in made["runs"] if r not in (victim, made["long"], made["handed"]))
    (raw,) = await _one(
        store, "SELECT raw FROM journal WHERE tenant=:t AND run_id=:r AND seq=2", r=str(victim)
    )
    await _sql(
        store,
        statement,
        r=str(victim),
        o=str(other),
        edited=bytes(raw).replace(b'"v":', b'"v" :'),
        short=b"\x00" * 31,
    )

    path = tmp_path / "e.jsonl"
    cp, trailer = await export_to(store, path)  # never raises for a hostile row
    assert [u.run for u in trailer.unreadable] == [victim], trailer.unreadable
    assert trailer.runs_requested == N and trailer.runs_exported == N - 1
    lines = [json.loads(x) for x in lines_of(path)]
    block = next(i for i, x in enumerate(lines) if x.get("run") == victim.ulid)
    assert lines[block + 1].get("kind") is not None  # nothing of the victim's records written
    report = verify_lines(lines_of(path), cp)
    assert report.runs_sound == N - 1 and victim not in report.sound, report.findings

    with pytest.raises(CorruptRecordError):
        await store.read(victim)
    with pytest.raises(CorruptRecordError):
        async for _ in store.pages(victim, page_size=1):
            pass
    if at is not None:
        with pytest.raises(CorruptRecordError):
            await store.record_at(victim, at)
    if at == 4 or name in {"case_id-column-added", "half-an-attestation", "hash-column-short"}:
        with pytest.raises(CorruptRecordError):
            await store.head(victim)  # the lying row is the head


# -- rows consistent with themselves: export writes them, verify-export must not vouch ------


async def test_a_record_rewritten_with_its_hash_mid_chain_is_never_sound(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    """Export's fast path writes a self-consistent row as it is (its checks are the row's
    own); the break is the next record's link, which verify-export names."""
    made = await build(store, N, long=False)
    victim = _open_victim(made)
    await _forge(store, victim, 1, b'"capability":"c"', b'"capability":"d"')
    path = tmp_path / "e.jsonl"
    cp, trailer = await export_to(store, path)
    assert not trailer.unreadable and trailer.runs_exported == N
    assert any('"capability":"d"' in line for line in lines_of(path))
    report = verify_lines(lines_of(path), cp)
    assert not report.is_sound and victim not in report.sound
    assert report.runs_sound == N - 1
    assert any(victim.ulid in f for f in report.findings), report.findings


async def test_a_sealed_runs_last_record_rewritten_with_its_hash_is_never_sound(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    made = await build(store, N, long=False)
    victim = next(r for r in made["sealed"] if r != made["handed"])
    (last,) = await _one(
        store, "SELECT max(seq) FROM journal WHERE tenant=:t AND run_id=:r", r=str(victim)
    )
    await _forge(store, victim, last, b'"outcome":"succeeded"', b'"outcome":"failed"')
    path = tmp_path / "e.jsonl"
    cp, trailer = await export_to(store, path)
    assert not trailer.unreadable
    report = verify_lines(lines_of(path), cp)
    assert not report.is_sound and victim not in report.sound
    assert report.runs_sound == N - 1, report.findings


@pytest.mark.parametrize("edit", ["seal-chain-head", "leaves-swapped"])
async def test_an_edited_seal_or_a_moved_leaf_is_never_sound(
    store: SqlJournalStore, tmp_path: Path, edit: str
) -> None:
    """The seal and the leaf beside each row of a log page are written as stored; the
    checkpoint's root is what verify-export holds them to."""
    made = await build(store, N, long=False)
    a, b = [r for r in made["sealed"] if r != made["handed"]][:2]
    if edit == "seal-chain-head":
        await _sql(
            store,
            "UPDATE run_seal SET chain_head = :h WHERE tenant=:t AND run_id=:r",
            h=hashlib.sha256(b"another head").digest(),
            r=str(a),
        )
    else:
        leaf = "SELECT idx FROM log_tree WHERE tenant=:t AND run_id=:r AND level=0"
        (ia,), (ib,) = await _one(store, leaf, r=str(a)), await _one(store, leaf, r=str(b))
        move = "UPDATE log_tree SET idx=:i WHERE tenant=:t AND run_id=:r AND level=0"
        await _sql(store, move, i=10**9, r=str(a))
        await _sql(store, move, i=ia, r=str(b))
        await _sql(store, move, i=ib, r=str(a))
    path = tmp_path / "e.jsonl"
    cp, _ = await export_to(store, path)
    report = verify_lines(lines_of(path), cp)
    assert not report.is_sound, report
    assert report.findings
    if edit == "seal-chain-head":
        assert a not in report.sound


async def test_run_seal_log_index_swapped_is_harmless(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    """``run_seal.log_index`` orders the export's log pages, but each run's block carries its
    leaf from ``log_tree``: two runs' positions swapped there leave a file that verifies
    sound and restores to the checkpoint's own root."""
    made = await build(store, N, long=False)
    a, b = made["sealed"][0], made["sealed"][1]
    index = "SELECT log_index FROM run_seal WHERE tenant=:t AND run_id=:r"
    (ia,), (ib,) = await _one(store, index, r=str(a)), await _one(store, index, r=str(b))
    move = "UPDATE run_seal SET log_index=:i WHERE tenant=:t AND run_id=:r"
    await _sql(store, move, i=10**9, r=str(a))
    await _sql(store, move, i=ia, r=str(b))
    await _sql(store, move, i=ib, r=str(a))
    path = tmp_path / "e.jsonl"
    cp, trailer = await export_to(store, path)
    assert not trailer.unreadable and trailer.runs_exported == N
    report = verify_lines(lines_of(path), cp)
    assert report.is_sound and report.runs_sound == N, report.findings
    restored = await restore_export(other_tenant(store), path)
    assert restored.rebuilt.root == cp.root and restored.runs == N


async def test_a_seal_moved_past_the_checkpoint_is_never_sound(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    """The log phase takes the seals whose ``run_seal.log_index`` is below the checkpoint's
    size, and the open phase every other run, by the same test. A seal row moved past the
    size, its leaf in ``log_tree`` still below it, is then written open: no run is dropped
    (the open phase once tested the leaf, and such a run was written by neither phase and
    named nowhere). verify-export holds the file to its checkpoint, which commits to one
    more sealed run than the log phase carries: never sound."""
    made = await build(store, N, long=False)
    victim = made["sealed"][0]
    await _sql(
        store,
        "UPDATE run_seal SET log_index = 1000000000 WHERE tenant=:t AND run_id=:r",
        r=str(victim),
    )
    path = tmp_path / "e.jsonl"
    cp, trailer = await export_to(store, path)
    assert trailer.runs_requested == N and not trailer.unreadable
    blocks = [json.loads(line) for line in lines_of(path) if victim.ulid in line]
    assert blocks and blocks[0] == {"kind": "agentplane.export.run", "run": victim.ulid}
    report = verify_lines(lines_of(path), cp)
    assert not report.is_sound
    assert any("in the log and are not in this file" in f for f in report.findings), report
