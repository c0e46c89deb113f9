"""The tamper battery: an attacker with write access to the database, but no signing key.

Each case edits one thing with SQL straight on the database — one column of one row, rows
copied under another run id, a forged head, deleted activity rows, records deleted under a
seal, hash-valid hostile bodies, and on SQLite values of the wrong storage class — and
every case must be caught by ``read``/``verify`` as :class:`CorruptRecordError` (never
another exception), and by ``agentplane-journal verify --all`` in a subprocess, which
reports every victim, carries on past it and exits 1. On both dialects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from agentplane_journal import (
    Append,
    CaseId,
    CorruptRecordError,
    DuplicateEffectError,
    RunId,
    SqlJournalStore,
    StoreError,
)

from support.helpers import admitted, key, note, started
from support.tamper import SIGNER, VERIFIER, Victim, honest_run, run_cli
from support.tamper_cases import CASES, SQLITE_ONLY, tamper


async def assert_detected(store: SqlJournalStore, run: RunId) -> None:
    """verify fails with CorruptRecordError; no reader raises anything but a StoreError."""
    with pytest.raises(CorruptRecordError):
        await store.verify(run)
    with pytest.raises(CorruptRecordError):
        await store.verify(run, VERIFIER, require_signature=False)
    for read in (store.read(run), store.head(run), store.inclusion_proof(run)):
        try:
            await read
        except StoreError:
            pass


@pytest.mark.parametrize("name", list(CASES))
async def test_each_tamper_is_caught_by_verify_and_crashes_no_reader(
    make_store: Callable[..., Any], name: str
) -> None:
    store = await make_store(signer=SIGNER)
    await _caught(store, name)


@pytest.mark.parametrize("name", list(SQLITE_ONLY))
async def test_each_value_of_the_wrong_storage_class_is_caught_on_sqlite(
    sqlite_database: Callable[..., str], name: str
) -> None:
    # PostgreSQL's column types refuse these values outright; SQLite stores them.
    store = await SqlJournalStore.connect(sqlite_database(), signer=SIGNER)
    try:
        await _caught(store, name)
    finally:
        await store.close()


async def _caught(store: SqlJournalStore, name: str) -> None:
    bystander = await honest_run(store)
    victim, broken = await tamper(store, name)
    for run in broken:
        await assert_detected(store, run)
    assert await store.verify(bystander.run, VERIFIER, require_signature=True)
    # Readers that sweep many rows do not crash on the hostile one either.
    for sweep in (
        store.case_history(victim.case, 100),
        store.recent_runs(None, 100),
        store.checkpoint(),
        store.sealed_runs(),
        store.audit_runs(),
    ):
        try:
            await sweep
        except StoreError:
            pass


# -- what the store does with what it reads -------------------------------------------------


async def test_a_forged_head_is_never_chained_onto_or_sealed(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store(signer=SIGNER)
    victim = await honest_run(store)
    before = await store.checkpoint()
    await CASES["head forged"](victim)
    with pytest.raises(CorruptRecordError, match="hash mismatch") as caught:
        await store.append(1, [note(victim.run, "onto a forged head")])
    assert caught.value.seq == 3
    with pytest.raises(CorruptRecordError):
        await store.seal(victim.run, 1, "succeeded")
    with pytest.raises(CorruptRecordError):
        await store.head(victim.run)
    assert await store.checkpoint() == before  # nothing entered the log
    assert await store.inclusion_proof(victim.run) is None


@pytest.mark.parametrize("column", ["kind", "effect_key"])
async def test_an_edited_effect_started_column_never_lets_a_second_start_verify(
    make_store: Callable[..., Any], column: str
) -> None:
    store = await make_store(signer=SIGNER)
    victim = await honest_run(store)
    edit = "kind='Note'" if column == "kind" else f"effect_key='{key(9).hex()}'"
    await victim.sql(f"UPDATE journal SET {edit} WHERE tenant=:t AND run_id=:r AND seq=2")
    # The index no longer sees the first start, so the store writes (and signs) a second.
    # The run must never verify again, whatever the attacker then does to the columns.
    try:
        await store.append(1, [started(victim.run, key(1))])
    except (DuplicateEffectError, CorruptRecordError):
        pass
    for attempt in ("as left", "second start's column edited too"):
        if attempt != "as left":
            away = "kind='Note'" if column == "kind" else f"effect_key='{key(10).hex()}'"
            await victim.sql(f"UPDATE journal SET {away} WHERE tenant=:t AND run_id=:r AND seq=4")
            await victim.sql(
                "UPDATE journal SET kind='EffectStarted', effect_key=:k "
                "WHERE tenant=:t AND run_id=:r AND seq=2",
                k=key(1).hex(),
            )
        with pytest.raises(CorruptRecordError):
            await store.verify(victim.run, VERIFIER, require_signature=True)


async def test_exactly_once_is_checked_over_the_bodies() -> None:
    from agentplane_journal import Digest, Record
    from agentplane_journal.core.chain import verify_run

    run = RunId.generate()
    records, prev = [], Digest.ZERO
    for seq, item in enumerate([started(run, key(1)), note(run), started(run, key(1))], 1):
        records.append(Record.seal(item.body(seq, 1), prev))
        prev = records[-1].hash
    with pytest.raises(CorruptRecordError, match="second EffectStarted") as caught:
        verify_run(records)
    assert caught.value.seq == 3


async def test_case_history_is_exact_when_the_case_index_lies(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    case_ = CaseId.generate()
    first, second = RunId.generate(), RunId.generate()
    await store.append(1, [admitted(first, case_), note(first)])
    await store.append(1, [admitted(second, case_)])
    # A record that only mentions the case's ULID in a field does not name the case.
    mention = RunId.generate()
    await store.append(1, [Append(mention, "Note", {"text": f"see {case_.ulid}"})])
    history = await store.case_history(case_, 10)
    assert [(r.run, r.seq) for r in history] == sorted([(first, 1), (second, 1)])
    assert len(await store.case_history(case_, 1)) == 1

    v = Victim(store, second, case_, False)
    await v.sql("UPDATE journal SET case_id=NULL WHERE tenant=:t AND run_id=:r AND seq=1")
    with pytest.raises(CorruptRecordError, match="case_id"):
        await store.case_history(case_, 10)  # the removed entry is found, and refused
    await v.sql(
        "UPDATE journal SET case_id=:c WHERE tenant=:t AND run_id=:r AND seq=1", c=str(case_)
    )
    v = Victim(store, mention, case_, False)
    await v.sql(
        "UPDATE journal SET case_id=:c WHERE tenant=:t AND run_id=:r AND seq=1", c=str(case_)
    )
    with pytest.raises(CorruptRecordError, match="case_id"):
        await store.case_history(case_, 10)  # the added entry is refused, not returned


# -- the command line, as an auditor runs it --------------------------------------------------


@pytest.mark.slow
async def test_verify_all_and_export_all_report_every_tampered_run_and_carry_on(
    make_store: Callable[..., Any], dialect: str, database_url: str
) -> None:
    store = await make_store(signer=SIGNER)
    honest = [await honest_run(store), await honest_run(store, seal=True)]
    broken: dict[str, list[RunId]] = {}
    names = list(CASES) + (list(SQLITE_ONLY) if dialect == "sqlite" else [])
    for name in names:
        _, broken[name] = await tamper(store, name)
    hostile_id = "run_not-a-run-id"
    await Victim(store, honest[0].run, honest[0].case, False).sql(
        "INSERT INTO journal (tenant, run_id, seq, epoch, kind, prev_hash, hash, raw) "
        "SELECT tenant, :o, seq, epoch, kind, prev_hash, hash, raw FROM journal "
        "WHERE tenant=:t AND run_id=:r",
        o=hostile_id,
    )

    common = ["--url", database_url, "--tenant", store.tenant]
    result = run_cli("verify", "--all", "--json", *common)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    report = {r["run"]: r for r in json.loads(result.stdout)["runs"]}
    for name, runs in broken.items():
        for run in runs:
            got = report.get(str(run))
            assert got is not None and not got["ok"], (name, run, got)
    assert not report[hostile_id]["ok"]
    for run in honest:
        assert report[str(run.run)]["ok"], report[str(run.run)]

    signed = run_cli(
        "verify",
        "--all",
        "--trust",
        f"tamper-key={SIGNER.public_key.hex()}",
        "--require-signature",
        *common,
    )
    assert signed.returncode == 1 and "Traceback" not in signed.stderr
    assert "FAILED" in signed.stdout

    export = run_cli("export", "--format", "journal", "--all", *common)
    assert export.returncode == 1 and "Traceback" not in export.stderr
    exported = {json.loads(line).get("run") for line in export.stdout.splitlines()}
    assert {str(r.run) for r in honest} <= exported  # the audit carried on past every bad run
    for name, runs in broken.items():
        for run in runs:
            assert f"FAILED {run}" in export.stderr, (name, run)
            assert str(run) not in exported, name


@pytest.mark.slow
@pytest.mark.parametrize(
    "edit",
    ["run_id='run_not-a-run'", "chain_head=:short"],
    ids=["seal row's run id", "seal row's chain head"],
)
async def test_a_hostile_seal_row_is_reported_and_the_audit_carries_on(
    make_store: Callable[..., Any], database_url: str, edit: str
) -> None:
    store = await make_store(signer=SIGNER)
    victim = await honest_run(store, seal=True)
    bystander = await honest_run(store)
    await victim.sql(f"UPDATE run_seal SET {edit} WHERE tenant=:t AND run_id=:r", short=b"\x01")
    with pytest.raises(CorruptRecordError):
        await store.sealed_runs()
    result = run_cli("verify", "--all", "--json", "--url", database_url, "--tenant", store.tenant)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    out = json.loads(result.stdout)
    report = {r["run"]: r for r in out["runs"]}
    assert report[str(bystander.run)]["ok"]  # carried on past the bad seal
    assert not out["log"]["ok"] or not all(r["ok"] for r in report.values())
