"""Statements compiled once for the driver's own ``executemany``: no per-row processing.

SQLAlchemy's ``execute(statement, [dict, ...])`` processes every row's parameters in Python
(a dict per row, each value through its type's bind processor) before the driver sees them.
For the many rows of one statement that a restore's chunk writes (its records, the run
mutexes, the seals and the log's tree nodes), that processing cost more than the driver's
own ``executemany``. :func:`driver_sql` compiles a Core statement once per driver and
schema into the driver's text and the order of its parameters, for
``AsyncConnection.exec_driver_sql(text, [tuple, ...])``: the rows go to the driver as they
are, so they must already be the driver's values (``str``, ``int``, ``bytes``, ``None``;
the tables these statements write have no type that converts).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["driver_sql"]

_COMPILED: dict[tuple[Any, ...], tuple[str, tuple[str, ...]]] = {}


def driver_sql(conn: AsyncConnection, name: str, statement: Any) -> tuple[str, tuple[str, ...]]:
    """``statement`` compiled for ``conn``'s driver, naming the tables as the connection's
    ``schema_translate_map`` does (a drill's scratch schema), with its parameters' names in
    order: for ``exec_driver_sql`` with a list of tuples, an ``executemany`` with no
    per-row parameter processing. Compiled once per ``name``, driver and schema."""
    sync = conn.sync_connection
    schemas = None if sync is None else sync.get_execution_options().get("schema_translate_map")
    dialect = conn.dialect
    mapped = sorted((repr(k), repr(v)) for k, v in (schemas or {}).items())
    key = (name, dialect.name, dialect.driver, dialect.paramstyle, *mapped)
    found = _COMPILED.get(key)
    if found is None:
        translate = {"schema_translate_map": schemas, "render_schema_translate": True}
        compiled = statement.compile(dialect=dialect, **(translate if schemas else {}))
        if len(_COMPILED) > 64:  # a scratch schema per drill: keep the cache small
            _COMPILED.clear()
        found = _COMPILED[key] = (str(compiled), tuple(compiled.positiontup or ()))
    return found
