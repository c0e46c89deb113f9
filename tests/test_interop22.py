"""agentplane 0.22.0's own code on our bytes, and ours on agentplane's (issue 36).

``tests/interop22.py`` builds agentplane's verifier from ``../shared`` (skipped in a fresh
clone, failed under CI when it cannot be built). Each test names the agreement it shows:
attestations as agentplane serialises them, numbers as agentplane formats them (exact ties
included), restores of agentplane-written exports byte for byte, and the steps layer's
records as agentplane's typed decode reads them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentplane_journal import SqlJournalStore
from agentplane_journal.core.checkpoint import Checkpoint
from agentplane_journal.core.export_verify import ExportVerifier, VerifyReport
from agentplane_journal.core.signing import Ed25519Verifier

import interop22
from interop22_journals import export, key_arg, plain_journal, signer


def verify_ours(path: Path, *keys: str, expected: Checkpoint | None = None) -> VerifyReport:
    """Our ``verify-export`` on a file, trusting ``ID=HEX`` keys."""
    verifier = None
    if keys:
        verifier = Ed25519Verifier()
        for entry in keys:
            key_id, _, public = entry.partition("=")
            verifier.trust(key_id, bytes.fromhex(public))
    check = ExportVerifier(verifier)
    with path.open("rb") as f:
        for line in f:
            if not check.feed(line.rstrip(b"\n")):
                break
    return check.finish(expected)


def agentplane_export(tmp_path: Path) -> tuple[Path, str]:
    """``interop22 write-export``: a signed file written by agentplane's own writer, and its
    key as ``ID=HEX``."""
    out = tmp_path / "ap"
    out.mkdir()
    interop22.run("write-export", str(out))
    return out / "agentplane-native.jsonl", (out / "agentplane-native.key").read_text().strip()


# -- 1. attestations ------------------------------------------------------------------------


async def test_agentplane_verifies_our_signed_export_with_the_key(
    make_store: Any, tmp_path: Path
) -> None:
    store: SqlJournalStore = await make_store(profile="agentplane-0.22", signer=signer())
    await plain_journal(store)
    path = await export(store, tmp_path / "signed.jsonl")
    report = interop22.check_export(path, key_arg())
    assert report["attestations"]["checks"] > 0
    assert report["attestations"]["disagreements"] == 0, report["attestations"]
    assert report["is_sound"], report["verify_report"]
    line = next(x for x in path.read_text().splitlines() if '"attestation":{' in x)
    signature = json.loads(line)["attestation"]["signature"]
    assert isinstance(signature, str) and bytes.fromhex(signature).hex() == signature
    assert verify_ours(path, key_arg()).is_sound


def test_we_verify_agentplanes_own_signed_export_with_its_key(tmp_path: Path) -> None:
    path, key = agentplane_export(tmp_path)
    report = verify_ours(path, key)
    assert report.is_sound, report.findings
    assert report.records > 0 and not any("signature" in n for n in report.not_checked)
    # and a key that did not sign it is a finding, not a pass
    other = "spiffe://interop/agentplane-0.22=" + bytes(32).hex()
    assert not verify_ours(path, other).is_sound


async def test_files_we_wrote_before_with_signatures_as_byte_arrays_still_verify(
    make_store: Any, tmp_path: Path
) -> None:
    store: SqlJournalStore = await make_store(profile="agentplane-0.22", signer=signer())
    await plain_journal(store, runs=2)
    path = await export(store, tmp_path / "signed.jsonl")
    lines = []
    for line in path.read_text().splitlines():
        value = json.loads(line)
        att = value.get("attestation")
        if att:  # the array spelling this package wrote before issue 36
            old = json.dumps(list(bytes.fromhex(att["signature"])), separators=(",", ":"))
            line = line.replace(f'"{att["signature"]}"', old)
        lines.append(line)
    old_file = tmp_path / "old.jsonl"
    old_file.write_text("".join(x + "\n" for x in lines))
    assert '"signature":[' in old_file.read_text()
    assert verify_ours(old_file, key_arg()).is_sound
    # not what agentplane reads (it counts those records unsigned): why the writer changed
    assert not interop22.check_export(old_file, key_arg())["is_sound"]
