"""The head each run had after this process's last commit to it: the hot paths' hint.

Shared by both databases' writers (and by every tenant handle of a store). Only a hint: a
wrong or missing entry costs one general unit of work, never a wrong record.
"""

from __future__ import annotations

from collections import OrderedDict

from agentplane_journal.core.ids import Digest

__all__ = ["HeadCache"]


class HeadCache:
    """The head each run had after this process's last commit to it, at most ``size`` runs.

    Only a hint: the append statement checks it under the run mutex, and a wrong or missing
    entry costs one general unit of work, never a wrong record. Filled after a commit (never
    after an unknown one) and from a resumed run's read under its new lease
    (``SqlJournalStore.remember_head``), dropped on any failure.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._heads: OrderedDict[tuple[str, str], tuple[int, Digest]] = OrderedDict()

    def get(self, tenant: str, run_id: str) -> tuple[int, Digest] | None:
        key = (tenant, run_id)
        head = self._heads.get(key)
        if head is not None:
            self._heads.move_to_end(key)
        return head

    def put(self, tenant: str, run_id: str, seq: int, hash_: Digest) -> None:
        self._heads[(tenant, run_id)] = (seq, hash_)
        self._heads.move_to_end((tenant, run_id))
        if len(self._heads) > self._size:
            self._heads.popitem(last=False)

    def drop(self, tenant: str, run_id: str) -> None:
        self._heads.pop((tenant, run_id), None)
