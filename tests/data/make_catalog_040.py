"""Write ``agentplane-0.4.0-catalog.json``: the catalog of a database made by 0.4.0's DDL.

Run once, from the repository root, where ``../shared/reference`` holds agentplane's
reference source (or point ``AGENTPLANE_JOURNAL_REFERENCE`` at it)::

    python tests/data/make_catalog_040.py

It starts a throwaway PostgreSQL cluster (``tests/support/pgcluster.py``; or uses
``AGENTPLANE_JOURNAL_TEST_PG_URL``), creates an empty database, runs 0.4.0's ``SCHEMA``
exactly as its store does on connect, and writes what the catalogs say about it. Commit
the result; ``tests/test_schema_compat.py`` checks it against the source whenever the
source is present.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import asyncpg  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from support.migration_tools import catalog  # noqa: E402
from support.pgcluster import Cluster  # noqa: E402
from support.reference import CATALOG_040, REFERENCE, reference_dir, schema_040, to_json  # noqa: E402


def _dsn(url: str, database: str | None = None) -> str:
    u = make_url(url)
    if database:
        u = u.set(database=database)
    return u.set(drivername="postgresql").render_as_string(hide_password=False)


def _dump(snapshot: dict) -> str:
    """JSON with one catalog row a line, so a diff of the file reads like a schema diff."""
    out = ["{"]
    for key in ("about", "postgresql"):
        out.append(f"  {json.dumps(key)}: {json.dumps(snapshot[key])},")
    out.append('  "catalog": {')
    sections = list(snapshot["catalog"].items())
    for i, (section, rows) in enumerate(sections):
        out.append(f"    {json.dumps(section)}: [")
        out.extend(
            f"      {json.dumps(row)}{',' if j < len(rows) - 1 else ''}"
            for j, row in enumerate(rows)
        )
        out.append("    ]" + ("," if i < len(sections) - 1 else ""))
    out += ["  }", "}", ""]
    text = "\n".join(out)
    assert json.loads(text) == snapshot
    return text


async def write(server: str, ddl: str, version: str, reference: str, target: Path) -> None:
    """Run ``ddl`` on a new database of ``server`` and write its catalog to ``target``."""
    name = f"apj_ddl_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(_dsn(server))
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        conn = await asyncpg.connect(_dsn(server, name))
        try:
            await conn.execute(ddl)
            server_version = await conn.fetchval("SHOW server_version")
        finally:
            await conn.close()
        url = make_url(server).set(database=name).render_as_string(hide_password=False)
        snapshot = {
            "about": (
                f"Catalog of a PostgreSQL database created by agentplane {version}'s DDL "
                f"(the SCHEMA constant of {reference}); made by tests/data/"
                f"make_catalog_{version.replace('.', '')[:3]}.py"
            ),
            "postgresql": server_version.split()[0],
            "catalog": to_json(await catalog(url)),
        }
    finally:
        await admin.execute(f'DROP DATABASE "{name}"')
        await admin.close()
    await asyncio.to_thread(target.write_text, _dump(snapshot))
    print(f"wrote {target}")


def run(reference: str, make: Callable[[str], Awaitable[None]]) -> None:
    """``make(server_url)`` against ``AGENTPLANE_JOURNAL_TEST_PG_URL`` or a throwaway cluster."""
    if reference_dir(reference) is None:
        sys.exit(f"{reference} not found: put ../shared/reference beside the repository")
    server = os.environ.get("AGENTPLANE_JOURNAL_TEST_PG_URL")
    cluster = None if server else Cluster()
    try:
        asyncio.run(make(server or cluster.url))
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    run(REFERENCE, lambda server: write(server, schema_040(), "0.4.0", REFERENCE, CATALOG_040))
