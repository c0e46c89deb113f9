"""Export format 1 (agentplane 0.22's): export -> verify-export -> restore -> equal root.

Both dialects, in-process (the command line is tests/test_backup_cli.py). The history holds
what a restore must reproduce byte for byte: runs sealed in an order unlike their ids, open
runs, a run that changed hands (epochs 1 then 2), a compensating record, an admission key,
started effects, a case, and runs larger than a batch. Then agentplane's export tests,
restated against the file: a run removed from the middle, tampered bytes under a pristine
readable body, a duplicated log position, a cut file, and a target that is not empty.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import AGENTPLANE_0_22, RunId, SqlJournalStore
from agentplane_journal.core.ids import Digest
from agentplane_journal.errors import DuplicateEffectError
from agentplane_journal.exportfmt.lines import canon_for_profile
from agentplane_journal.journal import restore as restore_mod
from agentplane_journal.journal.restore import RestoreRefused, restore_export
from agentplane_journal.tlog import merkle

from support.exports import (
    RUNS,
    _seal,
    build,
    export_to,
    fix_trailer,
    lines_of,
    other_tenant,
    verify_lines,
    write_lines,
)
from support.helpers import TRUSTED, key, note, started

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restore batches of 500 records here, so the long run (a batch and a bit) stays
    small; tests/test_restore_batches.py puts the boundaries everywhere."""
    monkeypatch.setattr(restore_mod, "BATCH", 500)


