"""The backup commands from the command line (SQLite, ``main`` in-process): ``export`` (format 1),
``verify-export`` against a signed checkpoint note with signatures checked, ``restore`` into an
empty database and its refusal of a non-empty one, and ``drill``'s exit codes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.core.signing import Ed25519Signer
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.note import NoteSigner

from support.cli import CliResult
from support.helpers import admitted, note

pytestmark = pytest.mark.slow

SIGNER = Ed25519Signer("rec-key", bytes(range(32)))
TRUST = f"rec-key={SIGNER.public_key.hex()}"
LOG = NoteSigner("agentplane", bytes(range(1, 33)))


async def _build(url: str, runs: int) -> None:
    store = await SqlJournalStore.connect(url, signer=SIGNER)
    try:
        for i in range(runs):
            run = RunId.generate()
            await store.append(1, [admitted(run), note(run, f"n{i}")])
            if i % 2 == 0:
                await store.seal(run, 1, "succeeded")
    finally:
        await store.close()


def test_export_verify_restore_and_drill(
    sqlite_database: Callable[..., str], tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    url = sqlite_database()
    asyncio.run(_build(url, 8))
    export = tmp_path / "e.jsonl"
    done = cli("export", "--all", "--tenant", "default", "--url", url, "--output", str(export))
    assert done.returncode == 0, done.stderr
    header = json.loads(export.read_text().splitlines()[0])
    cp = Checkpoint.from_note(cli("checkpoint", "--url", url).stdout)
    assert header["checkpoint"]["size"] == cp.size == 4

    signed = tmp_path / "cp.note"
    signed.write_text(cp.to_signed_note(LOG))
    vkey = LOG.verifier_key
    ok = cli(
        "verify-export", str(export), "--checkpoint", f"@{signed}", "--note-key", vkey,
        "--trust", TRUST, "--json",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = json.loads(ok.stdout)
    assert report["sound"] and report["runs_sound"] == 8 and not report["findings"]
    assert not any(n.startswith(("signatures", "deletion")) for n in report["not_checked"])
    # A signed note with no key to check it is refused, not read as unsigned.
    assert cli("verify-export", str(export), "--checkpoint", f"@{signed}").returncode == 2
    # Without a checkpoint: sound, and deletion listed as not checked.
    alone = cli("verify-export", str(export))
    assert alone.returncode == 0 and "not checked: deletion" in alone.stdout
    # Another key than the signer's: a finding, exit 1.
    other = Ed25519Signer("rec-key", bytes(32)).public_key.hex()
    bad = cli("verify-export", str(export), "--trust", f"rec-key={other}")
    assert bad.returncode == 1 and "did not make" in bad.stdout

    target = sqlite_database()
    restored = cli("restore", str(export), "--url", target, "--json")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    result = json.loads(restored.stdout)
    assert result["faithful"] and result["rebuilt"]["root"] == cp.root.hex()
    assert any("signature" in n for n in result["not_carried"])
    again = cli("restore", str(export), "--url", target)
    assert again.returncode == 2 and "nothing written" in again.stderr
    assert "Traceback" not in again.stderr

    drill = cli("drill", "--url", url, "--json")
    assert drill.returncode == 0, drill.stdout + drill.stderr
    assert json.loads(drill.stdout)["tenants"][0]["restore"]["faithful"]
    # The drill into a scratch file it did not make (a journal): it says so and runs nothing.
    busy = cli("drill", "--url", url, "--scratch-url", target)
    assert busy.returncode == 2 and "not made by a drill" in busy.stderr
    # Today's format stays behind --format journal.
    legacy = cli("export", "--all", "--format", "journal", "--url", url)
    assert json.loads(legacy.stdout.splitlines()[0])["format"] == "agentplane-journal-export/1"
