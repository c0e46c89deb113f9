"""Restore's pass one shares verify-export's writing of each body; PostgreSQL COPYs the rows.

Both dialects. Pass one no longer writes a record's canonical JSON itself where the
verifier's own writing of the line's body (canonical JSON's C encoder, compared with the wire
bytes) is shown to be that canonical JSON (``restore_read._proven``): so an honest file's records
are judged without a canonical writing of their own (counted), and a line whose wire bytes
are the C encoder's text of its body but not canonical JSON (a float in the encoder's own
layout, an explicit ``phase`` the envelope omits, members in code-point rather than UTF-16
order) is still refused, nothing written. The journal rows go in by ``COPY`` on PostgreSQL
(``Dialect.copy_rows``) and by the INSERT on SQLite; a collision (a writer that bypassed the
run mutex) is named by the INSERT as before on both, and nothing of the chunk is written.
The objects that existed before the restore are kept out of the collector's walks during it,
and a host's own frozen objects are left frozen.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from agentplane_journal import Append, RunId, SqlJournalStore
from agentplane_journal.core import append as append_mod
from agentplane_journal.db.models import Journal
from agentplane_journal.errors import AppendConflictError
from agentplane_journal.exportfmt.body_wire import sorted_text
from agentplane_journal.journal import bulk as bulk_mod
from agentplane_journal.journal import restore as restore_mod
from agentplane_journal.journal import restore_read
from agentplane_journal.journal.restore import RestoreIncomplete, RestoreRefused, restore_export

from support.exports import (
    build,
    export_to,
    fix_trailer,
    lines_of,
    other_tenant,
    verify_lines,
    write_lines,
)

pytestmark = pytest.mark.slow

RUN_BLOCK = '{"kind":"agentplane.export.run"'


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _with_record(lines: list[str], members: dict[str, Any]) -> list[str]:
    """``lines`` with one more record at the end of the last open run's block: its envelope
    the run's, ``members`` beside it, its ``raw`` the C encoder's text of its body (what
    the verifier writes back), the block's chain recomputed over it (an open run: the file
    stays SOUND)."""
    starts = [i for i, x in enumerate(lines) if x.startswith(RUN_BLOCK)]
    start = next(i for i in reversed(starts) if '"index"' not in lines[i])
    end = next((i for i in starts if i > start), len(lines) - 1)
    last = json.loads(json.loads(lines[end - 1])["raw"])
    body = {"seq": last["seq"] + 1, "run": last["run"], "epoch": last["epoch"], "v": 4}
    body.update({"kind": "Note", **members})
    lines = [*lines[:end], _dumps({"seq": body["seq"], "raw": sorted_text(body)}), *lines[end:]]
    prev = bytes(32)
    for i in range(start + 1, end + 1):
        record = json.loads(lines[i])
        digest = hashlib.sha256(prev + record["raw"].encode("utf-8")).digest()
        record.update(
            body=json.loads(record["raw"]),
            prev_hash=prev.hex(),
            hash=digest.hex(),
            attestation=None,
        )
        lines[i] = _dumps(record)
        prev = digest
    return fix_trailer(lines)


NOT_CANONICAL = {
    "a float in the C encoder's layout": {"x": 1e-05},
    "an explicit forward phase": {"phase": "forward"},
    "members in code-point order": {"\ue000": 1, "\U0001f600": 2},
}


@pytest.mark.parametrize("edit", list(NOT_CANONICAL))
async def test_wire_bytes_the_verifier_writes_back_but_append_would_not_are_refused(
    store: SqlJournalStore, tmp_path: Path, edit: str
) -> None:
    """verify-export calls the file SOUND (the body written back is exactly the wire
    bytes), yet ``append`` would write other bytes for the record: pass one refuses it."""
    await build(store, 8, long=False)
    path = tmp_path / "e.jsonl"
    cp, _ = await export_to(store, path)
    edited = _with_record(lines_of(path), NOT_CANONICAL[edit])
    assert verify_lines(edited, cp).is_sound
    target = other_tenant(store)
    with pytest.raises(RestoreRefused, match=r"not the bytes wire profile agentplane-0\.4 writes"):
        await restore_export(target, write_lines(tmp_path / "edited.jsonl", edited))
    assert (await target.checkpoint()).size == 0 and not await target.audit_runs(None, 1)


async def test_an_honest_files_records_are_judged_without_writing_canonical_json_again(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every record of an honest file (both kinds of run, floats, a case, a step and
    phase) takes the verifier's writing: no payload canonicalised by ``Append``, no wire
    bytes parsed again, the restore faithful and equal byte for byte."""
    await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    calls = {"canonical": 0, "wire": 0, "proven": 0}
    real_canonical, real_wire, real_proven = (
        append_mod.canonical_bytes,
        restore_read._wire,
        restore_read._proven,
    )

    def canonical(*args: Any, **kwargs: Any) -> bytes:
        calls["canonical"] += 1
        return real_canonical(*args, **kwargs)

    def wire(*args: Any) -> Any:
        calls["wire"] += 1
        return real_wire(*args)

    def proven(*args: Any, **kwargs: Any) -> Any:
        found = real_proven(*args, **kwargs)
        calls["proven"] += found is not None
        return found

    def pass_one(*args: Any) -> Any:
        frame = real_check(*args)
        judged.update(calls)  # pass two builds an append of its own per admission claim
        return frame

    real_check, judged = restore_mod.check_frame, dict(calls)
    monkeypatch.setattr(restore_mod, "check_frame", pass_one)
    monkeypatch.setattr(append_mod, "canonical_bytes", canonical)
    monkeypatch.setattr(restore_read, "_wire", wire)
    monkeypatch.setattr(restore_read, "_proven", proven)
    target = other_tenant(store)
    restored = await restore_export(target, path)
    assert restored.is_faithful and restored.records > 0, restored.to_json()
    # The verifier writes a body back only when its wire bytes hold no run of 20 digits (an
    # integer serde_json would read otherwise): a chain head in a RunSealed can, by chance.
    # Such a record is compared the long way, building its Append with the payload's check.
    raws = [json.loads(x)["raw"] for x in lines_of(path) if not x.startswith('{"kind"')]
    long_way = sum(1 for raw in raws if re.search(r"\d{20}|-\d{19}", raw))
    assert len(raws) == restored.records
    assert judged == {"canonical": long_way, "wire": 0, "proven": restored.records - long_way}
    again = tmp_path / "again.jsonl"
    await export_to(target, again)
    assert lines_of(again)[1:] == lines_of(path)[1:]  # the header names the store's origin


