"""Rows written the way agentplane 0.4.0 writes them (``Agentplane040``), on a database made by
its own DDL (conftest's ``new_pg`` makes one), for the 0.4.0 and 0.22.0 compatibility tests."""

from __future__ import annotations

import time
from collections.abc import Sequence

import asyncpg
from sqlalchemy.engine import make_url

from agentplane_journal import (
    Append,
    Digest,
    Ed25519Signer,
    Record,
    RunId,
)


def dsn040(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Agentplane040:
    """Writes rows the way agentplane 0.4.0's ``PostgresStore`` does: its SQL, its sequences.

    Only what a test database needs; the record bytes come from the core's ``Record.seal``,
    which is agentplane's wire format byte for byte.
    """

    def __init__(self, conn: asyncpg.Connection, tenant: str) -> None:
        self.conn = conn
        self.tenant = tenant

    async def head(self, run: RunId) -> tuple[int, Digest]:
        row = await self.conn.fetchrow(
            "SELECT seq, hash FROM journal WHERE tenant = $1 AND run_id = $2 "
            "ORDER BY seq DESC LIMIT 1",
            self.tenant,
            str(run),
        )
        return (0, Digest.ZERO) if row is None else (row["seq"], Digest(bytes(row["hash"])))

    async def append(
        self, epoch: int, batch: Sequence[Append], signer: Ed25519Signer | None = None
    ) -> list[Record]:
        run = batch[0].run
        async with self.conn.transaction():
            seq, prev = await self.head(run)
            records, conclusion = [], None
            for item in batch:
                seq += 1
                record = Record.seal(item.body(seq, epoch), prev, signer)
                prev = record.hash
                att = record.attestation
                await self.conn.execute(
                    "INSERT INTO journal (tenant, run_id, seq, epoch, kind, effect_key, "
                    "prev_hash, hash, raw, key_id, signature, case_id) "
                    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                    self.tenant,
                    str(run),
                    seq,
                    epoch,
                    item.kind,
                    None if item.effect_key is None else item.effect_key.hex(),
                    bytes(record.prev_hash),
                    bytes(record.hash),
                    record.raw,
                    None if att is None else att.key_id,
                    None if att is None else att.signature,
                    None if item.case is None else str(item.case),
                )
                if item.kind == "RunSealed":
                    conclusion = item.payload["outcome"]
                records.append(record)
            await self.conn.execute(
                "INSERT INTO run_activity (tenant, run_id, updated_at) VALUES ($1, $2, $3) "
                "ON CONFLICT (tenant, run_id) DO UPDATE SET updated_at = EXCLUDED.updated_at",
                self.tenant,
                str(run),
                int(time.time()),
            )
            if conclusion is not None:
                await self.conn.execute(
                    "INSERT INTO run_outcome (tenant, run_id, outcome, ordinal) "
                    "VALUES ($1, $2, $3, nextval('run_conclusion_ordinal')) "
                    "ON CONFLICT (tenant, run_id) DO UPDATE "
                    "SET outcome = EXCLUDED.outcome, ordinal = EXCLUDED.ordinal",
                    self.tenant,
                    str(run),
                    conclusion,
                )
        return records

    async def acquire(self, run: RunId, owner: str, epoch: int, ttl: int) -> None:
        await self.conn.execute(
            "INSERT INTO run_lease (tenant, run_id, owner, epoch, expires_at) "
            "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant, run_id) DO UPDATE SET "
            "owner = EXCLUDED.owner, epoch = EXCLUDED.epoch, expires_at = EXCLUDED.expires_at",
            self.tenant,
            str(run),
            owner,
            epoch,
            int(time.time()) + ttl,
        )

    async def release(self, run: RunId, epoch: int) -> None:
        await self.conn.execute(
            "UPDATE run_lease SET owner = '', expires_at = 0 "
            "WHERE tenant = $1 AND run_id = $2 AND epoch = $3",
            self.tenant,
            str(run),
            epoch,
        )

    async def burn_log_positions(self, n: int) -> None:
        """Seals that rolled back: the global sequence moved, the log did not."""
        for _ in range(n):
            await self.conn.fetchval("SELECT nextval('run_log_position')")

    async def seal(self, run: RunId, outcome: str) -> Digest:
        _, head = await self.head(run)
        await self.conn.execute(
            "INSERT INTO run_seal (tenant, run_id, chain_head, log_index, sealed_at, outcome) "
            "VALUES ($1, $2, $3, nextval('run_log_position'), $4, $5) "
            "ON CONFLICT (tenant, run_id) DO NOTHING",
            self.tenant,
            str(run),
            bytes(head),
            int(time.time()),
            outcome,
        )
        return head

    async def request_cancel(self, run: RunId, actor: str, reason: str) -> None:
        await self.conn.execute(
            "INSERT INTO run_cancel (tenant, run_id, actor, reason, requested_at) "
            "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant, run_id) DO NOTHING",
            self.tenant,
            str(run),
            actor,
            reason,
            int(time.time()),
        )
