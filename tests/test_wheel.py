"""The wheel carries the migrations: installed in a fresh venv, it upgrades an empty database.

The wheel is built from this project, installed into a new virtual environment with its
dependencies, and run from a directory outside the source tree with ``python -I`` (no
``PYTHONPATH``, no current directory on the path), so the package and its migrations can
only come from the installed wheel. Part of the normal run: it takes a few seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import agentplane_journal
from agentplane_journal.db.models import VERSION_TABLE, metadata
from agentplane_journal.db.revision import HEAD_REVISION

from support.migration_tools import REPO

pytestmark = pytest.mark.slow

SNIPPET = """
import asyncio, json, sys

import agentplane_journal
from agentplane_journal import SqlJournalStore
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.migrations import commands as migrate

url = sys.argv[1]


async def main():
    before = await migrate.current_revision(url)
    await migrate.upgrade(url)
    after = await migrate.current_revision(url)
    store = await SqlJournalStore.connect(url)
    try:
        size = (await store.checkpoint()).size
    finally:
        await store.close()
    return before, after, size


before, after, size = asyncio.run(main())
print(json.dumps({
    "file": agentplane_journal.__file__,
    "migrations": str(migrate.script_location()),
    "head": HEAD_REVISION,
    "before": before,
    "after": after,
    "checkpoint_size": size,
    "path": sys.path,
}))
"""


def _run(argv: list[str], *, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYTHONHOME", "AGENTPLANE_JOURNAL_URL", "VIRTUAL_ENV"}
    }
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (
        f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    )
    return result


def _pip_version() -> tuple[int, ...]:
    from pip import __version__

    return tuple(int(p) for p in __version__.split(".")[:2] if p.isdigit())


def build_wheel(outdir: Path) -> Path:
    """Build the project's wheel without network access (the build backend is installed)."""
    if importlib.util.find_spec("build") is not None:
        argv = [sys.executable, "-m", "build", "--wheel", "--no-isolation"]
        argv += ["--outdir", str(outdir), str(REPO)]
    else:
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(outdir)]
        if importlib.util.find_spec("hatchling") is not None:
            argv.append("--no-build-isolation")
        argv.append(str(REPO))
    _run(argv, cwd=outdir)
    (wheel,) = outdir.glob("agentplane_journal-*.whl")
    return wheel


def test_the_wheel_ships_the_migrations(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        "agentplane_journal/_alembic/env.py",
        "agentplane_journal/_alembic/script.py.mako",
        *(
            f"agentplane_journal/_alembic/versions/{p.name}"
            for p in (REPO / "alembic" / "versions").glob("*.py")
        ),
    }
    assert shipped <= names
    assert "agentplane_journal/migrations/commands.py" in names
    assert "agentplane_journal/py.typed" in names
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]

    info = f"agentplane_journal-{agentplane_journal.__version__}.dist-info"
    assert f"{info}/licenses/LICENSE" in names
    license = zipfile.ZipFile(wheel).read(f"{info}/licenses/LICENSE")
    assert license == (REPO / "LICENSE").read_bytes()
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert f"\nVersion: {agentplane_journal.__version__}\n" in metadata
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    assert "\nLicense-File: LICENSE\n" in metadata


def test_the_sdist_ships_the_license_and_the_changelog(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "build", "--sdist", "--no-isolation"]
    if importlib.util.find_spec("build") is None:
        pytest.skip("the sdist is built with `build`, which is not installed")
    _run([*argv, "--outdir", str(tmp_path), str(REPO)], cwd=tmp_path)
    (sdist,) = tmp_path.glob("agentplane_journal-*.tar.gz")
    root = f"agentplane_journal-{agentplane_journal.__version__}"
    assert sdist.name == f"{root}.tar.gz"
    with tarfile.open(sdist) as tar:
        names = set(tar.getnames())
        license = tar.extractfile(f"{root}/LICENSE")
        assert license is not None and license.read() == (REPO / "LICENSE").read_bytes()
        pkg_info = tar.extractfile(f"{root}/PKG-INFO")
        assert pkg_info is not None
        assert f"\nVersion: {agentplane_journal.__version__}\n" in pkg_info.read().decode()
    assert {f"{root}/CHANGELOG.md", f"{root}/CONTRIBUTING.md", f"{root}/README.md"} <= names


def test_a_wheel_installed_in_a_fresh_venv_upgrades_an_empty_database(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    wheel = build_wheel(dist)

    # A plain venv (not --system-site-packages): the wheel and its dependencies are all it
    # has. This interpreter's pip installs into it (`pip --python`, pip >= 22.3), which
    # saves bootstrapping a pip into the venv; without bytecode compilation, for speed.
    venv = tmp_path / "venv"
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    install = ["install", "--quiet", "--no-compile", "--disable-pip-version-check", str(wheel)]
    if _pip_version() >= (22, 3):
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
        _run([sys.executable, "-m", "pip", "--python", str(python), *install], cwd=tmp_path)
    else:
        _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
        _run([str(python), "-m", "pip", *install], cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    db = elsewhere / "x.db"
    url = f"sqlite+aiosqlite:///{db}"
    result = _run([str(python), "-I", "-c", SNIPPET, url], cwd=elsewhere)
    report = json.loads(result.stdout.strip().splitlines()[-1])

    site = venv.resolve()
    assert Path(report["file"]).resolve().is_relative_to(site), report["file"]
    assert Path(report["migrations"]).resolve().is_relative_to(site), report["migrations"]
    assert Path(report["migrations"]).name == "_alembic"
    assert not any(Path(p).resolve() == REPO for p in report["path"] if p), report["path"]
    assert report["head"] == HEAD_REVISION
    assert report["before"] is None
    assert report["after"] == HEAD_REVISION
    assert report["checkpoint_size"] == 0

    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall()
    assert tables == set(metadata.tables) | {VERSION_TABLE}
    assert version == [(HEAD_REVISION,)]