async def test_a_collision_in_the_rows_is_named_as_before_and_nothing_of_the_chunk_lands(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that bypassed the run mutex holds a chain position a chunk's rows take (a
    row put there in the chunk's own transaction, after the locks were read): PostgreSQL's
    COPY is refused and rolled back to its savepoint, and the INSERT names the collision,
    as SQLite's INSERT does. The chunk rolls back whole."""
    run = RunId.generate()
    await store.append(1, [Append(run, "Note", {"text": f"n{i}"}) for i in range(4)])
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    target = other_tenant(store)
    real_lock, real_copy = bulk_mod._lock_runs, target.dialect.copy_rows
    copied: list[bool] = []

    async def a_writer_past_the_mutex(into: Any, session: Any, runs: Any) -> Any:
        states = await real_lock(into, session, runs)
        row = {"tenant": into.tenant, "run_id": str(run), "seq": 1, "epoch": 1, "kind": "Note"}
        row.update(prev_hash=bytes(32), hash=bytes(32), raw=b"{}")
        await session.execute(insert(Journal).values(**row))
        return states

    async def copy(*args: Any) -> bool:
        copied.append(await real_copy(*args))
        return copied[-1]

    monkeypatch.setattr(bulk_mod, "_lock_runs", a_writer_past_the_mutex)
    monkeypatch.setattr(target.dialect, "copy_rows", copy)
    with pytest.raises(RestoreIncomplete, match="PARTIAL") as caught:
        await restore_export(target, path)
    cause = caught.value.cause
    assert isinstance(cause, AppendConflictError) and (cause.run, cause.seq) == (run, 1)
    assert copied == [False]  # tried (refused) on PostgreSQL; no COPY on SQLite
    assert caught.value.records == 0 and not await target.read(run)


async def test_the_collector_is_spared_the_objects_of_before_and_a_hosts_freeze_is_kept(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    await build(store, 8, long=False)
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    seen: list[int] = []
    real = restore_mod.check_frame

    def judged(*args: Any) -> Any:
        seen.append(gc.get_freeze_count())
        return real(*args)

    restore_mod.check_frame = judged  # type: ignore[assignment]
    try:
        gc.unfreeze()
        assert (await restore_export(other_tenant(store), path)).is_faithful
        assert seen[-1] > 0 and gc.get_freeze_count() == 0  # frozen during it, not after
        gc.freeze()  # a host that froze its objects (before forking workers, say)
        assert (await restore_export(other_tenant(store), path)).is_faithful
        assert gc.get_freeze_count() > 0  # left frozen, as the host had it (not unfrozen)
    finally:
        restore_mod.check_frame = real
        gc.unfreeze()


BEYOND_THE_ENVELOPE = {
    "an epoch past i64": ({"epoch": 2**63}, r"epoch 9223372036854775808 is outside"),
    "a kind that is no label": ({"kind": "Note\u0007"}, r"control character U\+0007"),
    "another run's id": ({"run": "01" + "Z" * 24}, r"sits in run .*'s block"),
}


@pytest.mark.parametrize("edit", list(BEYOND_THE_ENVELOPE))
async def test_a_bare_envelope_is_checked_as_append_checks_it(
    store: SqlJournalStore, tmp_path: Path, edit: str
) -> None:
    """Pass one builds a bare envelope's append (``seq``, ``run``, ``epoch``, ``v``,
    ``kind``) without writing its body back (``restore_read._bare``): an envelope ``append``
    would refuse (an epoch the store cannot hold, a kind that is not a label, another
    run's id) is still refused in pass one, nothing written, never half-restored."""
    await build(store, 8, long=False)
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    members, refusal = BEYOND_THE_ENVELOPE[edit]
    edited = _with_record(lines_of(path), members)
    target = other_tenant(store)
    with pytest.raises(RestoreRefused, match=refusal):
        await restore_export(target, write_lines(tmp_path / "edited.jsonl", edited))
    assert (await target.checkpoint()).size == 0 and not await target.audit_runs(None, 1)


async def test_bare_envelopes_take_the_short_way_and_the_rest_the_member_compare(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records whose envelope is bare are built by ``Append.of_bare_envelope`` (no
    body written back, no payload copied); one with a case, a step, a phase or an effect
    key is built and compared member for member, and the restore is faithful either way."""
    await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    await export_to(store, path)
    taken = {"bare": 0, "compared": 0}
    real_bare, real_same = restore_read._bare, restore_read._same_json

    def bare(*args: Any) -> Any:
        found = real_bare(*args)
        taken["bare"] += found is not None
        return found

    def same(*args: Any) -> bool:
        taken["compared"] += 1
        return real_same(*args)

    monkeypatch.setattr(restore_read, "_bare", bare)
    monkeypatch.setattr(restore_read, "_same_json", same)
    restored = await restore_export(other_tenant(store), path)
    assert restored.is_faithful, restored.to_json()
    bodies = [json.loads(x)["body"] for x in lines_of(path) if not x.startswith('{"kind"')]
    plain = sum(1 for b in bodies if not {"case", "step", "phase", "effect_key"} & b.keys())
    assert 0 < taken["bare"] <= plain and taken["compared"] > 0
