"""The drill's scratch target: made fresh for each drill, removed after it, never anyone else's.

``agentplane-journal drill`` restores a backup somewhere to compare roots, every night.
A restore needs an empty target, and a scheduled check must pass on its second night too,
so the drill makes its own target each time and removes it afterwards. What it must never
do is remove something it did not make; hence one rule per dialect:

* **PostgreSQL** (``--scratch-url`` names a database): a new schema per drill,
  ``agentplane_drill_<random>``, created with ``CREATE SCHEMA`` (which fails rather than
  reuse an existing one) and marked by a comment, migrated, restored into, and dropped
  (``DROP SCHEMA .. CASCADE``) when the drill ends, whatever the outcome. Nothing else in the
  database is read or written, so a scratch database may hold other things.
* **SQLite** (``--scratch-url`` names a file): the drill creates the file, stamped with
  :data:`DRILL_APPLICATION_ID` in its header (``PRAGMA application_id``), and deletes it when
  the drill ends. An existing file is refused unless it carries that stamp (a drill that was
  killed before it could clean up); a journal, or any other file, is never touched.
* **no** ``--scratch-url``: a SQLite file in the drill's temporary directory.

A drill killed outright (SIGKILL, power loss) on PostgreSQL leaves its schema behind; it is
named and commented, and :func:`leftover_schemas` finds such schemas for the operator.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import bindparam, text
from sqlalchemy.schema import CreateSchema, DropSchema

from agentplane_journal.db.dialect import dialect_for
from agentplane_journal.db.engine import async_url, create_engine
from agentplane_journal.migrations.commands import upgrade

__all__ = [
    "DRILL_APPLICATION_ID",
    "SCHEMA_COMMENT",
    "SCHEMA_PREFIX",
    "Scratch",
    "ScratchRefused",
    "leftover_schemas",
    "scratch_target",
]

DRILL_APPLICATION_ID = 0x61706A64  # "apjd": a scratch file a drill made
SCHEMA_PREFIX = "agentplane_drill_"
SCHEMA_COMMENT = "agentplane-journal drill scratch: dropped when the drill ends"
_SIDECARS = ("-wal", "-shm", "-journal")


class ScratchRefused(ValueError):
    """The scratch target is not one the drill may write into and remove."""


@dataclass(frozen=True, slots=True)
class Scratch:
    """Where the drill restores: a URL and, on PostgreSQL, the schema made for it."""

    url: str
    schema: str | None
    shown: str  # for messages: the file, or the database and schema


def _same_database(a: str, b: str) -> bool:
    ua, ub = async_url(a), async_url(b)
    da, db = dialect_for(ua), dialect_for(ub)
    if da.name != db.name:
        return False
    fa, fb = da.database_file(ua), da.database_file(ub)
    if fa is not None or fb is not None:
        return fa is not None and fb is not None and Path(fa).resolve() == Path(fb).resolve()
    return (ua.host, ua.port, ua.database) == (ub.host, ub.port, ub.database)


def _remove_file(path: Path) -> None:
    for suffix in ("", *_SIDECARS):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _application_id(path: Path) -> int | None:
    """The file's ``application_id``, or None when it is not a SQLite database."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = conn.execute("PRAGMA application_id").fetchone()
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return None
    return int(row[0]) if row else None


def _make_file(path: Path) -> None:
    if path.exists():
        if _application_id(path) != DRILL_APPLICATION_ID:
            raise ScratchRefused(
                f"the scratch file {path} already exists and was not made by a drill; the drill "
                "creates its scratch file itself and deletes it afterwards, so it never writes "
                "into (or removes) a file it did not make — give a path that does not exist"
            )
        _remove_file(path)  # what a killed drill left behind, by its stamp
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"PRAGMA application_id = {DRILL_APPLICATION_ID}")
        conn.commit()
    finally:
        conn.close()


@asynccontextmanager
async def scratch_target(
    scratch_url: str | None, source_url: str, workdir: Path
) -> AsyncIterator[Scratch]:
    """A fresh, migrated, empty target for one drill, removed when the block ends."""
    if scratch_url is None:
        path = workdir / "scratch.db"
        url = f"sqlite+aiosqlite:///{path}"
        await upgrade(url)
        yield Scratch(url, None, str(path))
        return
    if _same_database(scratch_url, source_url):
        raise ScratchRefused(
            "--scratch-url names the database being backed up; give another database (the "
            "drill restores a whole copy into it)"
        )
    parsed = async_url(scratch_url)
    dialect = dialect_for(parsed)
    file = dialect.database_file(parsed)
    if dialect.schemas:
        async with _schema(scratch_url) as schema:
            await upgrade(scratch_url, schema=schema)
            shown = parsed.render_as_string(hide_password=True)
            yield Scratch(scratch_url, schema, f"{shown} schema {schema}")
        return
    if file is None:
        raise ScratchRefused("--scratch-url must name a SQLite file or a PostgreSQL database")
    path = Path(file)
    _make_file(path)
    try:
        await upgrade(scratch_url)
        yield Scratch(scratch_url, None, str(path))
    finally:
        _remove_file(path)


@asynccontextmanager
async def _schema(url: str) -> AsyncIterator[str]:
    name = f"{SCHEMA_PREFIX}{secrets.token_hex(6)}"
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(CreateSchema(name))  # fails if it exists: never reused
            await conn.execute(text(f"COMMENT ON SCHEMA {name} IS '{SCHEMA_COMMENT}'"))
        try:
            yield name
        finally:
            async with engine.begin() as conn:
                await conn.execute(DropSchema(name, cascade=True))
    finally:
        await engine.dispose()


async def leftover_schemas(url: str) -> list[str]:
    """Schemas in the database at ``url`` that a drill made and did not drop (it was killed)."""
    engine = create_engine(url)
    stmt = text(
        "SELECT n.nspname FROM pg_namespace n WHERE n.nspname LIKE :prefix "
        "AND obj_description(n.oid, 'pg_namespace') = :comment ORDER BY 1"
    ).bindparams(bindparam("prefix", SCHEMA_PREFIX + "%"), bindparam("comment", SCHEMA_COMMENT))
    try:
        async with engine.connect() as conn:
            return [str(r) for r in (await conn.execute(stmt)).scalars()]
    finally:
        await engine.dispose()
