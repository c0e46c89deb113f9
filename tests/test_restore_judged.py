"""restore and verify-export judge a file alike, and a tenant in two wire profiles restores.

Both dialects. First, files edited so that a restore would rebuild another history, or fail
after writing: a run's block repeated (open, sealed, or a sealed run's block repeated as
open), a record line cut in half, an open block carrying an ``index`` beside a malformed
``seal``, a record of a version no profile writes. ``verify-export`` never calls them SOUND,
and ``restore`` refuses each before writing anything (the shared pass one,
:mod:`agentplane_journal.journal.restore_check`). Then tenants holding records of both wire
profiles (after ``migrate_profile``, and the documented two-handle window): exported,
restored and exported again, the two files are equal byte for byte, and ``drill`` passes.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from agentplane_journal import AGENTPLANE_0_4, AGENTPLANE_0_22, RunId, SqlJournalStore
from agentplane_journal.core.profile import WireProfile
from agentplane_journal.db.models import JournalProfile
from agentplane_journal.exportfmt.verify import ExportVerifier
from agentplane_journal.journal import restore as restore_mod
from agentplane_journal.journal.restore import RestoreRefused, restore_export

from support.exports import (
    build,
    export_to,
    fix_trailer,
    lines_of,
    other_tenant,
    verify_lines,
    write_lines,
)
from support.stores import store_factory
from support.tamper import tamper_cli

pytestmark = pytest.mark.slow

RUN_BLOCK = "agentplane.export.run"
AMOUNTS = {"amount": 100.0, "big": 1e16, "neg": -0.0, "exact": 2**53 + 1}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _blocks(lines: list[str]) -> list[tuple[int, int, dict[str, Any]]]:
    """``(start, end, block)`` per run block: its line and the end of its records."""
    out = []
    for i, line in enumerate(lines):
        value = json.loads(line)
        if value.get("kind") == RUN_BLOCK:
            end = i + 1
            while end < len(lines) and not lines[end].startswith('{"kind"'):
                end += 1
            out.append((i, end, value))
    return out


async def _empty(target: SqlJournalStore) -> bool:
    return (await target.checkpoint()).size == 0 and not await target.audit_runs(None, 1)


def rechain(lines: list[str], start: int, end: int) -> None:
    """Recompute the hashes of the records in ``lines[start+1:end]`` from their ``raw`` (and
    ``body`` from ``raw``): what an editor does so that an open run's chain verifies."""
    prev = bytes(32)
    for i in range(start + 1, end):
        record = json.loads(lines[i])
        digest = hashlib.sha256(prev + record["raw"].encode("utf-8")).digest()
        record.update(prev_hash=prev.hex(), hash=digest.hex(), body=json.loads(record["raw"]))
        lines[i] = _dumps(record)
        prev = digest


