"""The `agentplane-journal` command, driven as an operator drives it: in a subprocess.

Journals are built with the Python API (or by `demo`), then inspected, verified, proved and
exported through the command line; tampering is done with SQL straight on the database
file, and exports are re-verified with the core library only. SQLite throughout, plus one
PostgreSQL run so the command is seen on both dialects.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import pty
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentplane_journal import (
    HEAD_REVISION,
    Attestation,
    Checkpoint,
    Digest,
    Ed25519Signer,
    Ed25519Verifier,
    NoteSigner,
    Record,
    RunId,
    leaf_hash,
    verify_attested,
    verify_chain,
    verify_inclusion,
)

from support.cli import CLI, SIGNER, add_runs, db_path, run_cli

pytestmark = pytest.mark.slow

COMMANDS = (
    "upgrade",
    "demo",
    "runs",
    "show",
    "verify",
    "checkpoint",
    "prove",
    "consistency",
    "export",
    "reindex-log",
    "forget-admissions",
    "reindex-admissions",
    "profile",
    "migrate-profile",
    "tiles",
    "serve",
    "witness",
    "receipt",
    "verify-receipt",
    "verify-export",
    "restore",
    "drill",
    "tenants",
)
TRUST = f"test-key={SIGNER.public_key.hex()}"


def fails_cleanly(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The exit code, one line on stderr, no traceback; returns that line."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@dataclass
class Journal:
    url: str
    sealed: list[str] = field(default_factory=list)
    open: list[str] = field(default_factory=list)
    acme: list[str] = field(default_factory=list)


def build(url: str) -> Journal:
    """Default tenant: 3 sealed runs and 1 open; acme: 1 sealed run. All records signed."""
    journal = Journal(url)
    journal.sealed = asyncio.run(add_runs(url, sealed=3))
    journal.open = asyncio.run(add_runs(url, open_=1))
    journal.acme = asyncio.run(add_runs(url, sealed=1, tenant="acme"))
    return journal


@pytest.fixture
def journal(sqlite_database: Callable[..., str]) -> Journal:
    return build(sqlite_database())


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    where = tmp_path_factory.mktemp("demo")
    result = run_cli("demo", "--dir", str(where))
    assert result.returncode == 0, result.stderr
    return where, result.stdout


# -- the command line itself -------------------------------------------------------------


def test_help_lists_every_subcommand_from_the_script_and_the_module(tmp_path: Path) -> None:
    script = shutil.which("agentplane-journal")
    assert script, "the console script is not installed (pip install -e .)"
    for command in ([script], [sys.executable, "-m", "agentplane_journal"], CLI):
        result = run_cli("--help", command=command, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        for name in COMMANDS:
            assert re.search(rf"^\s+{name}\s+\S", result.stdout, re.M), (name, result.stdout)
    sub = run_cli("verify", "--help")
    assert all(opt in sub.stdout for opt in ("--url", "--tenant", "--json", "--trust", "--all"))


def test_usage_errors_exit_2() -> None:
    for args in (
        ["verify"],  # neither RUN nor --all
        ["verify", "--all", "--require-signature"],  # nothing trusted to require
        ["verify", "--all", "--trust", "k=abc"],  # not a public key
    ):
        result = run_cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr


# -- demo --------------------------------------------------------------------------------


def test_demo_runs_the_workload_verifies_and_proves_it(demo: tuple[Path, str]) -> None:
    where, out = demo
    database = where / "agentplane-journal-demo.db"
    assert database.exists()
    assert str(database) in out
    assert re.search(r"^\s+agentplane\n\s+4\n\s+[A-Za-z0-9+/]{43}=\n", out, re.M), out
    assert re.search(r"^\s+agentplane/acme\n\s+1\n", out, re.M)
    for shown in ("DEMO KEY", "DuplicateEffectError", "FencedError", "LeaseHeldError"):
        assert shown in out
    assert "FAILED" not in out
    assert "agentplane-journal runs --url sqlite+aiosqlite:///" in out


def test_demo_database_answers_the_suggested_commands(demo: tuple[Path, str]) -> None:
    where, out = demo
    url = f"sqlite+aiosqlite:///{where / 'agentplane-journal-demo.db'}"
    trust = re.search(r"--trust (demo-key=[0-9a-f]{64})", out)
    assert trust, out
    result = run_cli("verify", "--all", "--url", url, "--trust", trust[1], "--require-signature")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified 4 runs of tenant 'default': all intact" in result.stdout
    acme = run_cli("runs", "--url", url, "--tenant", "acme", "--json")
    assert len(json.loads(acme.stdout)) == 2


def test_demo_replaces_an_existing_database(tmp_path: Path) -> None:
    (tmp_path / "agentplane-journal-demo.db").write_bytes(b"not a database")
    result = run_cli("demo", cwd=tmp_path)  # default: the current directory
    assert result.returncode == 0, result.stderr
    assert str(tmp_path / "agentplane-journal-demo.db") in result.stdout


def test_demo_takes_a_url_or_a_dir_not_both(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    line = fails_cleanly(run_cli("demo", "--url", url, "--dir", str(tmp_path)))
    assert "not both" in line
    assert not (tmp_path / "x.db").exists()


def test_demo_writes_into_a_new_sqlite_file_named_by_url_or_environment(tmp_path: Path) -> None:
    named = tmp_path / "named.db"
    result = run_cli("demo", "--url", f"sqlite:///{named}", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"runs --url sqlite+aiosqlite:///{named}" in result.stdout
    from_env = tmp_path / "from-env.db"
    result = run_cli("demo", cwd=tmp_path, url_env=f"sqlite:///{from_env}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "AGENTPLANE_JOURNAL_URL names it for every command" in result.stdout
    assert named.exists() and from_env.exists()
    assert not (tmp_path / "agentplane-journal-demo.db").exists()  # the default was not used


async def _row_counts(url: str) -> dict[str, int]:
    from sqlalchemy import func, select
    from sqlalchemy.ext.asyncio import create_async_engine

    from agentplane_journal.db.models import metadata

    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return {
                t.name: (await conn.execute(select(func.count()).select_from(t))).scalar_one()
                for t in metadata.sorted_tables
            }
    finally:
        await engine.dispose()


def _refuses_a_database_with_rows(url: str, **kw: object) -> None:
    asyncio.run(add_runs(url, sealed=1, open_=1))
    before = asyncio.run(_row_counts(url))
    line = fails_cleanly(run_cli("demo", **kw))  # type: ignore[arg-type]
    assert "already holds journal rows" in line and "journal" in line
    assert "fresh database" in line
    assert asyncio.run(_row_counts(url)) == before  # nothing written


def test_demo_refuses_a_sqlite_database_that_holds_journal_rows(
    sqlite_database: Callable[..., str],
) -> None:
    url = sqlite_database()
    _refuses_a_database_with_rows(url, url_env=url)


@pytest.mark.postgres
def test_demo_on_postgresql_then_verify_all(pg_database: Callable[..., str]) -> None:
    url = pg_database()  # a fresh migrated database from the test cluster
    assert url.startswith("postgresql+asyncpg://")
    result = run_cli("demo", "--url", url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout and "done in" in result.stdout
    assert re.search(r"^\s+agentplane\n\s+4\n\s+[A-Za-z0-9+/]{43}=\n", result.stdout, re.M)
    trust = re.search(r"--trust (demo-key=[0-9a-f]{64})", result.stdout)
    assert trust, result.stdout
    for tenant, runs in (("default", 4), ("acme", 2)):
        verified = run_cli(
            "verify", "--all", "--url", url, "--tenant", tenant, "--trust", trust[1],
            "--require-signature", "--json",
        )  # fmt: skip
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert json.loads(verified.stdout)["intact"] == runs
    # Run again on the same database: it now holds the demo's rows, so it is refused.
    before = asyncio.run(_row_counts(url))
    line = fails_cleanly(run_cli("demo", "--url", url))
    assert "already holds journal rows" in line
    assert asyncio.run(_row_counts(url)) == before


@pytest.mark.postgres
def test_demo_refuses_a_postgresql_database_that_holds_journal_rows(
    pg_database: Callable[..., str],
) -> None:
    url = pg_database()
    _refuses_a_database_with_rows(url, url_env=url)


@pytest.mark.postgres
def test_demo_migrates_an_empty_postgresql_database(pg_database: Callable[..., str]) -> None:
    url = pg_database(migrated=False)
    result = run_cli("demo", url_env=url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert run_cli("verify", "--all", url_env=url).returncode == 0


# -- verify --------------------------------------------------------------------------------


def test_verify_an_intact_journal(journal: Journal) -> None:
    result = run_cli("verify", "--all", "--url", journal.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified 4 runs of tenant 'default': all intact" in result.stdout
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    signed = run_cli(
        "verify", "--all", "--url", journal.url, "--trust", TRUST, "--require-signature", "--json"
    )
    assert signed.returncode == 0
    report = json.loads(signed.stdout)
    assert (report["checked"], report["intact"], report["failed"]) == (4, 4, 0)
    one = run_cli("verify", journal.sealed[0], "--url", journal.url)
    assert one.returncode == 0
    assert "seal matches" in one.stdout


def test_verify_names_the_run_and_seq_of_a_tampered_record(journal: Journal) -> None:
    victim = journal.sealed[1]
    with sqlite3.connect(db_path(journal.url)) as db:
        (raw,) = db.execute(
            "SELECT raw FROM journal WHERE run_id = ? AND seq = 2", (victim,)
        ).fetchone()
        db.execute(
            "UPDATE journal SET raw = ? WHERE run_id = ? AND seq = 2",
            (raw.replace(b'"attempt":1', b'"attempt":7'), victim),
        )
    everything = run_cli("verify", "--all", "--url", journal.url)
    assert everything.returncode == 1
    assert f"FAILED {victim} seq 2:" in everything.stdout
    assert "1 FAILED" in everything.stdout
    assert sum("FAILED run_" in line for line in everything.stdout.splitlines()) == 1
    one = run_cli("verify", victim, "--url", journal.url, "--json")
    assert one.returncode == 1
    failed = json.loads(one.stdout)["runs"][0]
    assert (failed["run"], failed["ok"], failed["seq"]) == (victim, False, 2)
    assert "hash mismatch" in failed["error"]
    assert f"{victim} seq 2" in fails_cleanly(run_cli("show", victim, "--url", journal.url), 1)


def test_a_chain_rebuilt_after_sealing_no_longer_matches_its_seal(journal: Journal) -> None:
    # Someone with write access rewrites seq 1 and re-hashes the whole chain: every link
    # verifies, but the head no longer matches what the log sealed.
    victim = journal.sealed[0]
    with sqlite3.connect(db_path(journal.url)) as db:
        rows = db.execute(
            "SELECT seq, raw FROM journal WHERE run_id = ? ORDER BY seq", (victim,)
        ).fetchall()
        prev = bytes(32)
        for seq, raw in rows:
            if seq == 1:
                raw = raw.replace(b"conformance", b"rewritten")
            digest = hashlib.sha256(prev + raw).digest()
            db.execute(
                "UPDATE journal SET raw = ?, prev_hash = ?, hash = ?, key_id = NULL, "
                "signature = NULL WHERE run_id = ? AND seq = ?",
                (raw, prev, digest, victim, seq),
            )
            prev = digest
    result = run_cli("verify", victim, "--url", journal.url)
    assert result.returncode == 1
    assert f"FAILED {victim} seq {len(rows)}:" in result.stdout
    assert "rewritten after sealing" in result.stdout
    everything = run_cli("verify", "--all", "--url", journal.url)  # no signatures needed
    assert everything.returncode == 1
    assert f"FAILED {victim} seq {len(rows)}:" in everything.stdout
    assert "rewritten after sealing" in everything.stdout
    proof = run_cli("prove", victim, "--url", journal.url)
    assert proof.returncode == 1
    assert "FAILED  the run's records verify and end at the sealed head" in proof.stdout
    signed = run_cli(
        "verify", "--all", "--url", journal.url, "--trust", TRUST, "--require-signature"
    )
    assert signed.returncode == 1
    assert f"FAILED {victim} seq 1:" in signed.stdout


def test_a_signature_by_an_untrusted_key_fails(journal: Journal) -> None:
    other = Ed25519Signer("test-key", bytes(32)).public_key.hex()
    result = run_cli(
        "verify", journal.sealed[0], "--url", journal.url, "--trust", f"test-key={other}"
    )
    assert result.returncode == 1
    assert f"FAILED {journal.sealed[0]} seq 1:" in result.stdout


def test_progress_is_drawn_on_a_terminal_only(sqlite_database: Callable[..., str]) -> None:
    url = sqlite_database()
    asyncio.run(add_runs(url, open_=25))
    leader, follower = pty.openpty()
    try:
        result = run_cli("verify", "--all", "--url", url, stderr=follower)
        os.close(follower)
        follower = -1
        drawn = b""
        try:
            while chunk := os.read(leader, 4096):
                drawn += chunk
        except OSError:  # EIO: the terminal's other end is closed
            pass
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    assert result.returncode == 0
    assert b"verifying" in drawn and b"25/25" in drawn


# -- runs, show, tenants -------------------------------------------------------------------


def test_runs_and_show_with_tenant_isolation(journal: Journal) -> None:
    listed = json.loads(run_cli("runs", "--url", journal.url, "--json").stdout)
    assert {row["run"] for row in listed} == set(journal.sealed + journal.open)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["updated_at"]) for r in listed)
    acme = json.loads(run_cli("runs", "--url", journal.url, "--tenant", "acme", "--json").stdout)
    assert [row["run"] for row in acme] == journal.acme
    succeeded = run_cli("runs", "--url", journal.url, "--outcome", "succeeded", "--limit", "2")
    assert succeeded.returncode == 0
    assert len(succeeded.stdout.strip().splitlines()) == 3  # header + 2
    assert journal.sealed[-1] in succeeded.stdout  # newest conclusion first

    shown = run_cli("show", journal.sealed[0], "--url", journal.url)
    assert shown.returncode == 0
    assert re.search(
        r"^\s+2\s+1\s+EffectStarted\s+step=0 ek:0e1b3df3.*test-key", shown.stdout, re.M
    )
    body = json.loads(run_cli("show", journal.sealed[0], "--url", journal.url, "--json").stdout)
    assert [r["kind"] for r in body["records"]] == [
        "RunAdmitted",
        "EffectStarted",
        "Note",
        "RunSealed",
    ]
    assert body["sealed"]["index"] == 0
    # A default-tenant run does not exist for acme.
    line = fails_cleanly(
        run_cli("show", journal.sealed[0], "--url", journal.url, "--tenant", "acme")
    )
    assert "no records" in line and "acme" in line


def test_unknown_and_malformed_runs_exit_2(journal: Journal) -> None:
    unknown = str(RunId.generate())
    for args in (["show", unknown], ["verify", unknown], ["prove", unknown]):
        assert unknown in fails_cleanly(run_cli(*args, "--url", journal.url))
    assert "not a RunId" in fails_cleanly(run_cli("show", "run_42", "--url", journal.url))


# -- checkpoints and proofs ------------------------------------------------------------------


def test_checkpoint_prints_exactly_the_note(journal: Journal) -> None:
    text = run_cli("checkpoint", "--url", journal.url).stdout
    cp = Checkpoint.from_note(text)
    assert cp.to_note() == text
    assert (cp.origin, cp.size) == ("agentplane", 3)
    data = json.loads(run_cli("checkpoint", "--url", journal.url, "--json").stdout)
    assert data["note"] == text
    assert base64.b64decode(data["root"]["base64"]).hex() == data["root"]["hex"]
    acme = Checkpoint.from_note(
        run_cli("checkpoint", "--url", journal.url, "--tenant", "acme").stdout
    )
    assert (acme.origin, acme.size) == ("agentplane/acme", 1)


def test_prove_a_sealed_run_and_refuse_an_open_one(journal: Journal) -> None:
    proved = run_cli("prove", journal.sealed[2], "--url", journal.url, "--json")
    assert proved.returncode == 0, proved.stdout
    data = json.loads(proved.stdout)
    root = Digest.from_hex(data["checkpoint"]["root"]["hex"])
    proof = [Digest.from_hex(h) for h in data["proof"]]
    leaf = leaf_hash(Digest.from_hex(data["seal"]))
    assert verify_inclusion(leaf, data["index"], data["size"], proof, root)
    line = fails_cleanly(run_cli("prove", journal.open[0], "--url", journal.url), 1)
    assert "not sealed" in line


def test_consistency_and_prove_against_a_saved_note(journal: Journal, tmp_path: Path) -> None:
    saved = tmp_path / "checkpoint.txt"
    saved.write_text(run_cli("checkpoint", "--url", journal.url).stdout)
    later = asyncio.run(add_runs(journal.url, sealed=2))  # the log grows from 3 to 5

    grown = run_cli("consistency", f"@{saved}", "--url", journal.url)
    assert grown.returncode == 0, grown.stdout + grown.stderr
    assert "extends the saved checkpoint (3 -> 5)" in grown.stdout
    as_text = run_cli("consistency", saved.read_text().rstrip("\n"), "--url", journal.url, "--json")
    assert as_text.returncode == 0 and json.loads(as_text.stdout)["ok"] is True

    old_run = run_cli("prove", journal.sealed[1], "--checkpoint", f"@{saved}", "--url", journal.url)
    assert old_run.returncode == 0, old_run.stdout
    assert "the log has grown" in old_run.stdout
    new_run = run_cli("prove", later[0], "--checkpoint", f"@{saved}", "--url", journal.url)
    assert new_run.returncode == 1
    assert "sealed after the saved checkpoint" in new_run.stdout


def test_forged_and_foreign_notes_are_refused(journal: Journal, tmp_path: Path) -> None:
    cp = Checkpoint.from_note(run_cli("checkpoint", "--url", journal.url).stdout)
    forged = tmp_path / "forged.txt"
    forged.write_text(Checkpoint(cp.origin, cp.size, Digest.of(b"forged")).to_note())
    refused = run_cli("consistency", f"@{forged}", "--url", journal.url)
    assert refused.returncode == 1 and "FAILED" in refused.stdout
    prove = run_cli("prove", journal.sealed[0], "--checkpoint", f"@{forged}", "--url", journal.url)
    assert prove.returncode == 1 and "FAILED  leaf 0 is in the saved checkpoint" in prove.stdout
    too_big = Checkpoint(cp.origin, 99, cp.root).to_note()
    assert run_cli("consistency", too_big, "--url", journal.url).returncode == 1
    foreign = run_cli("consistency", cp.to_note(), "--url", journal.url, "--tenant", "acme")
    assert "agentplane/acme" in fails_cleanly(foreign, 1)
    garbage = run_cli("consistency", "garbage", "--url", journal.url)
    assert "not a checkpoint note" in fails_cleanly(garbage)


V040_EMPTY_ROOT_B64 = base64.b64encode(bytes(32)).decode()


def test_consistency_recognises_agentplane_0_4_0s_empty_log_note(journal: Journal) -> None:
    note = f"agentplane\n0\n{V040_EMPTY_ROOT_B64}\n"
    result = run_cli("consistency", note, "--url", journal.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "agentplane 0.4.0's empty-log note" in result.stdout
    assert "an empty log is a prefix of every log" in result.stdout
    assert "rewritten" not in result.stdout and "FAILED" not in result.stdout
    as_json = json.loads(run_cli("consistency", note, "--url", journal.url, "--json").stdout)
    assert as_json["ok"] is True and as_json["saved_is_agentplane_0_4_0_empty_log"] is True
    # The RFC spelling of the empty log is a prefix too, and says nothing about 0.4.0.
    rfc = Checkpoint("agentplane", 0, Digest.of(b"")).to_note()
    plain = run_cli("consistency", rfc, "--url", journal.url)
    assert plain.returncode == 0 and "0.4.0" not in plain.stdout
    # Any other root on a size-0 note is a lie about the empty log: the strict parser
    # refuses it at the door, as FAILED (exit 1), for consistency and prove alike.
    lie = Checkpoint("agentplane", 0, Digest.of(b"x")).to_note()
    for command in (["consistency", lie], ["prove", journal.sealed[0], "--checkpoint", lie]):
        refused = fails_cleanly(run_cli(*command, "--url", journal.url), 1)
        assert refused.startswith("agentplane-journal: FAILED: checkpoint note: size 0 names")
    # Another tenant's log is still another log.
    foreign = run_cli("consistency", note, "--url", journal.url, "--tenant", "acme")
    assert "agentplane/acme" in fails_cleanly(foreign, 1)


LOG_SEED = bytes(range(7, 39))


def test_checkpoint_signs_with_a_key_file_and_never_prints_the_seed(
    journal: Journal, tmp_path: Path
) -> None:
    raw = tmp_path / "log.key"
    raw.write_bytes(LOG_SEED)
    raw.chmod(0o600)
    hexed = tmp_path / "log.hex"
    hexed.write_text(LOG_SEED.hex() + "\n")
    hexed.chmod(0o600)
    signer = NoteSigner("agentplane", LOG_SEED)  # default key name: the log's origin
    plain = Checkpoint.from_note(run_cli("checkpoint", "--url", journal.url).stdout)
    for key_file in (raw, hexed):
        result = run_cli("checkpoint", "--url", journal.url, "--sign-key-file", str(key_file))
        assert result.returncode == 0, result.stderr
        assert result.stdout == plain.to_signed_note(signer)
        assert result.stderr == ""
        assert LOG_SEED.hex() not in result.stdout + result.stderr
    as_json = json.loads(
        run_cli(
            "checkpoint", "--url", journal.url, "--sign-key-file", str(raw), "--json",
            "--key-name", "example.com/plane-a",
        ).stdout
    )  # fmt: skip
    named = NoteSigner("example.com/plane-a", LOG_SEED)
    assert as_json["verifier_key"] == named.verifier_key
    assert Checkpoint.from_signed_note(as_json["note"], [named.verifier_key]) == plain
    assert as_json["size"] == plain.size


def test_checkpoint_refuses_bad_key_files_without_echoing_them(
    journal: Journal, tmp_path: Path
) -> None:
    short = tmp_path / "short.key"
    short.write_text("deadbeef" * 7)
    line = fails_cleanly(run_cli("checkpoint", "--url", journal.url, "--sign-key-file", str(short)))
    assert "holds 56 bytes" in line and "deadbeef" not in line
    missing = run_cli("checkpoint", "--url", journal.url, "--sign-key-file", str(tmp_path / "no"))
    assert "cannot read the signing key file" in fails_cleanly(missing)
    name_only = run_cli("checkpoint", "--url", journal.url, "--key-name", "k")
    assert "give both" in fails_cleanly(name_only)
    key = tmp_path / "ok.key"
    key.write_bytes(LOG_SEED)
    key.chmod(0o600)
    spaced = run_cli(
        "checkpoint", "--url", journal.url, "--sign-key-file", str(key), "--key-name", "a b"
    )
    assert "--key-name" in fails_cleanly(spaced)
    key.chmod(0o644)
    loose = run_cli("checkpoint", "--url", journal.url, "--sign-key-file", str(key))
    assert loose.returncode == 0 and "chmod 600" in loose.stderr


def test_consistency_and_prove_check_a_signed_note(journal: Journal, tmp_path: Path) -> None:
    signer = NoteSigner("agentplane", LOG_SEED)
    witness = NoteSigner("witness.example/w", bytes(32))
    cp = Checkpoint.from_note(run_cli("checkpoint", "--url", journal.url).stdout)
    saved = tmp_path / "signed.note"
    saved.write_text(cp.to_signed_note(signer, witness))  # a witness cosigned it too
    asyncio.run(add_runs(journal.url, sealed=1))
    vkey = signer.verifier_key

    grown = run_cli("consistency", f"@{saved}", "--url", journal.url, "--note-key", vkey)
    assert grown.returncode == 0, grown.stdout + grown.stderr
    assert f"signed by trusted key {vkey}" in grown.stdout
    assert "extends the saved checkpoint (3 -> 4)" in grown.stdout
    by_witness = run_cli(
        "consistency", f"@{saved}", "--url", journal.url, "--json",
        "--note-key", witness.verifier_key, "--note-key", vkey,
    )  # fmt: skip
    report = json.loads(by_witness.stdout)
    assert report["ok"] is True and set(report["saved_signed_by"]) == {
        vkey,
        witness.verifier_key,
    }
    proved = run_cli(
        "prove", journal.sealed[0], "--checkpoint", f"@{saved}", "--url", journal.url,
        "--note-key", vkey, "--json",
    )  # fmt: skip
    assert proved.returncode == 0, proved.stdout + proved.stderr
    checks = json.loads(proved.stdout)["checks"]
    assert checks[0] == {"ok": True, "check": f"the saved note is signed by trusted key {vkey}"}


def test_signed_notes_without_a_trusted_key_or_with_a_bad_signature_are_refused(
    journal: Journal, tmp_path: Path
) -> None:
    signer = NoteSigner("agentplane", LOG_SEED)
    cp = Checkpoint.from_note(run_cli("checkpoint", "--url", journal.url).stdout)
    note = cp.to_signed_note(signer)
    vkey = signer.verifier_key
    # A signed note with no --note-key: refused, not silently read as unsigned.
    for args in (["consistency", note], ["prove", journal.sealed[0], "--checkpoint", note]):
        line = fails_cleanly(run_cli(*args, "--url", journal.url))
        assert "the note is signed, but no --note-key" in line
    # Only an unknown key signed it.
    stranger = NoteSigner("agentplane", bytes(32)).verifier_key
    unknown = run_cli("consistency", note, "--url", journal.url, "--note-key", stranger)
    assert "no trusted key signed this note" in fails_cleanly(unknown, 1)
    # The body was altered after signing (a forged root).
    forged = (
        Checkpoint(cp.origin, cp.size, Digest.of(b"forged")).to_note() + note[len(cp.to_note()) :]
    )
    bad = run_cli("consistency", forged, "--url", journal.url, "--note-key", vkey)
    assert "does not verify" in fails_cleanly(bad, 1)
    bad_prove = run_cli(
        "prove", journal.sealed[0], "--checkpoint", forged, "--url", journal.url, "--note-key", vkey
    )
    assert "does not verify" in fails_cleanly(bad_prove, 1)
    # An unsigned note when a signature was asked for.
    unsigned = run_cli("consistency", cp.to_note(), "--url", journal.url, "--note-key", vkey)
    assert "not signed" in fails_cleanly(unsigned, 1)
    # A verifier key that does not parse is a usage error.
    typo = run_cli("consistency", note, "--url", journal.url, "--note-key", vkey[:-2] + "AA")
    assert typo.returncode == 2 and "--note-key" in typo.stderr
    alone = run_cli("prove", journal.sealed[0], "--url", journal.url, "--note-key", vkey)
    assert "give both" in fails_cleanly(alone)


# -- export ----------------------------------------------------------------------------------


def reverify_export(lines: list[str]) -> tuple[Checkpoint, dict[str, Digest], set[str]]:
    """Check an export with the core library only; return its checkpoint, heads, proved runs."""
    rows = [json.loads(line) for line in lines]
    header = rows[0]
    assert header["type"] == "header" and header["format"] == "agentplane-journal-export/1"
    cp = Checkpoint.from_note(header["checkpoint"])
    assert (cp.size, cp.root.hex(), cp.origin) == (header["size"], header["root"], header["origin"])
    verifier = Ed25519Verifier().trust("test-key", SIGNER.public_key)
    records: dict[str, list[Record]] = {}
    heads: dict[str, Digest] = {}
    proved: set[str] = set()
    for row in rows[1:]:
        if row["type"] == "record":
            att = None
            if row["key_id"] is not None:
                att = Attestation(row["key_id"], base64.b64decode(row["signature"]))
            record = Record.from_stored(
                base64.b64decode(row["raw"]),
                Digest.from_hex(row["prev_hash"]),
                Digest.from_hex(row["hash"]),
                att,
                seq=row["seq"],
            )
            assert record.run == RunId.parse(row["run"]) and record.seq == row["seq"]
            records.setdefault(row["run"], []).append(record)
        else:
            assert row["type"] == "inclusion" and row["size"] == cp.size
            chain = records[row["run"]]
            assert chain[-1].hash.hex() == row["seal"]
            proof = [Digest.from_hex(h) for h in row["proof"]]
            leaf = leaf_hash(Digest.from_hex(row["seal"]))
            assert verify_inclusion(leaf, row["index"], row["size"], proof, cp.root)
            proved.add(row["run"])
    for run, chain in records.items():
        assert chain[0].seq == 1
        heads[run] = verify_chain(chain)
        assert verify_attested(chain, verifier, require_signature=True) == heads[run]
    return cp, heads, proved


def test_export_is_verified_by_the_core_library_alone(journal: Journal) -> None:
    result = run_cli("export", "--format", "journal", "--all", "--url", journal.url)
    assert result.returncode == 0, result.stderr
    cp, heads, proved = reverify_export(result.stdout.splitlines())
    assert cp.size == 3 and set(heads) == set(journal.sealed + journal.open)
    assert proved == set(journal.sealed)
    acme = run_cli(
        "export", "--format", "journal", "--all", "--url", journal.url, "--tenant", "acme"
    )
    cp, heads, proved = reverify_export(acme.stdout.splitlines())
    assert cp.origin == "agentplane/acme" and proved == set(journal.acme) == set(heads)
    single = run_cli("export", "--format", "journal", journal.open[0], "--url", journal.url)
    cp, heads, proved = reverify_export(single.stdout.splitlines())
    assert set(heads) == {journal.open[0]} and not proved


# -- databases the command cannot use ---------------------------------------------------------


def test_bad_urls_exit_2_with_one_line_and_no_password(tmp_path: Path) -> None:
    assert "not a database URL" in fails_cleanly(run_cli("runs", "--url", "nonsense"))
    refused = fails_cleanly(
        run_cli("runs", "--url", "postgresql+asyncpg://nobody:s3cr3t-pw@127.0.0.1:1/x")
    )
    assert "cannot connect" in refused and "s3cr3t-pw" not in refused
    assert "unsupported" in fails_cleanly(run_cli("checkpoint", "--url", "mysql://a:b@host/db"))
    missing = fails_cleanly(
        run_cli("verify", "--all", "--url", "sqlite:///nowhere.db", cwd=tmp_path)
    )
    assert "no database file" in missing
    assert not (tmp_path / "nowhere.db").exists()


def test_an_unmigrated_database_is_refused_until_upgrade(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "empty.db").close()
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    line = fails_cleanly(run_cli("runs", "--url", url))
    assert "agentplane-journal upgrade" in line
    upgraded = run_cli("upgrade", "--url", url)
    assert upgraded.returncode == 0, upgraded.stderr
    assert HEAD_REVISION in upgraded.stdout
    assert "already at" in run_cli("upgrade", "--url", url).stdout
    empty = run_cli("runs", url_env=url)  # the URL from the environment
    assert empty.returncode == 0 and "no runs" in empty.stdout
    # Without either, the database is agentplane_journal.db in the current directory.
    assert run_cli("upgrade", cwd=tmp_path).returncode == 0
    assert (tmp_path / "agentplane_journal.db").exists()


# -- PostgreSQL ----------------------------------------------------------------------------


@pytest.mark.postgres
def test_the_command_on_postgresql(pg_database: Callable[..., str]) -> None:
    url = pg_database(migrated=False)
    assert "never been migrated" in fails_cleanly(run_cli("verify", "--all", "--url", url))
    upgraded = run_cli("upgrade", "--url", url)
    assert upgraded.returncode == 0, upgraded.stderr
    assert HEAD_REVISION in upgraded.stdout
    journal = build(url)
    for tenant, count in (("default", 4), ("acme", 1)):
        result = run_cli(
            "verify", "--all", "--url", url, "--tenant", tenant, "--trust", TRUST, "--json"
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)["intact"] == count
    saved = run_cli("checkpoint", "--url", url).stdout
    asyncio.run(add_runs(url, sealed=1))
    assert run_cli("consistency", saved, "--url", url).returncode == 0
    assert run_cli("prove", journal.sealed[0], "--checkpoint", saved, "--url", url).returncode == 0
