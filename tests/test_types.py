"""The type checker in CI: ``mypy --strict`` on the package, and on the host guide's code.

The package is checked as ``[tool.mypy]`` in pyproject.toml configures it (strict, unused
``type: ignore`` comments refused). The snippets of docs/host-guide.md are what a host
pastes into code its own type checker reads: tests/test_readme.py checks the whole files
(models, app, env.py, the sync helper); the fragments are checked here, each after a small
typed prelude (the names it assumes: an engine, a store, a model) and inside an
``async def`` (they ``await`` at the top level), so a documented call the package's
signatures refuse, or a fragment that drifted from the API, fails.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
HOST_GUIDE = ROOT / "docs" / "host-guide.md"


def mypy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    return subprocess.run(
        [sys.executable, "-m", "mypy", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_package_type_checks_strictly() -> None:
    result = mypy(cwd=ROOT)  # files, strictness and overrides: [tool.mypy] in pyproject.toml
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found"), result.stdout


# -- the host guide's code ----------------------------------------------------------------

# The names the fragments assume, typed as a host would have them.
FRAGMENT_PRELUDE = """\
from collections.abc import AsyncIterator, Callable
from typing import Any

from sqlalchemy import BigInteger, Text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from agentplane_journal import Append, Lease, RunId, SqlJournalStore, SqlPushStore, upgrade


{models}

class Account(Base):
    __tablename__ = "accounts"

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    balance: Mapped[int] = mapped_column(BigInteger)


class OrderIn:  # a request body (a pydantic model in FastAPI)
    item: str
    amount_cents: int
    run: RunId
    epoch: int


def Depends(dependency: Callable[..., Any]) -> Any:  # FastAPI's, typed as FastAPI types it
    return dependency


url = "sqlite+aiosqlite:///journal.db"
key = bytes(32)
engine = create_async_engine(url)
sessions = async_sessionmaker(engine, expire_on_commit=False)
store = SqlJournalStore(engine, tenant="shop")
run = RunId.generate()
lease: Lease
order_id = 1
epoch = 1
batch: list[Append] = []
"""

# Every python block of the page, by its first line: the file it is checked as here, or
# None for the whole files tests/test_readme.py checks. A new snippet must be added (the
# test refuses one it does not know), so none goes unchecked.
SNIPPETS = {
    "# shop/models.py": None,
    "# shop/app.py": None,
    "# migrations/env.py": None,
    "import asyncio\nimport threading": None,
    "await upgrade(url": "schema_snippet.py",
    "async def post(": "append_atomic_snippet.py",
    "async def get_session(": "session_snippet.py",
    "from agentplane_journal import WRITE_TRANSACTION": "begin_write_snippet.py",
    "# conftest.py": "testing_plugin_snippet.py",
}


def python_blocks(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


def snippet_name(code: str) -> str | None:
    known = [first for first in SNIPPETS if code.startswith(first)]
    assert len(known) == 1, f"a host guide snippet this test does not know:\n{code}"
    return SNIPPETS[known[0]]


def test_the_host_guide_fragments_type_check_strictly(tmp_path: Path) -> None:
    blocks = python_blocks(HOST_GUIDE)
    assert blocks[0].startswith("# shop/models.py\n"), "the guide's models come first"
    names = [snippet_name(code) for code in blocks]
    assert sorted(map(str, names)) == sorted(map(str, SNIPPETS.values())), "missing or repeated"
    # The guide's own models (its Order, Base), so a fragment using a field they lack fails.
    models = "\n".join(
        line for line in blocks[0].splitlines() if not line.startswith(("# ", "from sqlalchemy"))
    )
    prelude = FRAGMENT_PRELUDE.format(models=models)
    for name, code in zip(names, blocks, strict=True):
        if name is not None:
            wrapped = "async def _snippet() -> None:\n" + textwrap.indent(code, "    ")
            (tmp_path / name).write_text(prelude + "\n\n" + wrapped, encoding="utf-8")
    # This checkout's package, not an installed one; its own errors are the test above's.
    (tmp_path / "agentplane_journal").symlink_to(ROOT / "agentplane_journal")
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nstrict = True\nwarn_unused_ignores = True\nfollow_imports = silent\n"
        "python_version = 3.11\ncache_dir = .mypy_cache\n"
        "[mypy-asyncpg.*]\nignore_missing_imports = True\n"
    )
    fragments = sorted(name for name in names if name is not None)
    result = mypy("--config-file", "mypy.ini", *fragments, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# -- durable steps: the decorators keep signatures and return types ----------------------

STEPS_PROGRAM = """\
import re
from typing import Any