def _damaged(lines: list[str], damage: str) -> list[str]:
    lines = list(lines)
    blocks = _blocks(lines)
    open_ = [b for b in blocks if "index" not in b[2]]
    sealed = [b for b in blocks if "index" in b[2]]
    trailer = lines[-1]
    if damage == "open block twice":
        start, end, _ = open_[0]
        return fix_trailer([*lines[:-1], *lines[start:end], trailer])
    if damage == "sealed block twice":
        start, end, _ = sealed[1]
        return fix_trailer([*lines[:-1], *lines[start:end], trailer])
    if damage == "sealed block again as open":
        start, end, block = sealed[1]
        again = _dumps({"kind": RUN_BLOCK, "run": block["run"]})
        return fix_trailer([*lines[:-1], again, *lines[start + 1 : end], trailer])
    if damage == "record line cut in half":
        start, end, _ = open_[1]
        lines[end - 1] = lines[end - 1][: len(lines[end - 1]) // 2]
        return lines
    if damage == "open block with an index and a malformed seal":
        start, _, block = open_[0]
        size = json.loads(lines[0])["checkpoint"]["size"]
        lines[start] = _dumps({**block, "index": size, "seal": "not a digest"})
        return lines
    if damage == "wire bytes nested 100000 deep":
        start, end, _ = open_[1]
        record = json.loads(lines[end - 1])
        record["raw"] = "[" * 100_000 + "]" * 100_000
        lines[end - 1] = _dumps(record)
        return lines
    if damage in ("record of version 7", "RunAdmitted v1 without canon", "a second claim"):
        start, end, _ = open_[-1]
        at = end - 1 if damage == "record of version 7" else start + 1
        record = json.loads(lines[at])
        body = json.loads(record["raw"])
        if damage == "record of version 7":
            body["v"] = 7
        else:
            assert body["kind"] == "RunAdmitted"
            body["v" if damage.startswith("RunAdmitted") else "idempotency_key"] = (
                1 if damage.startswith("RunAdmitted") else "order-3"
            )
        record["raw"] = _dumps(body)
        lines[at] = _dumps(record)
        rechain(lines, start, end)
        return lines
    if damage == "a seq written as a string":
        start, end, _ = open_[-1]
        record = json.loads(lines[start + 1])  # the run's first record: others follow it
        body = json.loads(record["raw"])
        body["seq"] = str(body["seq"])
        record["raw"] = _dumps(body)
        lines[start + 1] = _dumps(record)
        rechain(lines, start, end)
        return lines
    if damage == "wire bytes spaced":
        start, end, _ = open_[-1]
        record = json.loads(lines[end - 1])
        record["raw"] = record["raw"].replace(",", ", ")  # the same JSON value, other bytes
        lines[end - 1] = _dumps(record)
        rechain(lines, start, end)
        return lines
    if damage in ("an effect started twice", "a RunSealed outcome that is no label"):
        start, end, _ = open_[-1]
        bodies = [json.loads(json.loads(x)["raw"]) for x in lines[start + 1 : end]]
        if damage == "an effect started twice":
            body = next(b for b in bodies if b["kind"] == "EffectStarted")
        else:
            envelope = ("run", "case", "step", "phase", "epoch", "v")
            body = {k: bodies[-1][k] for k in envelope if k in bodies[-1]}
            body.update(kind="RunSealed", outcome="   ")
        body["seq"] = bodies[-1]["seq"] + 1
        added = {"seq": body["seq"], "raw": _dumps(body), "attestation": None}
        lines.insert(end, _dumps(added))
        rechain(lines, start, end + 1)
        return fix_trailer(lines)
    raise AssertionError(damage)


DAMAGES = [
    "open block twice",
    "sealed block twice",
    "sealed block again as open",
    "record line cut in half",
    "open block with an index and a malformed seal",
    "wire bytes nested 100000 deep",
    "a seq written as a string",
]


@pytest.mark.parametrize("damage", DAMAGES)
async def test_a_file_restore_would_misread_is_unsound_and_refused_with_nothing_written(
    store: SqlJournalStore,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    damage: str,
) -> None:
    await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    cp, _ = await export_to(store, path)
    edited = _damaged(lines_of(path), damage)
    for against in (cp, None):
        report = verify_lines(edited, against)
        assert not report.is_sound, (damage, report.to_json())
    monkeypatch.setattr(restore_mod, "BATCH", 3)  # anything written would be committed
    target = other_tenant(store)
    file = write_lines(tmp_path / "edited.jsonl", edited)
    with pytest.raises(RestoreRefused):
        await restore_export(target, file)
    assert await _empty(target), damage
    # The commands say the same: FAILED (exit 1), and refused with nothing written (exit 2).
    verified = await tamper_cli("verify-export", str(file))
    assert verified.returncode == 1 and verified.stdout.startswith("FAILED"), verified.stdout
    restored = await tamper_cli(
        "restore", str(file), "--url", database_url, "--tenant", target.tenant
    )
    assert restored.returncode == 2 and "nothing written" in restored.stderr, restored.stderr
    assert await _empty(target), damage


REFUSED_LATE = {
    "record of version 7": "v=7",
    "RunAdmitted v1 without canon": "must carry 'canon'",
    "a second claim": "claims admission key 'order-3'",
    "an effect started twice": "a second time",
    "a RunSealed outcome that is no label": "outcome must not be empty",
    "wire bytes spaced": "not the bytes wire profile agentplane-0.4 writes",
}


@pytest.mark.parametrize("damage", list(REFUSED_LATE))
async def test_a_record_the_store_would_refuse_part_way_is_refused_before_writing(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """The chain is recomputed over the edit (an open run), so the file verifies: only the
    record's version, or what append and the store's indexes check, says it cannot be
    written, and pass one looks at every record for it."""
    await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    cp, _ = await export_to(store, path)
    edited = _damaged(lines_of(path), damage)
    assert verify_lines(edited, cp).is_sound
    monkeypatch.setattr(restore_mod, "BATCH", 3)
    target = other_tenant(store)
    with pytest.raises(RestoreRefused, match=REFUSED_LATE[damage]):
        await restore_export(target, write_lines(tmp_path / "edited.jsonl", edited))
    assert await _empty(target)


def _declared_unreadable(lines: list[str], sealed: bool) -> list[str]:
    """A run's records dropped and the run named unreadable in the trailer, with its counts
    fixed: what an export of a source whose run cannot be read looks like."""
    start, end, block = next(b for b in _blocks(lines) if ("index" in b[2]) is sealed)
    trailer = json.loads(lines[-1])
    trailer["records"] -= end - start - 1
    trailer["runs_exported"] -= 1
    trailer["unreadable"] = [{"run": block["run"], "reason": "a record does not verify"}]
    return [*lines[: start + 1], *lines[end:-1], _dumps(trailer)]


async def test_a_run_declared_unreadable_restores_only_when_the_log_needs_none_of_it(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    """The file is sound either way (its leaves are in the blocks). A sealed run without
    records cannot be given its leaf again, so the restore refuses before writing rather
    than build another root; an open one is left out, and the report says so."""
    await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    cp, _ = await export_to(store, path)
    sealed = _declared_unreadable(lines_of(path), sealed=True)
    assert verify_lines(sealed, cp).is_sound
    target = other_tenant(store)
    with pytest.raises(RestoreRefused, match="sealed in the export's log carry no records"):
        await restore_export(target, write_lines(tmp_path / "sealed.jsonl", sealed))
    assert await _empty(target)
    open_ = _declared_unreadable(lines_of(path), sealed=False)
    assert verify_lines(open_, cp).is_sound
    restored = await restore_export(target, write_lines(tmp_path / "open.jsonl", open_))
    assert restored.is_faithful
    assert any("1 open run(s) the export declared unreadable" in n for n in restored.not_carried)


# -- a tenant holding both wire profiles -----------------------------------------------------


async def _run(
    store: SqlJournalStore, profile: WireProfile, run: RunId, i: int, *, seal: bool
) -> None:
    admitted = {"capability": "c", "input": {**AMOUNTS, "i": i}}
    await store.append(1, [profile.append(run, "RunAdmitted", admitted)])
    await store.append(1, [profile.append(run, "Note", {"text": f"{profile.name} {i}", "x": 1.0})])
    if seal:
        await _seal(store, profile, run)


async def _seal(store: SqlJournalStore, profile: WireProfile, run: RunId) -> None:
    head = await store.head(run)
    concluded = {"outcome": "succeeded", "chain_head": head.hash.hex()}
    await store.append(1, [profile.append(run, "RunSealed", concluded)])
    await store.seal(run, 1, "succeeded")


async def migrated(store: SqlJournalStore) -> None:
    """0.4 runs (some sealed), ``migrate_profile`` to 0.22, then 0.22 runs, one 0.4 run
    continued in 0.22 and one sealed after the migration: the log interleaves both."""
    old = [RunId.generate() for _ in range(4)]
    for i, run in enumerate(old):
        await _run(store, AGENTPLANE_0_4, run, i, seal=i % 2 == 0)
    assert await store.migrate_profile(AGENTPLANE_0_22) is AGENTPLANE_0_4
    await store.append(1, [AGENTPLANE_0_22.append(old[1], "Note", {"text": "after", "y": 2.5})])
    for i in range(4):
        await _run(store, AGENTPLANE_0_22, RunId.generate(), 10 + i, seal=i % 2 == 1)
    await _seal(store, AGENTPLANE_0_22, old[1])


async def _profile_row(store: SqlJournalStore) -> tuple[str, str | None]:
    async with store.engine.connect() as conn:
        stmt = select(JournalProfile.profile, JournalProfile.previous).where(
            JournalProfile.tenant == store.tenant
        )
        profile, previous = (await conn.execute(stmt)).one()
    return str(profile), previous


@pytest.fixture
def fresh_url(dialect: str, request: pytest.FixtureRequest) -> str:
    """Another migrated database, so the target tenant has the source's name (its log's
    name, ``origin/tenant``, is in the header)."""
    if dialect == "sqlite":
        return str(request.getfixturevalue("sqlite_database")())
    return str(request.getfixturevalue("pg_database")())


async def _restored_equal(
    source: SqlJournalStore, make_store: Callable[..., Any], tmp_path: Path
) -> SqlJournalStore:
    """Export ``source``, restore it into the same tenant of another database, export that:
    the two files are equal byte for byte. Returns the target."""
    path = tmp_path / "source.jsonl"
    cp, trailer = await export_to(source, path)
    assert not trailer.unreadable and cp.size > 0
    versions = {json.loads(json.loads(x)["raw"])["v"] for x in lines_of(path)[1:-1] if "raw" in x}
    assert versions == {1, 4}
    # Sound as this package reads it; agentplane 0.22's typed decode (verify-export's
    # default) rejects the 0.4 records of a mixed file, which only this package restores.
    check = ExportVerifier(None, agentplane_typed=False)
    for line in lines_of(path):
        check.feed(line)
    assert check.finish(cp).is_sound
    target: SqlJournalStore = await make_store(tenant=source.tenant)
    restored = await restore_export(target, path)
    assert restored.is_faithful and restored.differing == 0, restored.to_json()
    again = tmp_path / "again.jsonl"
    await export_to(target, again)
    assert again.read_bytes() == path.read_bytes()
    return target


async def test_a_migrated_tenant_restores_byte_for_byte_with_its_migration(
    store: SqlJournalStore, fresh_url: str, clock: Any, tmp_path: Path
) -> None:
    await migrated(store)
    async with store_factory(SqlJournalStore, fresh_url, store.tenant, clock) as elsewhere:
        target = await _restored_equal(store, elsewhere, tmp_path)
        assert await target.wire_profile() is AGENTPLANE_0_22
        assert await _profile_row(target) == ("agentplane-0.22", "agentplane-0.4")


async def test_a_tenant_two_handles_wrote_in_two_profiles_restores_byte_for_byte(
    make_store: Callable[..., Any], fresh_url: str, clock: Any, tmp_path: Path
) -> None:
    """The window profiles.py leaves open: a handle opened as 0.4 on an empty tenant writes
    nothing, so it never sees a later 0.22 claim and appends 0.4 records beside 0.22 ones."""
    tenant = f"w{uuid.uuid4().hex[:10]}"
    old: SqlJournalStore = await make_store(tenant=tenant)
    assert await old.wire_profile() is AGENTPLANE_0_4
    new: SqlJournalStore = await make_store(tenant=tenant, profile=AGENTPLANE_0_22)
    for i in range(3):
        await _run(old, AGENTPLANE_0_4, RunId.generate(), i, seal=i != 1)
        await _run(new, AGENTPLANE_0_22, RunId.generate(), 10 + i, seal=i != 2)
    source: SqlJournalStore = await make_store(tenant=tenant)
    assert await source.wire_profile() is AGENTPLANE_0_22
    async with store_factory(SqlJournalStore, fresh_url, tenant, clock) as elsewhere:
        target = await _restored_equal(source, elsewhere, tmp_path)
        # The file's records are in both profiles: the target says which it left.
        assert await _profile_row(target) == ("agentplane-0.22", "agentplane-0.4")


async def test_drill_passes_on_a_migrated_tenant(store: SqlJournalStore, database_url: str) -> None:
    await migrated(store)
    drill = await tamper_cli("drill", "--url", database_url, "--tenant", store.tenant, "--json")
    assert drill.returncode == 0, drill.stdout + drill.stderr
    report = json.loads(drill.stdout)
    (tenant,) = report["tenants"]
    assert report["ok"] and tenant["tenant"] == store.tenant
    assert tenant["restore"]["faithful"] and tenant["verify"]["sound"]


async def test_drill_on_a_tenant_holding_a_damaged_sealed_run_fails_not_refuses(
    store: SqlJournalStore, database_url: str
) -> None:
    """The export names the damaged sealed run unreadable, and restore refuses such a file:
    for a drill that is the backup path failing (1, DRILL FAILED), never "not run" (2)."""
    from sqlalchemy import text

    from support.helpers import note

    run = RunId.generate()
    lease = await store.acquire(run, "w", 30)
    await store.append(lease.epoch, [note(run, "kept"), note(run, "edited")])
    await store.seal(run, lease.epoch, "done")
    where = "WHERE tenant = :t AND run_id = :r AND seq = 2"
    params = {"t": store.tenant, "r": str(run)}
    async with store.engine.begin() as conn:
        raw = (await conn.execute(text(f"SELECT raw FROM journal {where}"), params)).scalar_one()
        edited = bytes(raw).replace(b"edited", b"Edited")
        await conn.execute(
            text(f"UPDATE journal SET raw = :raw {where}"), {**params, "raw": edited}
        )
    drill = await tamper_cli("drill", "--url", database_url, "--tenant", store.tenant)
    assert drill.returncode == 1, drill.stdout + drill.stderr
    assert "DRILL FAILED" in drill.stdout + drill.stderr and "Traceback" not in drill.stderr


async def test_a_022_tenant_holding_our_own_kinds_restores_and_drills(
    make_store: Callable[..., Any], fresh_url: str, clock: Any, tmp_path: Path, database_url: str
) -> None:
    """LangGraph checkpoints are this package's own kinds, which agentplane 0.22's typed
    decode cannot read: verify-export says so (agentplane's verify would reject the file),
    but this package's restore and drill replay them, byte for byte."""
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from agentplane_journal.langgraph import JournalSaver

    tenant = f"g{uuid.uuid4().hex[:10]}"
    source: SqlJournalStore = await make_store(tenant=tenant, profile=AGENTPLANE_0_22)
    saver = JournalSaver(source)
    config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    await saver.aput(config, empty_checkpoint(), {"source": "input"}, {})
    await saver.aclose()
    path = tmp_path / "source.jsonl"
    await export_to(source, path)
    async with store_factory(SqlJournalStore, fresh_url, tenant, clock) as elsewhere:
        target: SqlJournalStore = await elsewhere(tenant=tenant)
        restored = await restore_export(target, path)
        assert restored.is_faithful, restored.to_json()
        again = tmp_path / "again.jsonl"
        await export_to(target, again)
        assert again.read_bytes() == path.read_bytes()
    drill = await tamper_cli("drill", "--url", database_url, "--tenant", tenant)
    assert drill.returncode == 0, drill.stdout + drill.stderr
