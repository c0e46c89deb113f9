"""``database_key`` names the database an engine reaches: one key per database, never one
for two. The LangGraph saver's shared verified points are kept under it (and the self-wait
check compares it), so two databases sharing a key would let one's verified state meet the
other's rows: refused as corrupt (every row is still checked), but about an honest database.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal.db.dialect import database_key


def test_each_private_in_memory_sqlite_database_has_its_own_key() -> None:
    a, b, c = (
        create_engine(url) for url in ("sqlite:///:memory:", "sqlite:///:memory:", "sqlite://")
    )
    keys = [database_key(engine) for engine in (a, b, c)]
    assert len(set(keys)) == 3
    assert database_key(a) == keys[0]  # an engine keeps its key


def test_a_sqlite_file_has_one_key_whatever_the_path_says(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    one = create_engine(f"sqlite:///{tmp_path}/j.db")
    two = create_engine(f"sqlite:///{tmp_path}/sub/../j.db")
    other = create_engine(f"sqlite:///{tmp_path}/k.db")
    assert database_key(one) == database_key(two) != database_key(other)


def test_a_postgresql_server_named_by_its_query_is_told_by_it() -> None:
    def key(url: str) -> tuple[str, ...]:
        return database_key(create_async_engine(url).sync_engine)

    assert key("postgresql+asyncpg://u@/db?host=/run/a") != key(
        "postgresql+asyncpg://u@/db?host=/run/b"
    )
    assert key("postgresql+asyncpg://u@/db?host=/run/a&port=5433") != key(
        "postgresql+asyncpg://u@/db?host=/run/a&port=5434"
    )
    assert key("postgresql+asyncpg://u@h:5432/db") == key("postgresql+asyncpg://v:pw@h:5432/db")
    assert key("postgresql+asyncpg://u@h:5432/db") != key("postgresql+asyncpg://u@h:5432/other")
