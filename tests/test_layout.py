"""The package's shape, held by tests: layer contracts, no Alembic at run time, no cycles,
no dialect branches outside the per-database modules."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_the_layer_contracts_hold() -> None:
    """``pyproject.toml``'s import-linter contracts: core is pure, the runtime never imports
    Alembic, layers import only downwards (seen red with an upward import from db/)."""
    lint = shutil.which("lint-imports")
    assert lint, "import-linter is a test dependency: pip install -e '.[test]'"
    result = subprocess.run(
        [lint], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_opening_a_store_and_appending_loads_no_alembic(
    sqlite_database: Callable[..., str],
) -> None:
    url = sqlite_database()
    script = f"""
import asyncio, sys
from agentplane_journal import Append, RunId, SqlJournalStore

async def main():
    store = await SqlJournalStore.connect({url!r})
    run = RunId.generate()
    await store.append(0, [Append(run, "Note", {{"text": "hi"}})])
    await store.verify(run)
    await store.close()

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] == "alembic"))
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


# -- dialect differences live behind the dialect object ----------------------------------

PACKAGE = ROOT / "agentplane_journal"
#: The per-database modules: the dialect classes and lookups, and each backend's folder.
DIALECT_MODULES = ("db/dialect/", "backends/postgresql/", "backends/sqlite/")
#: What a branch on a database's name compares against.
BACKEND_NAMES = frozenset({"postgresql", "postgres", "sqlite"})


def _names_a_backend(node: ast.AST) -> bool:
    """A string constant that is a backend's name, or a tuple/list/set holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in BACKEND_NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_backend(element) for element in node.elts)
    return False


def dialect_branches(source: str) -> list[str]:
    """Where ``source`` tells the databases apart by name instead of asking the dialect
    object: a comparison, ``startswith``/``endswith``, a dict key or a ``case`` against
    "postgresql"/"postgres"/"sqlite"; reading SQLAlchemy's ``.dialect.name``; a URL's
    ``get_backend_name()``/``get_driver_name()``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            if any(_names_a_backend(side) for side in [node.left, *node.comparators]):
                found.append((line, "compares with a backend's name"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith") and any(
                _names_a_backend(arg) for arg in node.args
            ):
                found.append((line, f"{node.func.attr}() with a backend's name"))
        elif isinstance(node, ast.Dict):
            if any(key is not None and _names_a_backend(key) for key in node.keys):
                found.append((line, "a dict keyed by a backend's name"))
        elif isinstance(node, ast.MatchValue) and _names_a_backend(node.value):
            found.append((line, "a case on a backend's name"))
        if isinstance(node, ast.Attribute):
            if node.attr == "name" and isinstance(node.value, ast.Attribute):
                if node.value.attr == "dialect":
                    found.append((line, ".dialect.name"))
            if node.attr in ("get_backend_name", "get_driver_name"):
                found.append((line, f"{node.attr}()"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_the_checker_sees_each_kind_of_dialect_branch() -> None:
    bad = """
if engine.dialect.name == "sqlite": pass
if "postgresql" != name: pass
if name in ("postgresql", "sqlite"): pass
url.drivername.startswith("sqlite")
backend = url.get_backend_name()
table = {"postgresql": 1}
match name:
    case "sqlite": pass
"""
    assert len(dialect_branches(bad)) == 8, dialect_branches(bad)
    good = """
dialect = dialect_for(engine)
if dialect.schemas: pass
message = f"{dialect.name} has no schemas"
url = "sqlite+aiosqlite:///journal.db"
"""
    assert dialect_branches(good) == []


def test_no_dialect_branch_outside_the_per_database_modules() -> None:
    """The differences between PostgreSQL and SQLite are the dialect object's (methods and
    attributes of ``db/dialect/``'s classes, chosen by ``dialect_for``/``dialect_named``)
    or a backend folder's: nothing else asks which database it is on (seen red with an
    ``engine.dialect.name == "sqlite"`` put back in ``db/unit.py``)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(DIALECT_MODULES):
            continue
        found += [f"{relative}:{hit}" for hit in dialect_branches(path.read_text())]
    assert found == [], "ask the dialect object instead:\n" + "\n".join(found)
