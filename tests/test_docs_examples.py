"""Every code block of README.md and docs/ runs, or says why it does not.

The markers are tests/support/docblocks.py's (and docs/tests.md's): a ``runnable`` block runs twice
in a row in one fresh directory (on SQLite files, or on a fresh PostgreSQL database with its
URLs replaced), a ``fragment`` names its reason, a ``tested-by`` block is run by the test file
it names. A block with no marker fails here, so none goes unaccounted for. The runnable
python blocks are whole programs, and they pass ``mypy --strict`` as a reader's CI would.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support.docblocks import (
    PAGES,
    ROOT,
    Block,
    all_blocks,
    commands,
    for_dialect,
    named_test_finds,
    stray_markers,
)

BLOCKS = all_blocks()
RUNNABLE = [block for block in BLOCKS if block.marker == "runnable"]
CASES = [(block, dialect) for block in RUNNABLE for dialect in block.dialects]
#: Variables a developer's shell may hold that would point an example elsewhere.
CLEARED = ("AGENTPLANE_JOURNAL_URL", "AGENTPLANE_JOURNAL_READ_URL", "AGENTPLANE_JOURNAL_SCHEMA")


def test_every_block_is_runnable_or_a_fragment_with_its_reason() -> None:
    unmarked = [block.name for block in BLOCKS if block.marker is None]
    assert not unmarked, (
        "blocks the tests neither run nor know to be fragments: mark each "
        "`<!-- runnable -->` (and make it run twice) or `<!-- fragment: REASON -->` "
        f"(see docs/tests.md): {unmarked}"
    )
    for block in BLOCKS:
        if block.marker == "fragment":
            assert len(block.argument) >= 8, f"{block.name}: a fragment must say why"
        if block.marker == "tested-by":
            assert named_test_finds(block), f"{block.name}: {block.argument} does not find it"
        if block.marker == "runnable":
            assert block.lang in ("python", "sh", "console"), f"{block.name}: {block.lang}?"
            assert block.dialects  # an unknown option fails here
    for page in PAGES:
        assert not stray_markers(page), f"{page}: a marker with no fence after it"


def test_the_runnable_blocks_are_found() -> None:
    pages = {block.page.relative_to(ROOT).as_posix() for block in RUNNABLE}
    assert {
        "README.md",
        "docs/tutorial.md",
        "docs/durable-steps.md",
        "docs/guides/sessions.md",
        "docs/spec/wire-format.md",
    } <= pages
    assert {"python", "sh", "console"} <= {block.lang for block in RUNNABLE}
    assert any("postgresql" in block.dialects for block in RUNNABLE)


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of commands for the shell blocks: this tree's CLI, Alembic and python."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for name, argv in {
        "agentplane-journal": f'"{sys.executable}" -m agentplane_journal',
        "alembic": f'"{sys.executable}" -m alembic',
        "python": f'"{sys.executable}"',
    }.items():
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\nexec {argv} "$@"\n', encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _env(tools: Path, url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), path]))
    env["PATH"] = os.pathsep.join([str(tools), env.get("PATH", "")])
    if url is not None:
        env["AGENTPLANE_JOURNAL_URL"] = url
    return env


def run_block(block: Block, cwd: Path, env: dict[str, str], url: str | None) -> str:
    """Run ``block`` once in ``cwd``; its standard output (a failure names the block)."""
    if block.lang == "python":
        argv = [sys.executable, "-c", for_dialect(block.code, url)]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", for_dialect(commands(block), url)]
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{block.name}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("block", "dialect"), CASES, ids=[f"{block.name}-{dialect}" for block, dialect in CASES]
)
def test_the_runnable_block_runs_twice_in_one_fresh_directory(
    block: Block, dialect: str, tools: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = None
    if dialect == "postgresql":
        url = request.getfixturevalue("pg_database")(migrated=False)
    env = _env(tools, url)
    if "demo" in block.options:  # a journal to work on, filled once before the two runs
        env["AGENTPLANE_JOURNAL_URL"] = url or f"sqlite+aiosqlite:///{tmp_path}/journal.db"
        subprocess.run(
            [sys.executable, "-m", "agentplane_journal", "demo"],
            cwd=tmp_path,
            env=env,
            check=True,
            capture_output=True,
            timeout=300,
        )
    first = run_block(block, tmp_path, env, url)
    second = run_block(block, tmp_path, env, url)  # where the first run left its files
    if block.page.name in ("README.md", "tutorial.md") and block.lang == "python":
        # the checkpoint note of the log, which each run adds one sealed run to
        assert first.startswith("agentplane\n1\n") and second.startswith("agentplane\n2\n")


@pytest.mark.slow
def test_the_runnable_python_blocks_pass_mypy_strict(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each runnable python block as a module of its own, under ``mypy --strict``.

    mypy's cache is kept in pytest's cache directory: checking the frameworks the examples
    import (LangGraph, Pydantic AI, the Agents SDK) is most of the cost, and they do not
    change between runs."""
    store = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    cache = store.mkdir("mypy-doc-examples") if store is not None else None
    names: dict[str, str] = {}
    for n, block in enumerate(b for b in RUNNABLE if b.lang == "python"):
        name = f"example_{n}.py"
        (tmp_path / name).write_text(block.code, encoding="utf-8")
        names[name] = block.name
    (tmp_path / "agentplane_journal").symlink_to(ROOT / "agentplane_journal")
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nstrict = True\nwarn_unused_ignores = True\nfollow_imports = silent\n"
        f"python_version = 3.11\ncache_dir = {cache or '.mypy_cache'}\n"
        "[mypy-asyncpg.*]\nignore_missing_imports = True\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", *names],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{names}\n{result.stdout}{result.stderr}"


def test_no_page_quotes_a_test_count() -> None:
    """Counts and suite times drift (the docs once gave three); the suite counts itself
    (``pytest --collect-only -q``), so no page quotes one."""
    count = re.compile(r"\b\d[\d,]* (?:tests|passed)\b")
    for page in (*PAGES, ROOT / "CONTRIBUTING.md"):
        found = count.findall(page.read_text(encoding="utf-8"))
        assert not found, f"{page}: {found}"
