"""The stored tree as one statement reads it: the log's size and the nodes a question needs.

:mod:`agentplane_journal.journal.log` asks three questions of the stored tree (a frontier to
append to or to take a checkpoint from; a run's leaf and its path; position ``last``'s path)
and each must come from ONE snapshot, so that a size and the nodes read for it cannot come
from different moments. This module builds those statements (once, cached) and reads their
rows, refusing a stored node that is not 32 bytes; the questions and the seals are log.py's.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    LargeBinary,
    and_,
    bindparam,
    cast,
    func,
    literal_column,
    null,
    select,
    true,
    union,
    union_all,
)
from sqlalchemy.sql.elements import BindParameter

from agentplane_journal.db.models import LogTree, RunSeal
from agentplane_journal.errors import CorruptLogError
from agentplane_journal.journal.log_audit import MAX_LOG_INDEX
from agentplane_journal.tlog import tree as tree

__all__ = ["Snapshot", "damaged", "node_hash", "snapshot_statements"]

_SIZE, _LEAF, _NODE = 0, 1, 2  # the tag column of a snapshot statement's rows


def _shr(value: Any, bits: Any) -> Any:
    return value.op(">>")(bits)


def _odd(value: Any) -> Any:
    return value.op("&")(literal_column("1"))


def _snapshot_statement(leaf_source: str | None) -> Any:
    """One statement returning the log's size and the stored nodes a question needs.

    Rows are ``(tag, a, b, blob)``: ``(_SIZE, n, -, -)``; ``(_LEAF, position, -,
    chain_head)`` for inclusion; ``(_NODE, level, idx, hash)`` per node. The nodes asked
    for are, per level: the frontier of ``n`` (its root's pieces), and when a leaf ``L`` is
    given (``"run"``: the run's leaf; ``"last"``: position ``:last``) its ancestor and the
    ancestor's sibling. Only complete subtrees are stored, so whatever exists is what the
    size allows. At most 3 x 63 primary-key probes.
    """
    tenant: BindParameter[str] = bindparam("tenant")
    levels = select(literal_column("0").label("k")).cte("levels", recursive=True)
    levels = levels.union_all(
        select((levels.c.k + 1).label("k")).where(levels.c.k < tree.MAX_LEVEL)
    )
    # The last leaf by the primary key, backwards: one index probe. (``max(idx) + 1`` would
    # be the same number, but SQLite only optimises a bare ``max()`` and scans otherwise.)
    last = (
        select(LogTree.idx)
        .where(LogTree.tenant == tenant, LogTree.level == 0, LogTree.idx <= MAX_LOG_INDEX)
        .order_by(LogTree.idx.desc())
        .limit(1)
        .scalar_subquery()
    )
    size = select((func.coalesce(last, -1) + 1).label("n")).cte("size")
    k, n = levels.c.k, size.c.n
    base = levels.join(size, true())
    probes = [
        select(k.label("level"), (_shr(n, k) - 1).label("idx"))
        .select_from(base)
        .where(_odd(_shr(n, k)) == 1)
    ]
    rows = [
        select(
            literal_column(str(_SIZE)).label("tag"),
            n.label("a"),
            cast(null(), BigInteger).label("b"),
            cast(null(), LargeBinary).label("blob"),
        )
    ]
    if leaf_source is not None:
        if leaf_source == "run":
            # Two lookups by constants (the seal's primary key, the tree's run index): a
            # join here lets a planner without fresh statistics scan the leaves instead.
            run_id: BindParameter[str] = bindparam("run_id")
            leaf = select(
                select(RunSeal.chain_head)
                .where(RunSeal.tenant == tenant, RunSeal.run_id == run_id)
                .scalar_subquery()
                .label("head"),
                select(LogTree.idx)
                .where(LogTree.tenant == tenant, LogTree.run_id == run_id)
                .scalar_subquery()
                .label("m"),
            ).cte("leaf")
            position, base = leaf.c.m, base.join(leaf, true())
            rows.append(
                select(
                    literal_column(str(_LEAF)),
                    leaf.c.m,
                    cast(null(), BigInteger),
                    leaf.c.head,
                )
            )
        else:
            position = bindparam("last", type_=BigInteger)
        up = _shr(position, k)
        exists = _shr(n, k) > 0
        probes.append(select(k, up).select_from(base).where(exists))
        probes.append(select(k, up + 1 - 2 * _odd(up)).select_from(base).where(exists))
    want = union(*probes).cte("want")
    rows.append(
        select(literal_column(str(_NODE)), LogTree.level, LogTree.idx, LogTree.hash).select_from(
            want.join(
                LogTree,
                and_(
                    LogTree.tenant == tenant,
                    LogTree.level == want.c.level,
                    LogTree.idx == want.c.idx,
                ),
            )
        )
    )
    return union_all(*rows)


@functools.cache
def snapshot_statements() -> dict[str, Any]:
    return {
        "frontier": _snapshot_statement(None),
        "run": _snapshot_statement("run"),
        "last": _snapshot_statement("last"),
    }


def node_hash(value: Any, level: int, idx: int) -> bytes:
    """A stored node's hash; anything but 32 bytes (on SQLite, TEXT too) is a damaged tree."""
    if not isinstance(value, bytes | bytearray | memoryview) or len(value) != 32:
        size = (
            "NULL"
            if value is None
            else f"{len(value)} bytes"
            if isinstance(value, bytes | bytearray | memoryview)
            else type(value).__name__
        )
        raise CorruptLogError(
            idx << level, f"stored tree node (level {level}, index {idx}) holds {size}, not 32"
        )
    return bytes(value)


class Snapshot:
    """What one snapshot statement returned: the size, the nodes, and the asked-for leaf."""

    __slots__ = ("leaf", "nodes", "size")

    def __init__(self, rows: Sequence[Any]) -> None:
        self.size = 0
        self.nodes: dict[tree.Node, bytes] = {}
        self.leaf: tuple[int | None, Any] | None = None
        for tag, a, b, blob in rows:
            if tag == _SIZE:
                if type(a) is not int:  # on SQLite, a REAL index: no size a seal made
                    raise CorruptLogError(0, f"the stored tree's last leaf index is {a!r}")
                self.size = a
            elif tag == _LEAF:
                # A leaf row whose index is no integer (SQLite) is no leaf: audit's to report.
                self.leaf = (a if type(a) is int else None, blob)
            else:
                level, idx = int(a), int(b)
                self.nodes[(level, idx)] = node_hash(blob, level, idx)


def damaged(error: tree.MissingNodeError) -> CorruptLogError:
    level, idx = error.node
    return CorruptLogError(idx << level, str(error))
