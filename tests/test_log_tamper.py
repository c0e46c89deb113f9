"""The log-table tamper battery: an attacker edits the log's tables, not the journal's.

The shape of ``test_tamper.py``'s battery, for ``log_tree``, ``run_seal``'s log columns and
the tenant's log counter in ``journal_counter``: each case edits one thing with SQL straight
on the database (a node at level -1, a position of 2**63 - 1, a TEXT hash on SQLite...), and
then, on both dialects:

* ``audit_log`` reports it (never raises), and so do ``verify --all`` and ``prove`` (the
  command line's ``main``, in-process for speed; the ``prove`` test runs the installed
  command): exit 1 with a message, never a traceback, never the usage code 2;
* a seal either works or says :class:`CorruptLogError` (with ``reindex-log`` in its advice),
  never ``OverflowError`` or a driver error: a hostile row must not block seals for ever;
* ``reindex-log`` repairs whatever can be rebuilt from the seals (then the audit is clean and
  a new seal lands), and what cannot (an edited seal) stays reported.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agentplane_journal import CorruptLogError, SqlJournalStore, StoreError

from support.tamper import SIGNER, Victim, honest_run, run_cli, tamper_cli

BIG = 2**63 - 1


@dataclass(frozen=True)
class Case:
    sql: str
    #: Rebuilt from the seals by ``reindex-log``; false for an edited seal.
    repairable: bool = True
    sqlite_only: bool = False
    #: Tables whose floor CHECKs (revision 0004_checks) the edit goes around, as it must.
    around: tuple[str, ...] = ()


_NODE = "WHERE tenant=:t AND level=:lv AND idx=:ix"
_SEAL = "WHERE tenant=:t AND run_id=:r"
_COUNTER = "WHERE name='log_position/' || :t"

# Five sealed runs: the stored tree holds leaves (0, 0..4), (1, 0), (1, 1) and (2, 0). The
# victim (:r) is leaf 2, :last leaf 4; :lv/:ix name the node a case edits (default (1, 1)).
CASES: dict[str, Case] = {
    "node at level -1": Case(f"UPDATE log_tree SET level=-1 {_NODE}"),
    "node at level 63": Case(f"UPDATE log_tree SET level=63 {_NODE}"),
    "node at level 2**31 - 1": Case(f"UPDATE log_tree SET level=2147483647 {_NODE}"),
    "node at a negative index": Case(f"UPDATE log_tree SET idx=-1 {_NODE}"),
    "leaf at index 2**63 - 1": Case(f"UPDATE log_tree SET idx={BIG} {_NODE.replace(':lv', '0')}"),
    "leaf deleted (a missing position)": Case(
        f"DELETE FROM log_tree {_NODE.replace(':lv', '0').replace(':ix', '2')}"
    ),
    "leaf copied to a new position (a duplicated one)": Case(
        "INSERT INTO log_tree (tenant, level, idx, hash, run_id) "
        "SELECT tenant, 0, 5, hash, NULL FROM log_tree WHERE tenant=:t AND level=0 AND idx=0"
    ),
    "node hash of 1 byte": Case(f"UPDATE log_tree SET hash=:short {_NODE}"),
    "node hash of 33 bytes": Case(f"UPDATE log_tree SET hash=:long {_NODE}"),
    "leaf names no run": Case(
        f"UPDATE log_tree SET run_id=NULL {_NODE.replace(':lv', '0').replace(':ix', '2')}"
    ),
    "seal log_index 2**63 - 1": Case(
        f"UPDATE run_seal SET log_index={BIG} WHERE tenant=:t AND run_id=:last"
    ),
    "seal log_index negative": Case(
        f"UPDATE run_seal SET log_index=-7 {_SEAL}", around=("run_seal",)
    ),
    "seal log_index -2**63": Case(
        f"UPDATE run_seal SET log_index={-BIG - 1} {_SEAL}", around=("run_seal",)
    ),
    "log counter 2**63 - 1": Case(f"UPDATE journal_counter SET value={BIG} {_COUNTER}"),
    "log counter negative": Case(f"UPDATE journal_counter SET value=-5 {_COUNTER}"),
    "seal chain_head edited": Case(
        f"UPDATE run_seal SET chain_head=:other {_SEAL}", repairable=False
    ),
    "seal chain_head of 1 byte": Case(
        f"UPDATE run_seal SET chain_head=:short {_SEAL}", repairable=False
    ),
    # SQLite columns take any storage class; PostgreSQL's types refuse these outright.
    "node level as TEXT": Case(f"UPDATE log_tree SET level='one' {_NODE}", sqlite_only=True),
    "node level as BLOB": Case(
        f"UPDATE log_tree SET level=CAST('1' AS BLOB) {_NODE}", sqlite_only=True
    ),
    "leaf idx as TEXT": Case(
        f"UPDATE log_tree SET idx='two' {_NODE.replace(':lv', '0').replace(':ix', '2')}",
        sqlite_only=True,
    ),
    "leaf idx as REAL": Case(
        f"UPDATE log_tree SET idx=1.5 {_NODE.replace(':lv', '0').replace(':ix', '1')}",
        sqlite_only=True,
    ),
    "node hash as 32 characters of TEXT": Case(
        f"UPDATE log_tree SET hash='0123456789abcdef0123456789abcdef' {_NODE}", sqlite_only=True
    ),
    "leaf hash as TEXT": Case(
        f"UPDATE log_tree SET hash=hex(hash) {_NODE.replace(':lv', '0').replace(':ix', '3')}",
        sqlite_only=True,
    ),
    "leaf run_id as BLOB": Case(
        "UPDATE log_tree SET run_id=CAST(run_id AS BLOB) "
        + _NODE.replace(":lv", "0").replace(":ix", "2"),
        sqlite_only=True,
    ),
    "seal log_index as TEXT": Case(
        "UPDATE run_seal SET log_index='last' WHERE tenant=:t AND run_id=:last", sqlite_only=True
    ),
    "seal log_index as REAL": Case(
        f"UPDATE run_seal SET log_index=log_index + 0.5 {_SEAL}", sqlite_only=True
    ),
    "log counter as TEXT": Case(
        f"UPDATE journal_counter SET value='many' {_COUNTER}", sqlite_only=True
    ),
    "seal chain_head as TEXT": Case(
        f"UPDATE run_seal SET chain_head='0123456789abcdef0123456789abcdef' {_SEAL}",
        repairable=False,
        sqlite_only=True,
    ),
}


async def _log(store: SqlJournalStore) -> tuple[list[Victim], Victim]:
    """Five sealed runs (leaves 0..4) and an open one; the victim is leaf 2."""
    runs = [await honest_run(store, seal=True) for _ in range(5)]
    await honest_run(store)
    return runs, runs[2]


async def _apply(case: Case, runs: list[Victim], victim: Victim) -> None:
    await victim.sql(
        case.sql,
        around=case.around,
        lv=1,
        ix=1,
        last=str(runs[-1].run),
        short=b"\x01",
        long=bytes(33),
        other=bytes(range(32)),
    )


async def _seal_or_refuse(store: SqlJournalStore) -> bool:
    """A new seal lands (True) or is refused with CorruptLogError naming reindex-log."""
    try:
        await honest_run(store, seal=True)
    except CorruptLogError as error:
        assert "reindex-log" in str(error), error
        return False
    return True


def _installed(*args: str) -> Any:
    result = run_cli(*args)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _cases(dialect: str) -> list[str]:
    return [n for n, c in CASES.items() if dialect == "sqlite" or not c.sqlite_only]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
async def test_each_hostile_log_row_is_reported_and_reindex_repairs_what_the_seals_can(
    make_store: Callable[..., Any], dialect: str, database_url: str, name: str
) -> None:
    case = CASES[name]
    if case.sqlite_only and dialect != "sqlite":
        pytest.skip("PostgreSQL's column types refuse this value")
    store: SqlJournalStore = await make_store(signer=SIGNER)
    runs, victim = await _log(store)
    assert (await store.audit_log()).ok
    await _apply(case, runs, victim)

    audit = await store.audit_log()  # never raises
    assert not audit.ok and audit.detail, audit
    common = ["--url", database_url, "--tenant", store.tenant]
    verify = await tamper_cli("verify", "--all", "--json", *common)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    log = json.loads(verify.stdout)["log"]
    assert not log["ok"] and log["error"], log
    prove = await tamper_cli("prove", str(victim.run), *common)
    assert prove.returncode in (0, 1), prove.stdout + prove.stderr
    if prove.returncode:
        assert "FAILED" in prove.stdout + prove.stderr, prove.stdout + prove.stderr
    for read in (store.checkpoint(), store.inclusion_proof(victim.run), store.sealed_runs()):
        try:
            await read
        except StoreError:
            pass
    await _seal_or_refuse(store)

    fixed = await tamper_cli("reindex-log", "--json", *common)
    assert fixed.returncode in (0, 1), fixed.stdout + fixed.stderr
    after = await store.audit_log()
    if case.repairable:
        assert fixed.returncode == 0, fixed.stdout + fixed.stderr
        assert after.ok, after
        assert (await tamper_cli("verify", "--all", *common)).returncode == 0
    else:
        assert fixed.returncode == 1, fixed.stdout + fixed.stderr
        assert not after.ok and "seal" in (after.detail or ""), after
        assert "cannot" in fixed.stdout + fixed.stderr
    assert await _seal_or_refuse(store)  # seals are never blocked after a reindex
    assert (await store.audit_log()).ok == case.repairable


@pytest.mark.slow
async def test_prove_on_an_edited_seal_fails_as_a_finding_and_says_what_is_wrong(
    make_store: Callable[..., Any], database_url: str
) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    runs, victim = await _log(store)
    await _apply(CASES["seal chain_head edited"], runs, victim)
    common = ["--url", database_url, "--tenant", store.tenant]
    prove = _installed("prove", str(victim.run), *common)
    out = prove.stdout + prove.stderr
    assert prove.returncode == 1, out
    assert "error:" not in prove.stderr, out  # not the usage/connection code
    assert "seal" in out and "records" in out, out
    assert "cannot" in out, out  # reindex-log is not offered as the cure
    assert _installed("prove", str(runs[0].run), *common).returncode == 0  # the others still prove


async def test_a_hostile_log_index_never_blocks_seals_once_reindexed(
    make_store: Callable[..., Any],
) -> None:
    store: SqlJournalStore = await make_store(signer=SIGNER)
    runs, victim = await _log(store)
    before = await store.checkpoint()
    await _apply(CASES["seal log_index 2**63 - 1"], runs, victim)
    assert await store.checkpoint() == before  # positions are ranks: the order is unchanged
    with pytest.raises(CorruptLogError, match="reindex-log"):
        await honest_run(store, seal=True)
    report = await store.reindex_log()
    assert report.repaired >= 1 and not report.ok  # it says what it found, and fixed it
    assert await store.checkpoint() == before  # the relabel changed no leaf
    late = await honest_run(store, seal=True)
    inc = await store.inclusion_proof(late.run)
    assert inc is not None and inc.index == 5
    assert (await store.audit_log()).ok