from agentplane_journal import (
    DidNotHappen, Finished, Fresh, InFlight, Landed, SqlJournalStore, Steps, Unknown,
)


async def main(store: SqlJournalStore) -> None:
    steps = Steps(store, instance="w1")

    async def check(amount: int, card: str) -> Landed[str] | DidNotHappen | Unknown:
        return DidNotHappen()

    @steps.effect("charge", reconcile=check)
    async def charge(amount: int, card: str) -> str:
        return "ch_1"

    @steps.workflow("checkout")
    async def checkout(order: dict[str, Any]) -> int:
        receipt = await charge(order["amount"], order["card"])
        reveal_type(receipt)
        return len(receipt)

    admission = await checkout.start("order-42", {"amount": 1})
    if isinstance(admission, Fresh):
        reveal_type(admission.result)
    elif isinstance(admission, Finished):
        reveal_type(admission.outcome.result)
    else:
        reveal_type(admission)
    await charge("1", "card")  # E: the wrong argument type
    await checkout.start("k", {"a": 1}, 2)  # E: too many arguments

    @steps.effect("email")  # no reconcile function: the signature is still the function's
    async def send(to: str, body: str) -> bool:
        return True

    @steps.workflow("notify")
    async def notify(to: str) -> None:
        reveal_type(await send(to, "hi"))
        await send(to, 1)  # E: the wrong argument type
"""


def test_the_steps_decorators_keep_signatures_and_return_types(tmp_path: Path) -> None:
    (tmp_path / "program.py").write_text(STEPS_PROGRAM, encoding="utf-8")
    (tmp_path / "agentplane_journal").symlink_to(ROOT / "agentplane_journal")
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nstrict = True\nfollow_imports = silent\npython_version = 3.11\n"
        "cache_dir = .mypy_cache\n[mypy-asyncpg.*]\nignore_missing_imports = True\n"
    )
    out = mypy("--config-file", "mypy.ini", "program.py", cwd=tmp_path).stdout
    revealed = [t.replace("builtins.", "") for t in re.findall(r'Revealed type is "(.*)"', out)]
    assert revealed == [
        "str",
        "int",
        "int | None",
        "agentplane_journal.steps.values.InFlight",
        "bool",
    ], out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 3, out
    assert 'Argument 1 to "__call__" of "Effect" has incompatible type "str"' in errors[0], out
    assert "Too many arguments" in errors[1], out
    assert 'Argument 2 to "__call__" of "Effect" has incompatible type "int"' in errors[2], out


def test_the_host_guide_fragments_build_its_models_with_their_own_columns() -> None:
    """A mapped class takes any keyword to mypy (``**kw: Any``), so a fragment building the
    guide's ``Order`` with a field it lacks passes the type check and fails at run time:
    each ``Model(...)`` call's keywords are held to the guide's own model's columns."""
    blocks = python_blocks(HOST_GUIDE)
    columns: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(blocks[0])):  # shop/models.py
        if isinstance(node, ast.ClassDef):
            columns[node.name] = {
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
    assert columns.get("Order") and columns.get("Base") == set()
    seen = 0
    for code in blocks:
        tree = ast.parse(code)  # top-level await parses (only compiling refuses it)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in columns:
                fields = {kw.arg for kw in node.keywords}
                assert fields <= columns[node.func.id], (node.func.id, fields, code)
                seen += 1
    assert seen >= 2  # the app's and the FastAPI fragment's Order(...)
