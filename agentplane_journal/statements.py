"""The journal store's prebuilt statements and the decoding of its rows.

Kept apart from :mod:`agentplane_journal.store` so the repository reads as the contract:
the statements every append runs are built once per dialect here (building a statement costs
more Python than executing a cached one), and every row leaves the database through
:func:`record_from_row`, which re-hashes it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select

from .dialect import Dialect
from .errors import CorruptRecordError
from .ids import Digest
from .models import Journal, RunActivity, RunLease, RunSeal
from .record import Attestation, Record

__all__ = [
    "INSERT_RECORDS",
    "RECORD_COLUMNS",
    "HotStatements",
    "digest",
    "hot_statements",
    "record_from_row",
]

# -- the rows a record is read from ---------------------------------------------------

RECORD_COLUMNS = (
    Journal.seq,
    Journal.prev_hash,
    Journal.hash,
    Journal.raw,
    Journal.key_id,
    Journal.signature,
)


@dataclass(frozen=True, slots=True)
class HotStatements:
    """The statements every append runs, built once per dialect with bound parameters.

    Building a statement costs more Python than executing a cached one; the append path
    runs these with a parameter dict (``tenant``, ``run_id``, ``now``) instead.
    """

    #: Upsert of the run's activity row: bumps ``updated_at`` (never backwards) and takes
    #: the row lock that serialises every writer of the run until COMMIT.
    run_mutex: Any
    #: One round trip for the lease (read FOR UPDATE: a takeover waits for this
    #: transaction, and one that committed first is seen at its latest version), the seal
    #: and the chain head (which cannot move while this transaction holds the run mutex).
    run_state: Any


@functools.cache
def hot_statements(dialect: Dialect) -> HotStatements:
    tenant, run_id = bindparam("tenant"), bindparam("run_id")
    upsert = dialect.insert(RunActivity).values(
        tenant=tenant, run_id=run_id, updated_at=bindparam("now")
    )
    run_mutex = upsert.on_conflict_do_update(
        index_elements=[RunActivity.tenant, RunActivity.run_id],
        set_={"updated_at": dialect.greatest(RunActivity.updated_at, upsert.excluded.updated_at)},
    )
    lease = (RunLease.tenant == tenant, RunLease.run_id == run_id)
    seal = (RunSeal.tenant == tenant, RunSeal.run_id == run_id)
    chain = (Journal.tenant == tenant, Journal.run_id == run_id)
    last = select(Journal.seq).where(*chain).order_by(Journal.seq.desc()).limit(1)
    run_state = select(
        select(RunLease.epoch).where(*lease).with_for_update().scalar_subquery(),
        select(RunLease.owner).where(*lease).with_for_update().scalar_subquery(),
        select(RunSeal.outcome).where(*seal).scalar_subquery(),
        select(RunSeal.chain_head).where(*seal).scalar_subquery(),
        last.scalar_subquery(),
        select(Journal.hash).where(*chain, Journal.seq == last.scalar_subquery()).scalar_subquery(),
    )
    return HotStatements(run_mutex=run_mutex, run_state=run_state)


#: The records' INSERT. Executed with a list of rows and RETURNING, SQLAlchemy's
#: "insertmanyvalues" sends it as multi-row ``INSERT .. VALUES (..), (..)`` statements of up
#: to 1000 rows, compiled once and cached (a literal ``values([...])`` list is not cacheable).
INSERT_RECORDS = Journal.__table__.insert().returning(Journal.seq)


def digest(value: bytes | None, seq: int) -> Digest:
    """A hash column as a :class:`Digest`; a column that is not 32 bytes is corrupt."""
    if value is None or len(value) != 32:
        size = "NULL" if value is None else f"{len(value)} bytes"
        raise CorruptRecordError(seq, f"a hash column holds {size}, not 32 bytes")
    return Digest._trusted(bytes(value))  # length checked just above; this is the read path


def record_from_row(row: Any) -> Record:
    seq = int(row[0])
    key_id, signature = row[4], row[5]
    if (key_id is None) != (signature is None):
        raise CorruptRecordError(
            seq, "only one of key_id and signature is set: a half-written attestation"
        )
    attestation = None if key_id is None else Attestation(key_id, bytes(signature))
    record = Record.from_stored(
        bytes(row[3]), digest(row[1], seq), digest(row[2], seq), attestation, seq=seq
    )
    if record.seq != seq:
        raise CorruptRecordError(
            seq, f"the row's seq column says {seq}, its body says {record.seq}"
        )
    return record
