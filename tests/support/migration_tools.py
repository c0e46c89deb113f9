"""Helpers for the schema and migration tests: the Alembic CLI, and catalog snapshots.

A *catalog* is what a database says about its own schema, read from the system catalogs
(``sqlite_master``; ``information_schema``, ``pg_index``, ``pg_constraint``, ``pg_sequences``
on PostgreSQL) as sorted tuples, so two databases, or one database before and after
something, compare with ``==`` and a failing assert shows the difference.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import pool, text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

REPO = Path(__file__).resolve().parents[2]

Catalog = dict[str, list[tuple[Any, ...]]]


def run_alembic(
    *args: str, url: str | None = None, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real ``alembic`` CLI (``python -m alembic``) in ``cwd``; never raises."""
    environ = {k: v for k, v in os.environ.items() if k != "AGENTPLANE_JOURNAL_URL"}
    if url is not None:
        environ["AGENTPLANE_JOURNAL_URL"] = url
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def output(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def alembic_ok(*args: str, **kw: Any) -> str:
    """Run the CLI, assert it succeeded, return stdout + stderr."""
    result = run_alembic(*args, **kw)
    assert result.returncode == 0, f"alembic {' '.join(args)} failed:\n{output(result)}"
    return result.stdout + result.stderr


async def query(url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """Rows of one statement, on a throwaway engine (autocommit, nothing left open)."""
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(text(sql), params)).all()
            await conn.commit()
            return [tuple(r) for r in rows]
    finally:
        await engine.dispose()


async def execute(url: str, *statements: str) -> None:
    """Run statements in one transaction and commit (raw SQL, as another tool would)."""
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.begin() as conn:
            for sql in statements:
                await conn.exec_driver_sql(sql)
    finally:
        await engine.dispose()


async def table_names(url: str) -> set[str]:
    if url.startswith("sqlite"):
        rows = await query(url, "SELECT name FROM sqlite_master WHERE type = 'table'")
    else:
        rows = await query(
            url,
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
        )
    return {r[0] for r in rows}


# -- catalogs ------------------------------------------------------------------------------


async def _rows(conn: AsyncConnection, sql: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in (await conn.execute(text(sql))).all())


async def sqlite_catalog(conn: AsyncConnection) -> Catalog:
    return {
        "objects": await _rows(
            conn, "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master"
        )
    }


async def pg_catalog(conn: AsyncConnection, *, identity: bool = False) -> Catalog:
    """Tables, columns, constraints, indexes and sequences of the ``public`` schema.

    ``identity`` adds each relation's oid and relfilenode (a dropped-and-recreated or
    rewritten table changes them) and each sequence's ``last_value``.
    """
    catalog: Catalog = {
        "tables": await _rows(
            conn,
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_schema = 'public'",
        ),
        "columns": await _rows(
            conn,
            "SELECT table_name, ordinal_position, column_name, data_type, is_nullable, "
            "coalesce(column_default, ''), coalesce(character_maximum_length, -1), "
            "coalesce(numeric_precision, -1) "
            "FROM information_schema.columns WHERE table_schema = 'public'",
        ),
        "constraints": await _rows(
            conn,
            "SELECT c.conrelid::regclass::text, c.conname, c.contype::text, "
            "pg_get_constraintdef(c.oid) "
            "FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace "
            "WHERE n.nspname = 'public'",
        ),
        "indexes": await _rows(
            conn,
            "SELECT t.relname, i.relname, x.indisunique, x.indisprimary, "
            "array_to_string(array(SELECT pg_get_indexdef(x.indexrelid, k, true) "
            "  FROM generate_series(1, x.indnkeyatts) AS k ORDER BY k), ', '), "
            "x.indoption::text, coalesce(pg_get_expr(x.indpred, x.indrelid), ''), "
            "pg_get_indexdef(x.indexrelid) "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = 'public'",
        ),
        "sequences": await _rows(
            conn,
            "SELECT sequencename, data_type::text, start_value, min_value, max_value, "
            "increment_by, cycle, cache_size FROM pg_sequences WHERE schemaname = 'public'",
        ),
    }
    if identity:
        catalog["relations"] = await _rows(
            conn,
            "SELECT c.relname, c.relkind::text, c.oid::bigint, c.relfilenode::bigint "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public'",
        )
        catalog["sequence_state"] = await _rows(
            conn,
            "SELECT sequencename, coalesce(last_value, -1) FROM pg_sequences "
            "WHERE schemaname = 'public'",
        )
    return catalog


async def catalog(url: str, *, identity: bool = False) -> Catalog:
    """The schema catalog of the database at ``url`` (either dialect)."""
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            if url.startswith("sqlite"):
                return await sqlite_catalog(conn)
            return await pg_catalog(conn, identity=identity)
    finally:
        await engine.dispose()


def only_tables(cat: Catalog, tables: Iterable[str], sequences: Iterable[str] = ()) -> Catalog:
    """The part of a PostgreSQL catalog about ``tables`` (and the named sequences)."""
    tables, sequences = set(tables), set(sequences)
    keep = {
        "tables": lambda r: r[0] in tables,
        "columns": lambda r: r[0] in tables,
        "constraints": lambda r: r[0] in tables,
        "indexes": lambda r: r[0] in tables,
        "sequences": lambda r: r[0] in sequences,
    }
    return {k: [r for r in cat[k] if keep[k](r)] for k in keep}


async def table_contents(url: str, tables: Iterable[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every named table, sorted (bytes compared as bytes)."""
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            out = {}
            for table in sorted(tables):
                rows = (await conn.execute(text(f'SELECT * FROM "{table}"'))).all()
                out[table] = sorted(
                    (tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows),
                    key=repr,
                )
            return out
    finally:
        await engine.dispose()
