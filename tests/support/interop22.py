"""agentplane 0.22.0's own verifier (``../shared/interop/agentplane-0.22-verifier``), built
for the tests that ask agentplane's code for its verdict on our bytes.

The verifier is agentplane's source (canon, records, Merkle, notes, export ``verify`` and
``restore``) with a small command line; it is not part of this repository and is never
copied into it. :func:`interop22` builds its ``float_roundtrip`` variant (the one whose
verdicts count: correctly rounded number parsing) offline from Debian's ``librust-*-dev``
crates into ``.ci-cache/interop22`` (cargo rebuilds only what changed, so a warm cache costs a
second) and returns the binary.

* no ``../shared`` beside the repository (a fresh clone): the calling test skips;
* ``../shared`` present but no cargo or crates: skip locally, **fail** under ``CI`` (``.ci/run``
  installs them);
* present and the build fails: fail, always (a verdict we cannot get is not a pass).

``$AGENTPLANE_JOURNAL_INTEROP22`` may name a prebuilt ``interop22-frt`` instead; with
``../shared`` elsewhere, ``$AGENTPLANE_JOURNAL_REFERENCE`` (its ``reference`` folder) finds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.migration_tools import REPO

SOURCE = REPO.parent / "shared" / "interop" / "agentplane-0.22-verifier"
if not SOURCE.is_dir() and os.environ.get("AGENTPLANE_JOURNAL_REFERENCE"):
    # the checkout is elsewhere: shared/ found through its reference folder (support/reference.py)
    SOURCE = Path(os.environ["AGENTPLANE_JOURNAL_REFERENCE"]).parent / SOURCE.relative_to(
        REPO.parent / "shared"
    )
TARGET = REPO / ".ci-cache" / "interop22" / "frt"
CRATE = Path("/usr/share/cargo/registry")

CARGO_BUILD = ["build", "--offline", "--release", "--features", "frt", "-q"]
_built: Path | None = None


def _cargo() -> str | None:
    found = shutil.which("cargo")
    if found:
        return found
    rustup = Path.home() / ".cargo" / "bin" / "cargo"
    return str(rustup) if rustup.is_file() else None


def interop22() -> Path:
    """The ``interop22-frt`` binary (built on first use in the session), or skip/fail."""
    global _built
    prebuilt = os.environ.get("AGENTPLANE_JOURNAL_INTEROP22")
    if prebuilt:
        return Path(prebuilt)
    if _built is not None:
        return _built
    if not (SOURCE / "Cargo.toml").is_file():
        pytest.skip(f"{SOURCE} is absent (a fresh clone): agentplane's verifier is not here")
    cargo = _cargo()
    if cargo is None or not (CRATE / "serde_json-1.0.87").exists():
        message = (
            "agentplane's verifier needs cargo and Debian's crates "
            "(apt-get install cargo librust-serde-json-dev ... as .ci/run does)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must install them (.ci/run)")
        pytest.skip(message)
    TARGET.mkdir(parents=True, exist_ok=True)
    with (TARGET / "build.lock").open("w") as lock:  # pytest-xdist workers build once
        fcntl.flock(lock, fcntl.LOCK_EX)
        # cwd is the verifier's folder: its .cargo/config.toml points cargo at Debian's crates.
        done = subprocess.run(
            [cargo, *CARGO_BUILD, "--target-dir", str(TARGET)],
            cwd=SOURCE,
            capture_output=True,
            text=True,
            check=False,
        )
    binary = TARGET / "release" / "interop22"
    if done.returncode != 0 or not binary.is_file():
        pytest.fail(f"building agentplane's verifier failed:\n{done.stderr[-4000:]}")
    _built = binary
    return binary


def run(*args: str, stdin: str | None = None) -> str:
    """``interop22-frt ARGS`` -> its standard output (a failure fails the test)."""
    done = subprocess.run(
        [str(interop22()), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def check_export(path: Path, *keys: str, checkpoint: Path | None = None) -> dict[str, Any]:
    """agentplane's ``verify`` and per-record checks on an export (``keys``: ``ID=HEX``)."""
    args = ["check-export", str(path)]
    for k in keys:
        args += ["--key", k]
    if checkpoint is not None:
        args += ["--checkpoint", str(checkpoint)]
    return json.loads(run(*args))  # type: ignore[no-any-return]


def restore(path: Path) -> dict[str, Any]:
    """agentplane's ``restore`` of an export into memory: faithful, and which bytes differ."""
    return json.loads(run("restore", str(path)))  # type: ignore[no-any-return]


def disagreements(report: dict[str, Any], *, ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """``{section: detail}`` for every section of a check-export report that disagrees."""
    return {
        name: section["detail"]
        for name, section in report.items()
        if isinstance(section, dict)
        and "disagreements" in section
        and section["disagreements"]
        and name not in ignore
    }


def tally(report: dict[str, Any]) -> tuple[int, int]:
    """(checks, disagreements) over every section of a report."""
    sections = [s for s in report.values() if isinstance(s, dict) and "checks" in s]
    return sum(s["checks"] for s in sections), sum(s["disagreements"] for s in sections)
