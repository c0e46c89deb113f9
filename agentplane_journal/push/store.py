"""The push-delivery store: webhook registrations and their acknowledgement cursors.

agentplane uses the journal itself as the outbox. Each registration keeps ``next_seq``, the
first journal seq its receiver has not acknowledged; a worker delivers from there and
advances only after a 2xx, so a crash produces a duplicate delivery, never a lost one.

The store registers receivers and reads their configurations back; what a delivery worker
runs (``due``, ``advance``, ``retry``, and parking: ``park``, ``parked``, ``unpark``) is its
base, :class:`~agentplane_journal.push.queue.DeliveryQueue`, which says how each guarantee
is made. Here: **``put`` keeps the cursor.** Its upsert replaces url and secrets but leaves
``next_seq`` alone, so re-registering a receiver (or a ``put`` racing an ``advance``) never
rewinds it. **``delete`` drops the cursor**, so it is an operator's explicit removal; a
worker giving up on a receiver parks it instead.

Secrets at rest. Tokens and credentials are what a database dump must not hand out. Given a
key, they are encrypted with AES-256-GCM before they leave the process, bound (associated data)
to the row's tenant, task, config id, column, ``url``, ``auth_scheme`` and whether it has
credentials, so a value copied elsewhere, or a row pointed at another host, does not open
(see :mod:`~agentplane_journal.push.secretbox`); a keyed row always holds an encrypted token
column (an absence marker without a token), so blanking a secret is seen, not served as
"no authentication" (see :mod:`~agentplane_journal.push.secrets`). A store with a key
refuses plaintext in an encrypted column, or an empty token column (a downgrade), unless told
``accept_plaintext=True``; a store without a key reads and writes plaintext, as agentplane
0.4.0 does. A value that cannot be opened is :class:`SecretUnavailableError`, never garbage
and never a silent ``None``; ``due`` and ``list`` serve the other rows and name it in
``.unavailable`` (see :mod:`~agentplane_journal.push.rows`). No secret reaches a log (see
:mod:`~agentplane_journal.push.logsafe`).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import delete, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from agentplane_journal.core.checks import check_int, check_run
from agentplane_journal.core.ids import DEFAULT_TENANT, RunId, validate_tenant
from agentplane_journal.db.models import PushDelivery
from agentplane_journal.errors import StoreError
from agentplane_journal.push import logsafe as logsafe
from agentplane_journal.push.queue import COLUMNS, DeliveryQueue
from agentplane_journal.push.rows import (
    PushListing,
    ReencryptReport,
    UnreadableRegistration,
    check_row,
)
from agentplane_journal.push.secretbox import Keyring, keyring_from
from agentplane_journal.push.secrets import CREDENTIALS, TOKEN, Binding, RowSecrets
from agentplane_journal.push.values import PushConfig
from agentplane_journal.push.values import check_config_id as _check_config_id

__all__ = [
    "SqlPushStore",
]

# -- the store --------------------------------------------------------------------------


class SqlPushStore(DeliveryQueue):
    """agentplane's push-delivery store over SQLAlchemy's async engine (PostgreSQL or SQLite).

    Build it over an existing ``AsyncEngine`` or open one with :meth:`connect`; like the
    journal store it never creates tables and refuses an out-of-date schema. With
    ``secret_key=`` (32 bytes) or ``keyring=`` (a :class:`Keyring`), tokens and credentials
    are encrypted at rest and a plaintext value in their columns is refused (a downgrade)
    unless ``accept_plaintext=True`` (adopting agentplane's rows: then :meth:`re-encrypt`).
    Without a key they are stored as agentplane stores them, in plain text, and an encrypted
    value is :class:`SecretUnavailableError`.

    Every method takes ``session=``, the host's own ``AsyncSession``, as the journal store's
    do: its transaction, no commit.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        tenant: str = DEFAULT_TENANT,
        secret_key: bytes | None = None,
        keyring: Keyring | None = None,
        accept_plaintext: bool = False,
        schema: str | None = None,
        clock: Callable[[], float] | None = None,
        _shared: Any = None,
    ) -> None:
        self._keyring = keyring_from(secret_key, keyring)
        if not isinstance(accept_plaintext, bool):
            raise TypeError("accept_plaintext must be True or False")
        self._accept_plaintext = accept_plaintext
        super().__init__(engine, tenant=tenant, schema=schema, clock=clock, _shared=_shared)
        self._rows = RowSecrets(self._keyring, self.tenant, accept_plaintext)
        logsafe.install(engine)

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        tenant: str = DEFAULT_TENANT,
        secret_key: bytes | None = None,
        keyring: Keyring | None = None,
        accept_plaintext: bool = False,
        schema: str | None = None,
        clock: Callable[[], float] | None = None,
        engine_options: dict[str, Any] | None = None,
    ) -> SqlPushStore:
        """Open a store from a URL; the engine is the store's own (see :meth:`close`).

        The engine hides bound parameters from its error messages and logs
        (``hide_parameters``), so a failed statement cannot print a token.
        """
        keyring = keyring_from(secret_key, keyring)  # refuse a bad key before connecting
        return await cls._open(
            url,
            engine_options,
            tenant=tenant,
            keyring=keyring,
            accept_plaintext=accept_plaintext,
            schema=schema,
            clock=clock,
        )

    def for_tenant(self, name: str) -> SqlPushStore:
        """A handle on the same engine and keys whose every statement carries ``name``."""
        return SqlPushStore(
            self._shared.engine,
            tenant=validate_tenant(name),
            keyring=self._keyring,
            accept_plaintext=self._accept_plaintext,
            clock=self._clock,
            _shared=self._shared,
        )

    @property
    def key_id(self) -> str | None:
        """The id new secrets are encrypted under; ``None``: they are stored in plain text."""
        return None if self._keyring is None else self._keyring.current

    # -- the contract -------------------------------------------------------------------

    async def put(
        self, config: PushConfig, next_seq: int, *, session: AsyncSession | None = None
    ) -> None:
        """Register ``config``, or replace its url and secrets while keeping its cursor.

        A new registration starts at ``next_seq``; an existing one keeps its own (the
        receiver has acknowledged up to there) and is due at once: attempts, backoff and the
        last error are reset, and a parked one is re-armed (re-registering a receiver is
        asking for its events again).
        """
        if not isinstance(config, PushConfig):
            raise TypeError(f"config must be a PushConfig, not {type(config).__name__}")
        next_seq = check_int(next_seq, "next_seq")
        task_id = str(config.task)
        auth = config.authentication
        plain = None if auth is None else auth.credentials
        row = Binding(task_id, config.id, config.url, None if auth is None else auth.scheme, plain)
        token = self._rows.encrypt(row, TOKEN, config.token)
        credentials = self._rows.encrypt(row, CREDENTIALS, plain)
        stmt = self.dialect.insert(PushDelivery).values(
            tenant=self.tenant,
            task_id=task_id,
            config_id=config.id,
            url=config.url,
            token=token,
            auth_scheme=None if auth is None else auth.scheme,
            auth_credentials=credentials,
            next_seq=next_seq,
            attempts=0,
            next_attempt_at=0,
            last_error=None,
            parked=False,
        )
        # next_seq is deliberately absent from the SET list: the stored cursor wins.
        stmt = stmt.on_conflict_do_update(
            index_elements=[PushDelivery.tenant, PushDelivery.task_id, PushDelivery.config_id],
            set_={
                "url": stmt.excluded.url,
                "token": stmt.excluded.token,
                "auth_scheme": stmt.excluded.auth_scheme,
                "auth_credentials": stmt.excluded.auth_credentials,
                "attempts": 0,
                "next_attempt_at": 0,
                "last_error": None,
                "parked": False,
            },
        )
        await self._write(stmt, session)

    async def get(
        self, task: RunId | str, id: str, *, session: AsyncSession | None = None
    ) -> PushConfig | None:
        """One registration's configuration, or ``None``.

        A row that cannot be read raises its reason (:class:`SecretUnavailableError`,
        :class:`CorruptRegistrationError`): the caller asked for that row, and ``None`` would
        claim it is not registered.
        """
        task_id, config_id = str(check_run(task, "task")), _check_config_id(id)
        rows = await self._read(select(*COLUMNS).where(self._where(task_id, config_id)), session)
        return self._rows.config(rows[0]) if rows else None

    async def list(
        self, task: RunId | str, *, session: AsyncSession | None = None
    ) -> PushListing[PushConfig]:
        """Every readable registration of ``task``, ordered by config id.

        Rows that cannot be read are left out and named in ``.unavailable`` (and logged).
        """
        task_id = str(check_run(task, "task"))
        stmt = (
            select(*COLUMNS)
            .where(PushDelivery.tenant == self.tenant, PushDelivery.task_id == task_id)
            .order_by(PushDelivery.config_id)
        )
        good: builtins.list[PushConfig] = []
        bad: builtins.list[UnreadableRegistration] = []
        for row in await self._read(stmt, session):
            try:
                good.append(self._rows.config(row))
            except StoreError as exc:
                bad.append(self._unreadable(row, exc, "left out of list()"))
        return PushListing(good, bad)

    async def delete(
        self, task: RunId | str, id: str, *, session: AsyncSession | None = None
    ) -> None:
        """Remove a registration and its cursor; removing one that is not there is fine.

        An operator's explicit removal (the receiver is gone for good, the run is retired).
        A worker giving up on a receiver must :meth:`park` instead: the row is the only
        record of how far that receiver got, and deleting it loses the undelivered tail.
        """
        task_id, config_id = str(check_run(task, "task")), _check_config_id(id)
        await self._write(delete(PushDelivery).where(self._where(task_id, config_id)), session)

    async def reencrypt(self, *, session: AsyncSession | None = None) -> ReencryptReport:
        """Re-encrypt this tenant's secrets under the current key and format; report what it did.

        After adding a new current key to the keyring, this moves rows off the old key,
        rewrites format-v1 and v2 values as v3 (binding them to the row's url, auth_scheme
        and secrets as they are now), and, with ``accept_plaintext=True``, encrypts plaintext
        rows and gives rows without a token the encrypted absence marker, all without
        touching cursors or backoff, so the old key can then be retired. A row it cannot
        open is left as it is and named in the report's ``unavailable`` (and logged); the
        others are reencrypted all the same. Each row is rewritten only if it has not changed
        since it was read, so a concurrent ``put`` wins (counted as ``changed``).

        Raises ``ValueError`` on a store without a key: there is nothing to encrypt under.
        """
        keyring = self._keyring
        if keyring is None:
            raise ValueError(
                "reencrypt() encrypts under the store's current key, and this store has none; "
                "open it with secret_key= or keyring="
            )
        rows = await self._read(select(*COLUMNS).where(PushDelivery.tenant == self.tenant), session)
        reencrypted = current = changed = 0
        bad: builtins.list[UnreadableRegistration] = []
        for row in rows:
            try:
                check_row(row, cursor=False)
                if self._rows.current(row):
                    # Still opened: a current-looking value may be forged or moved.
                    self._rows.open(row, TOKEN, row.token)
                    self._rows.open(row, CREDENTIALS, row.auth_credentials)
                    current += 1
                    continue
                new = {
                    column: self._rows.encrypt(row, column, self._rows.open(row, column, value))
                    for column, value in ((TOKEN, row.token), (CREDENTIALS, row.auth_credentials))
                }
            except StoreError as exc:
                bad.append(self._unreadable(row, exc, "not reencrypted"))
                continue

            async def unit(session: AsyncSession, row: Any = row, new: Any = new) -> int:
                # An UPDATE's result is a CursorResult (AsyncSession.execute is typed Result).
                result = await session.execute(
                    update(PushDelivery)
                    .where(
                        self._where(row.task_id, row.config_id),
                        PushDelivery.url == row.url,
                        PushDelivery.auth_scheme.is_not_distinct_from(row.auth_scheme),
                        PushDelivery.token.is_not_distinct_from(row.token),
                        PushDelivery.auth_credentials.is_not_distinct_from(row.auth_credentials),
                    )
                    .values(new)
                )
                return int(cast("CursorResult[Any]", result).rowcount or 0)

            if await self.unit(unit, session=session):
                reencrypted += 1
            else:
                changed += 1
        return ReencryptReport(reencrypted, current, changed, tuple(bad))
