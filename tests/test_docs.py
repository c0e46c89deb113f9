"""The documentation site builds with warnings as errors, and its examples run as written.

A runnable example is a fenced ```python block directly preceded by the line
``<!-- runnable -->`` (invisible when rendered): a whole program, run with ``python -c`` in a
fresh temporary directory (SQLite files land there); an async one calls ``asyncio.run``
itself. docs/tests.md documents the convention.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUNNABLE = re.compile(r"^<!-- runnable -->\n```python\n(.*?)^```", re.S | re.M)


def _env() -> dict[str, str]:
    """This source tree first on the path, so the examples run against it."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), path]))}


def test_the_site_builds_strict(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**_env(), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / "reference" / "api" / "index.html").is_file()
    api = (tmp_path / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="agentplane_journal.journal.store.SqlJournalStore.append_atomic"' in api
    assert 'id="agentplane_journal.journal.store.SqlJournalStore.verify"' in api  # inherited


def _examples() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        for n, match in enumerate(RUNNABLE.finditer(page.read_text(encoding="utf-8"))):
            found.append((f"{page.relative_to(DOCS)}#{n}", match.group(1)))
    return found


EXAMPLES = _examples()


def test_the_runnable_examples_are_found() -> None:
    pages = {name.split("#")[0] for name, _ in EXAMPLES}
    assert {"tutorial.md", "spec/wire-format.md", "spec/export-format.md"} <= pages
    # A marker must sit right on a python block: one that does not would be silently skipped.
    for page in DOCS.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        markers = re.findall(r"^<!-- runnable -->$", text, re.M)
        assert len(markers) == len(RUNNABLE.findall(text)), page


@pytest.mark.parametrize(("name", "code"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_the_runnable_example_runs_as_written(name: str, code: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{name}:\n{result.stderr}"


def test_the_tutorial_example_runs_end_to_end_and_is_the_readmes(tmp_path: Path) -> None:
    (code,) = [code for name, code in EXAMPLES if name.startswith("tutorial.md")]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"## Using it\n\n```python\n{code}```" in readme
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("agentplane\n1\n")  # the checkpoint note of a 1-run log
    assert (tmp_path / "journal.db").is_file()


def test_the_module_map_names_every_module() -> None:
    design = (DOCS / "design.md").read_text(encoding="utf-8")
    tree = design.split("## Module map", 1)[1].split("```", 2)[1]
    package = ROOT / "agentplane_journal"
    for module in sorted(package.rglob("*.py")):
        rel = module.relative_to(package)
        # the map indents each module under its folder, so check the name and its folder
        assert re.search(rf"^\s+{re.escape(rel.name)}\s", tree, re.M), rel
        for folder in rel.parts[:-1]:
            assert re.search(rf"^\s+{re.escape(folder)}/", tree, re.M), rel


def test_the_api_reference_lists_every_public_name() -> None:
    init = ROOT / "agentplane_journal" / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    exports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_EXPORTS":
            exports = ast.literal_eval(node.value)
    assert exports
    api = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    for name, module in exports.items():
        assert f"::: agentplane_journal.{module}.{name}\n" in api, name