async def test_round_trip_restores_an_equal_root_with_every_index(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    made = await build(store)
    assert len(await store.read(made["long"])) > restore_mod.BATCH
    path = tmp_path / "export.jsonl"
    cp, trailer = await export_to(store, path)
    assert cp.size == len(made["sealed"]) and not trailer.unreadable
    assert trailer.runs_requested == trailer.runs_exported == RUNS

    lines = lines_of(path)
    header = json.loads(lines[0])
    assert header == {
        "kind": "agentplane.export",
        "version": 1,
        "checkpoint": {"origin": cp.origin, "size": cp.size, "root": cp.root.hex()},
        "canon": canon_for_profile(None),
    }
    # Blocks in log order first: positions 0..N-1, in order.
    indexes = [json.loads(x).get("index") for x in lines if '"agentplane.export.run"' in x]
    assert indexes[: cp.size] == list(range(cp.size))
    assert all(i is None for i in indexes[cp.size :])

    report = verify_lines(lines, cp)
    assert report.is_sound, report.findings
    assert len(report.sound) == RUNS and report.records == trailer.records
    assert not any(n.startswith("deletion") for n in report.not_checked)

    target = other_tenant(store)
    restored = await restore_export(target, path)
    assert restored.is_faithful, restored.to_json()
    assert restored.differing == 0 and restored.records == trailer.records
    assert restored.rebuilt.size == cp.size and restored.rebuilt.root == cp.root

    # The run that changed hands restores with its epochs, byte for byte.
    original = await store.read(made["handed"])
    copy = await target.read(made["handed"])
    assert [r.body["epoch"] for r in copy] == [r.body["epoch"] for r in original]
    assert {r.body["epoch"] for r in copy} == {1, 2}
    assert [r.raw for r in copy] == [r.raw for r in original]
    # The derived indexes came back through append: outcomes, admissions, exactly-once.
    assert sorted(map(str, await target.runs_by_outcome("failed", 100))) == [str(made["handed"])]
    assert len(await target.runs_by_outcome("succeeded", 100)) == len(made["sealed"]) - 1
    assert await target.admitted_as("order-3") == made["runs"][3]
    with pytest.raises(DuplicateEffectError):
        await target.append(1, [started(made["runs"][10], key(10))])
    # And the restored tenant exports the same file, line for line, after its header.
    again = tmp_path / "again.jsonl"
    await export_to(target, again)
    assert lines_of(again)[1:] == lines[1:]


async def test_a_run_removed_from_the_middle_is_caught(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    await build(store, 12, long=False)
    cp, _ = await export_to(store, tmp_path / "e.jsonl")
    lines = lines_of(tmp_path / "e.jsonl")
    # Drop the block at log position 2 and its records; renumber the later positions and fix
    # the trailer, so every surviving chain, seal and count agrees with the file.
    out, skipping = [], False
    for line in lines:
        value = json.loads(line)
        if value.get("kind") == "agentplane.export.run":
            skipping = value.get("index") == 2
            if not skipping and isinstance(value.get("index"), int) and value["index"] > 2:
                value["index"] -= 1
                line = json.dumps(value, separators=(",", ":"))
        elif value.get("kind") is not None:
            skipping = False
        if not skipping:
            out.append(line)
    edited = fix_trailer(out)
    report = verify_lines(edited, cp)
    assert not report.is_sound
    assert any("commits to" in f and "not in this file" in f for f in report.findings)
    # The careful editor also rewrites the header to the shortened tree: the file agrees with
    # itself, so only the checkpoint from outside catches it.
    leaves = [
        merkle.leaf_hash(Digest.from_hex(json.loads(x)["seal"]))
        for x in edited
        if '"seal":' in x and '"agentplane.export.run"' in x
    ]
    header = json.loads(edited[0])
    header["checkpoint"].update(size=len(leaves), root=merkle.root(leaves).hex())
    forged = [json.dumps(header, separators=(",", ":")), *edited[1:]]
    alone = verify_lines(forged, None)
    assert alone.is_sound and any(n.startswith("deletion") for n in alone.not_checked)
    outside = verify_lines(forged, cp)
    assert not outside.is_sound
    assert any("different history" in f for f in outside.findings)
    # Two runs swapped in the log keep every count and position: only the root notices.
    swapped = []
    for line in lines:
        value = json.loads(line)
        if value.get("kind") == "agentplane.export.run" and value.get("index") in (0, 1):
            value["index"] = 1 - value["index"]
            line = json.dumps(value, separators=(",", ":"))
        swapped.append(line)
    report = verify_lines(swapped, cp)
    assert report.findings == [
        "the Merkle root rebuilt from this export does not match the checkpoint it claims to "
        "be a copy of"
    ]


async def test_tampered_bytes_are_caught_although_the_readable_body_is_pristine(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    await build(store, 12, long=False)
    cp, _ = await export_to(store, tmp_path / "e.jsonl")
    lines = lines_of(tmp_path / "e.jsonl")
    at = next(i for i, x in enumerate(lines) if '\\"run 4 ' in x)
    value = json.loads(lines[at])
    assert "run 4 " in value["raw"]  # the edit below must change something
    value["raw"] = value["raw"].replace("run 4 ", "run 9 ")
    lines[at] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    report = verify_lines(lines, cp)
    assert any("does not recompute to the hash it carries" in f for f in report.findings)
    assert any("readable body does not match its wire bytes" in f for f in report.findings)
    # The body still reads as the original: the display half was left pristine.
    assert "run 4 " in json.dumps(json.loads(lines[at])["body"], ensure_ascii=False)
    run = RunId.parse(json.loads(lines[at])["body"]["run"])
    assert run not in report.sound


async def test_a_duplicated_log_position_is_named(store: SqlJournalStore, tmp_path: Path) -> None:
    await build(store, 12, long=False)
    cp, _ = await export_to(store, tmp_path / "e.jsonl")
    lines = lines_of(tmp_path / "e.jsonl")
    edited = []
    for line in lines:
        value = json.loads(line)
        if value.get("kind") == "agentplane.export.run" and value.get("index") == 3:
            value["index"] = 2
            line = json.dumps(value, separators=(",", ":"))
        edited.append(line)
    report = verify_lines(edited, cp)
    assert len(report.findings) == 1
    assert "position(s) [2] duplicated" in report.findings[0]
    assert "position(s) [3] missing" in report.findings[0]


async def test_a_cut_file_is_unsound_and_refused_by_restore(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    await build(store, 12, long=False)
    cp, _ = await export_to(store, tmp_path / "e.jsonl")
    cut = write_lines(tmp_path / "cut.jsonl", lines_of(tmp_path / "e.jsonl")[:-1])
    report = verify_lines(lines_of(cut), cp)
    assert not report.complete and any("no trailer" in f for f in report.findings)
    target = other_tenant(store)
    with pytest.raises(RestoreRefused, match="no trailer"):
        await restore_export(target, cut)
    lines = lines_of(tmp_path / "e.jsonl")
    future = write_lines(
        tmp_path / "v2.jsonl", [lines[0].replace('"version":1', '"version":2'), *lines[1:]]
    )
    with pytest.raises(RestoreRefused, match="format version 2"):
        await restore_export(target, future)
    assert any("format version 2" in f for f in verify_lines(lines_of(future), cp).findings)
    assert (await target.checkpoint()).size == 0 and not await target.audit_runs(None, 1)


async def test_a_non_empty_target_is_refused_with_nothing_written(
    store: SqlJournalStore, make_store: Callable[..., Any], tmp_path: Path
) -> None:
    made = await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    cp, _ = await export_to(store, path)
    target = other_tenant(store)
    await target.append(1, [note(RunId.generate(), "already here")])
    before = await target.audit_runs(None, 10)
    with pytest.raises(RestoreRefused, match="not empty"):
        await restore_export(target, path)
    assert await target.audit_runs(None, 10) == before
    assert (await target.checkpoint()).size == 0
    # Nor into the source itself: its log is unchanged.
    with pytest.raises(RestoreRefused, match="not empty"):
        await restore_export(store, path)
    assert await store.checkpoint() == cp
    assert len(await store.read(made["handed"])) == 6


async def test_a_run_sealed_while_the_export_runs_is_exported_open(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file describes the log as of its header: a seal that lands after the checkpoint
    was read travels in the next export, and this one still verifies (no false alarm)."""
    made = await build(store, 8, long=False)
    late = next(r for r in made["runs"] if r not in made["sealed"])
    export_page = store.export_page

    async def sealing_first(*args: Any, **kw: Any) -> Any:
        monkeypatch.setattr(store, "export_page", export_page)
        await _seal(store, late, 1, "succeeded")  # after the header's checkpoint was read
        return await export_page(*args, **kw)

    monkeypatch.setattr(store, "export_page", sealing_first)
    path = tmp_path / "e.jsonl"
    cp, _ = await export_to(store, path)
    assert (await store.checkpoint()).size == cp.size + 1
    blocks = {
        json.loads(x)["run"]: json.loads(x)
        for x in lines_of(path)
        if '"agentplane.export.run"' in x
    }
    assert "index" not in blocks[late.ulid] and "seal" not in blocks[late.ulid]
    report = verify_lines(lines_of(path), cp)
    assert report.is_sound, report.findings


async def test_an_agentplane_0_22_journal_exports_canon_1_and_restores_in_its_profile(
    make_store: Callable[..., Any], tmp_path: Path
) -> None:
    """Both wire profiles through the export: a 0.22 tenant's header says canon 1, its file
    verifies with the derived digests checked, and a restore into an empty default tenant
    takes the export's profile, so every record comes back byte for byte (floats in
    RFC 8785's layout, integers beyond 2^53 exact)."""
    store = await make_store(profile=AGENTPLANE_0_22)
    profile = store.profile
    runs = [RunId.generate() for _ in range(5)]
    for i, run in enumerate(runs):
        admitted = {
            "capability": "c",
            "input": {"x": 1e16, "y": 100.0, "big": 2**60 + i},
            "input_label": TRUSTED,  # required by agentplane 0.22 (verify-export checks it)
        }
        await store.append(1, [profile.append(run, "RunAdmitted", admitted)])
        if i % 2 == 0:
            head = await store.head(run)
            sealed = {"outcome": "succeeded", "chain_head": head.hash.hex()}
            await store.append(1, [profile.append(run, "RunSealed", sealed)])
            await store.seal(run, 1, "succeeded")
    path = tmp_path / "v1.jsonl"
    cp, trailer = await export_to(store, path)
    lines = lines_of(path)
    assert json.loads(lines[0])["canon"] == 1 and not trailer.unreadable
    assert b"10000000000000000" in path.read_bytes()  # 1e16 as RFC 8785 writes it
    report = verify_lines(lines, cp)
    assert report.is_sound, report.findings
    assert not any("derived" in n for n in report.not_checked), report.not_checked

    target = await make_store(tenant=f"r{uuid.uuid4().hex[:10]}")
    restored = await restore_export(target, path)
    assert restored.is_faithful, restored.to_json()
    assert restored.rebuilt == cp or (restored.rebuilt.root, restored.rebuilt.size) == (
        cp.root,
        cp.size,
    )
    assert (await target.wire_profile()) == AGENTPLANE_0_22
    for run in runs:
        assert [r.raw for r in await target.read(run)] == [r.raw for r in await store.read(run)]
