"""Backups of the whole database by default, on both dialects (issue 34, items 4 and 5).

A database of two tenants in two wire profiles (``default`` in ``agentplane-0.4``, ``acme``
in ``agentplane-0.22``) is backed up with the default command (``export --all --output
DIR``: every tenant), verified, and restored into an empty database: each tenant's rebuilt
root equals its source's, ``tenants`` reports the same sizes and profiles, and the restored
database's backup is the source's, byte for byte. ``export --tenant`` still writes the
single file it always wrote (the backup's member, byte for byte). ``drill --scratch-url``
runs three times in a row (it made its scratch target and removes it), and refuses a
scratch target it did not make, leaving it untouched.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.exportfmt.backup_manifest import ManifestError, parse_manifest
from agentplane_journal.migrations.scratch import (
    DRILL_APPLICATION_ID,
    SCHEMA_COMMENT,
    SCHEMA_PREFIX,
    leftover_schemas,
)
from agentplane_journal.tlog.checkpoint import Checkpoint

from support.cli import CliResult

TENANTS = {"default": "agentplane-0.4", "acme": "agentplane-0.22"}


RUNS, SEALED = 7, 4
RECORDS = 2 * RUNS + SEALED


async def _history(store: SqlJournalStore) -> None:
    """``RUNS`` runs in the store's own wire profile (floats, which the two profiles write
    differently), ``SEALED`` of them sealed in an order unlike their ids."""
    profile = store.profile
    runs = [RunId.generate() for _ in range(RUNS)]
    label = {"provenance": [], "sensitivity": "public", "trust": "trusted"}
    for i, run in enumerate(runs):
        admitted = {"capability": "c", "input": {"i": i, "x": 1.5, "y": 1e30}, "input_label": label}
        await store.append(1, [profile.append(run, "RunAdmitted", admitted)])
        await store.append(1, [profile.append(run, "Note", {"text": f"run {i} ünï", "f": 0.1})])
    for run in reversed(runs[::2]):
        head = (await store.head(run)).hash.hex()
        sealed = {"outcome": "succeeded", "chain_head": head}
        await store.append(1, [profile.append(run, "RunSealed", sealed)])
        await store.seal(run, 1, "succeeded")


async def _two_tenants(url: str) -> dict[str, Checkpoint]:
    checkpoints = {}
    for tenant, profile in TENANTS.items():
        store = await SqlJournalStore.connect(url, tenant=tenant, profile=profile)
        try:
            await _history(store)
            checkpoints[tenant] = await store.checkpoint()
        finally:
            await store.close()
    return checkpoints


async def _checkpoints(url: str) -> dict[str, Checkpoint]:
    found = {}
    for tenant in TENANTS:
        store = await SqlJournalStore.connect(url, tenant=tenant)
        try:
            found[tenant] = await store.checkpoint()
        finally:
            await store.close()
    return found


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_the_default_backup_covers_every_tenant_and_restores_with_equal_roots(
    fresh: Callable[..., str], tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    source = fresh()
    cps = asyncio.run(_two_tenants(source))
    listed = cli("tenants", "--url", source, "--json")
    assert listed.returncode == 0, listed.stderr
    tenants = json.loads(listed.stdout)
    assert [(t["tenant"], t["profile"]) for t in tenants] == sorted(
        [("acme", "agentplane-0.22"), ("default", "agentplane-0.4")]
    )
    assert all(t["runs"] == RUNS and t["records"] == RECORDS for t in tenants), tenants
    assert {t["tenant"]: t["log_size"] for t in tenants} == {t: cps[t].size for t in TENANTS}
    text = cli("tenants", "--url", source)
    assert "acme" in text.stdout and "agentplane-0.22" in text.stdout

    backup = tmp_path / "backup"
    done = cli("export", "--all", "--url", source, "--output", str(backup))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((backup / "manifest.json").read_text())
    members = {m["tenant"]: m for m in manifest["tenants"]}
    assert {t: m["profile"] for t, m in members.items()} == TENANTS
    assert {t: m["root"] for t, m in members.items()} == {t: cps[t].root.hex() for t in TENANTS}
    # One tenant named: the single file it always was, the backup's member byte for byte.
    single = tmp_path / "acme.jsonl"
    one = cli("export", "--all", "--tenant", "acme", "--url", source, "-o", str(single))
    assert one.returncode == 0, one.stderr
    assert single.read_bytes() == (backup / members["acme"]["file"]).read_bytes()
    assert json.loads(single.read_text().splitlines()[0])["canon"] == 1

    notes = []
    for tenant in TENANTS:
        note = tmp_path / f"{tenant}.note"
        note.write_text(cli("checkpoint", "--url", source, "--tenant", tenant).stdout)
        notes += ["--checkpoint", f"@{note}"]
    verified = cli("verify-export", str(backup), *notes, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert report["sound"] and not report["not_checked"], report
    assert sum(t["runs_sound"] for t in report["tenants"]) == 2 * RUNS
    assert all(
        not any(n.startswith("deletion") for n in t["not_checked"]) for t in report["tenants"]
    )

    target = fresh()
    restored = cli("restore", str(backup), "--url", target, "--json")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    result = json.loads(restored.stdout)
    assert result["faithful"] and {t["tenant"] for t in result["tenants"]} == set(TENANTS)
    rebuilt = asyncio.run(_checkpoints(target))
    assert {t: (c.size, c.root) for t, c in rebuilt.items()} == {
        t: (c.size, c.root) for t, c in cps.items()
    }
    assert json.loads(cli("tenants", "--url", target, "--json").stdout) == tenants
    again = tmp_path / "again"
    assert cli("export", "--all", "--url", target, "-o", str(again)).returncode == 0
    assert _files(again) == _files(backup)
    # Restoring it again: refused before anything is written, naming the tenants.
    twice = cli("restore", str(backup), "--url", target)
    assert twice.returncode == 2 and "'acme'" in twice.stderr and "nothing written" in twice.stderr


def test_a_backup_that_is_not_whole_is_found_or_refused(
    sqlite_database: Callable[..., str], tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    source = sqlite_database()
    asyncio.run(_two_tenants(source))
    backup = tmp_path / "backup"
    assert cli("export", "--all", "--url", source, "-o", str(backup)).returncode == 0
    # Without --output (stdout) or into a .jsonl name: a usage error that says what to do.
    bare = cli("export", "--all", "--url", source)
    assert bare.returncode == 2 and "--output DIR" in bare.stderr
    named = cli("export", "--all", "--url", source, "-o", str(tmp_path / "x.jsonl"))
    assert named.returncode == 2 and "--tenant NAME" in named.stderr
    # Into a directory that holds something: refused.
    busy = cli("export", "--all", "--url", source, "-o", str(backup))
    assert busy.returncode == 2 and "not empty" in busy.stderr

    manifest = json.loads((backup / "manifest.json").read_text())
    acme = next(m for m in manifest["tenants"] if m["tenant"] == "acme")
    note = tmp_path / "acme.note"
    note.write_text(cli("checkpoint", "--url", source, "--tenant", "acme").stdout)
    # A member cut short: a finding (exit 1); restore refuses with nothing written.
    member = backup / acme["file"]
    whole = member.read_bytes()
    member.write_bytes(whole[:-10])
    cut = cli("verify-export", str(backup))
    assert cut.returncode == 1 and "was cut, damaged or replaced" in cut.stdout
    target = sqlite_database()
    refused = cli("restore", str(backup), "--url", target)
    assert refused.returncode == 2 and "nothing written" in refused.stderr
    assert json.loads(cli("tenants", "--url", target, "--json").stdout) == []
    member.write_bytes(whole)
    # A tenant dropped from the manifest (and its file): found by its checkpoint.
    manifest["tenants"] = [m for m in manifest["tenants"] if m["tenant"] != "acme"]
    (backup / "manifest.json").write_text(json.dumps(manifest))
    member.unlink()
    unchecked = cli("verify-export", str(backup))
    assert unchecked.returncode == 0 and "holds every tenant" in unchecked.stdout
    dropped = cli("verify-export", str(backup), "--checkpoint", f"@{note}")
    assert dropped.returncode == 1 and "a tenant is missing" in dropped.stdout
    # No manifest: not a backup (or one cut short), exit 2.
    (backup / "manifest.json").unlink()
    gone = cli("verify-export", str(backup))
    assert gone.returncode == 2 and "manifest.json" in gone.stderr


async def _killed_drill_schema(url: str, name: str) -> None:
    from sqlalchemy import text

    from agentplane_journal.db.engine import create_engine

    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f"CREATE SCHEMA {name}"))
            await conn.execute(text(f"COMMENT ON SCHEMA {name} IS '{SCHEMA_COMMENT}'"))
    finally:
        await engine.dispose()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_drill_runs_three_times_in_a_row_and_never_touches_what_it_did_not_make(
    fresh: Callable[..., str],
    request: pytest.FixtureRequest,
    tmp_path: Path,
    cli: Callable[..., CliResult],
) -> None:
    source = fresh()
    asyncio.run(_two_tenants(source))
    postgres = source.startswith("postgresql")
    scratch = fresh(migrated=False) if postgres else f"sqlite:///{tmp_path / 'scratch.db'}"
    for night in range(3):
        drill = cli("drill", "--url", source, "--scratch-url", scratch, "--json")
        assert drill.returncode == 0, (night, drill.stdout, drill.stderr)
        report: dict[str, Any] = json.loads(drill.stdout)
        assert report["ok"] and report["scratch_removed"]
        assert {t["tenant"] for t in report["tenants"]} == set(TENANTS)
        assert all(t["restore"]["faithful"] for t in report["tenants"])
        if postgres:
            assert asyncio.run(leftover_schemas(scratch)) == []
        else:
            assert not (tmp_path / "scratch.db").exists()
    # A scratch target that is the database being backed up: refused.
    same = cli("drill", "--url", source, "--scratch-url", source)
    assert same.returncode == 2 and "being backed up" in same.stderr
    if postgres:
        # What a drill killed outright leaves: named in the next drill's report, not dropped
        # (a concurrent drill's schema looks the same).
        asyncio.run(_killed_drill_schema(scratch, SCHEMA_PREFIX + "deadbeef0000"))
        named = cli("drill", "--url", source, "--scratch-url", scratch, "--json")
        assert named.returncode == 0, named.stderr
        left = json.loads(named.stdout)["leftover_scratch_schemas"]
        assert left == [SCHEMA_PREFIX + "deadbeef0000"]
        assert asyncio.run(leftover_schemas(scratch)) == left
        return
    # A SQLite scratch file the drill did not make (a journal): refused, left as it was.
    other = sqlite_database_copy = Path(source.split("///", 1)[1])
    journal = tmp_path / "someone-elses.db"
    journal.write_bytes(sqlite_database_copy.read_bytes())
    before = _digest(journal)
    refused = cli("drill", "--url", source, "--scratch-url", f"sqlite:///{journal}")
    assert refused.returncode == 2 and "was not made by a drill" in refused.stderr
    assert journal.exists() and _digest(journal) == before and other.exists()
    # One a killed drill left behind (its stamp): replaced, used and removed.
    left = tmp_path / "left.db"
    conn = sqlite3.connect(left)
    conn.execute(f"PRAGMA application_id = {DRILL_APPLICATION_ID}")
    conn.execute("CREATE TABLE journal (x)")
    conn.commit()
    conn.close()
    reused = cli("drill", "--url", source, "--scratch-url", f"sqlite:///{left}")
    assert reused.returncode == 0, reused.stdout + reused.stderr
    assert not left.exists()


def test_a_hostile_manifest_is_refused_with_the_reason() -> None:
    good = {
        "tenant": "acme",
        "file": "0001-acme.jsonl",
        "profile": "agentplane-0.4",
        "origin": "agentplane/acme",
        "size": 1,
        "root": "00" * 32,
        "runs": 1,
        "records": 1,
        "unreadable": 0,
        "bytes": 10,
        "sha256": "ab" * 32,
    }

    def manifest(*members: dict[str, Any], **top: Any) -> str:
        value = {"kind": "agentplane-journal.backup", "version": 1, "tenants": list(members)}
        return json.dumps({**value, **top})

    assert parse_manifest(manifest(good)).members[0].tenant == "acme"
    for text, reason in (
        (manifest({**good, "file": "../escape.jsonl"}), "not a plain name"),
        (manifest({**good, "file": "manifest.json"}), "not a plain name"),
        (manifest({**good, "tenant": "a/b"}), "not a tenant name"),
        (manifest({**good, "tenant": " acme"}), "not a tenant name"),
        (manifest(good, {**good, "file": "other.jsonl"}), "listed twice"),
        (manifest({**good, "sha256": "AB" * 32}), "64 lowercase hex"),
        (manifest({**good, "size": -1}), "whole number"),
        (manifest({**good, "runs": True}), "whole number"),
        (manifest(good, version=2), "version 2"),
        ("{", "not JSON"),
    ):
        with pytest.raises(ManifestError, match=reason):
            parse_manifest(text)


async def _hostile_tenant_rows(url: str) -> None:
    """A wire-profile row under a name the store refuses; on SQLite also one that is not
    text at all (it sorts after every text value there)."""
    from sqlalchemy import text

    from agentplane_journal.db.engine import create_engine

    engine = create_engine(url)
    insert = (
        "INSERT INTO journal_profile (tenant, profile, changed_at) VALUES ({}, 'agentplane-0.4', 0)"
    )
    try:
        async with engine.begin() as conn:
            await conn.execute(text(insert.format("'a/b'")))
            if url.startswith("sqlite"):
                await conn.execute(text(insert.format("X'00ff'")))
    finally:
        await engine.dispose()


def test_a_hostile_tenant_row_is_named_and_every_other_tenant_still_covered(
    fresh: Callable[..., str], tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    source = fresh()
    asyncio.run(_two_tenants(source))
    asyncio.run(_hostile_tenant_rows(source))
    listed = cli("tenants", "--url", source, "--json")
    assert listed.returncode == 1 and "INVALID tenant 'a/b'" in listed.stderr
    assert {t["tenant"] for t in json.loads(listed.stdout)} == set(TENANTS)
    if source.startswith("sqlite"):
        assert "INVALID tenant b'\\x00\\xff'" in listed.stderr
    backup = tmp_path / "backup"
    exported = cli("export", "--all", "--url", source, "-o", str(backup))
    assert exported.returncode == 1 and "INVALID tenant 'a/b'" in exported.stderr
    manifest = json.loads((backup / "manifest.json").read_text())
    assert {m["tenant"] for m in manifest["tenants"]} == set(TENANTS)
    drill = cli("drill", "--url", source, "--json")
    assert drill.returncode == 1 and "Traceback" not in drill.stderr
    report = json.loads(drill.stdout)
    assert not report["ok"] and "'a/b'" in report["invalid_tenants"]
    assert all(t["ok"] for t in report["tenants"])
