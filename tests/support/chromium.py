"""Headless Chromium (its flags, a page's DOM), for the audit page's browser tests; skipped without
``chromium``, a failure under ``CI``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _need(tool: str | None, what: str) -> str:
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the serve tests: {what} is not installed")
        pytest.skip(f"{what} is not installed")
    return tool


def chromium_dom(url: str, profile: Path) -> str:
    binary = _need(shutil.which("chromium"), "chromium (apt-get install chromium)")
    done = subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
