"""The push-delivery store: webhook registrations and their acknowledgement cursors.

agentplane uses the journal itself as the outbox. Each registration keeps ``next_seq``, the
first journal seq its receiver has not acknowledged; a worker delivers from there and
advances only after a 2xx, so a crash produces a duplicate delivery, never a lost one.

How the guarantees are made (each is one SQL statement, so concurrent callers commute):

* **The cursor never moves backwards.** ``advance`` is a single
  ``UPDATE .. SET next_seq = GREATEST(next_seq, :n)``: PostgreSQL re-evaluates the expression
  on the latest row version after waiting for the row lock, so K concurrent advances end at
  the maximum. A read-then-write in Python would let a slow advancer write an older value
  over a newer one, and the receiver would be sent records it already acknowledged forever.
* **``put`` keeps the cursor.** Its upsert replaces url and secrets but leaves ``next_seq``
  alone, so re-registering a receiver (or a ``put`` racing an ``advance``) never rewinds it.
* **Every retry is counted.** ``attempts`` is incremented in the UPDATE itself, so no retry
  is lost to a concurrent one (the backoff grows with it).

Secrets at rest. Tokens and credentials are what a database dump must not hand out. Given a
key, they are sealed with AES-256-GCM before they leave the process, with the row's
``(tenant, task_id, config_id, column)`` as associated data, so a value copied to another row,
column or tenant does not open. The stored text is self-describing,
``apj:v1:<key id>:<base64url(nonce || ciphertext)>``; anything without the ``apj:v<n>:``
prefix is plaintext (written without a key, or by agentplane itself) and still reads. A
sealed value that cannot be opened is :class:`SecretUnavailableError`, never garbage and
never a silent ``None``.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from sqlalchemy import and_, delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from .errors import BackendError
from .ids import DEFAULT_TENANT, RunId, validate_tenant
from .models import PushDelivery
from .repository import Repository, check_int, check_run, check_text
from .sealing import Keyring, keyring_from, open_secret, seal_secret

__all__ = [
    "MAX_CONFIG_ID_CHARS",
    "MAX_ERROR_BYTES",
    "MAX_SECRET_CHARS",
    "MAX_URL_CHARS",
    "Keyring",
    "PushAuthentication",
    "PushConfig",
    "PushRegistration",
    "PushStore",
    "SqlPushStore",
]

#: Longest configuration id (characters).
MAX_CONFIG_ID_CHARS = 256
#: Longest webhook URL (characters).
MAX_URL_CHARS = 2048
#: Longest token or credentials (characters), before sealing.
MAX_SECRET_CHARS = 8192
#: Longest authentication scheme (characters); an HTTP auth-scheme is one short token.
MAX_SCHEME_CHARS = 256
#: ``retry`` keeps at most this many UTF-8 bytes of the error; the rest is cut off.
MAX_ERROR_BYTES = 4096
#: ``attempts`` is a 32-bit INTEGER column; it saturates here instead of overflowing.
MAX_ATTEMPTS = 2**31 - 1

_TOKEN = "token"
_CREDENTIALS = "auth_credentials"
_REDACTED = "<redacted>"
# RFC 9110 `token`: what an Authorization header's scheme may be.
_SCHEME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


# -- argument checks (nothing here echoes a secret) -----------------------------------


def _check_config_id(value: object, name: str = "config id") -> str:
    return check_text(value, name, max_len=MAX_CONFIG_ID_CHARS)


def _no_controls(value: str, name: str) -> None:
    # Tokens, credentials and URLs end up in HTTP request lines and headers: a CR or LF
    # there is header injection, so control characters are refused, not escaped.
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in value):
        raise ValueError(f"{name} must not contain control characters")


def _check_secret(value: object, name: str) -> str:
    value = check_text(value, name, max_len=MAX_SECRET_CHARS)
    _no_controls(value, name)
    return value


def _check_url(value: object) -> str:
    url = check_text(value, "url", max_len=MAX_URL_CHARS)
    _no_controls(url, "url")
    if any(c.isspace() for c in url):
        raise ValueError("url must not contain whitespace")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (validates the port)
    except ValueError as exc:
        raise ValueError(f"url is not a valid URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError("url must be an http:// or https:// URL")
    if not host:
        raise ValueError("url must name a host, as in https://receiver.example/hook")
    if parts.password is not None:
        raise ValueError(
            "url must not carry a password (user:password@host): pass it as the token or "
            "the authentication, which are kept secret"
        )
    return url


def _display_url(url: str) -> str:
    """The URL for a repr, with any password (possible in rows written elsewhere) masked."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)[1]
        return parts._replace(netloc=f"{parts.username}:{_REDACTED}@{netloc}").geturl()
    except ValueError:
        return "<unparsable url>"


def _clip_error(error: object) -> str:
    if not isinstance(error, str):
        raise TypeError(f"error must be a string, not {type(error).__name__}")
    # Diagnostics, not data: a message from a failed HTTP call may hold anything, so it is
    # made storable (no NUL, no lone surrogates) and cut to size instead of refused.
    raw = error.replace("\x00", "\ufffd").encode("utf-8", "replace")[:MAX_ERROR_BYTES]
    return raw.decode("utf-8", "ignore")


def _build(cls: type[Any], **fields: Any) -> Any:
    """A value read back from the database, without re-validating it.

    Rows written by agentplane itself (or an older version) may not meet this version's
    input limits; they must still read.
    """
    obj = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(obj, name, value)
    return obj


# -- value types ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, repr=False)
class PushAuthentication:
    """How to authenticate to the receiver: ``Authorization: <scheme> <credentials>``."""

    scheme: str
    credentials: str

    def __post_init__(self) -> None:
        scheme = check_text(self.scheme, "authentication scheme", max_len=MAX_SCHEME_CHARS)
        if not _SCHEME.fullmatch(scheme):
            raise ValueError(
                "authentication scheme must be a single HTTP token such as 'Bearer' or 'Basic'"
            )
        _check_secret(self.credentials, "authentication credentials")

    def __repr__(self) -> str:
        return f"PushAuthentication(scheme={self.scheme!r}, credentials={_REDACTED})"


@dataclass(frozen=True, slots=True, repr=False)
class PushConfig:
    """One webhook registration of a task: where to deliver and how to authenticate.

    ``task`` is a :class:`RunId` (its text form ``run_<ULID>`` is accepted). ``token`` and the
    authentication's credentials are secrets: they never appear in ``repr`` or ``str``.
    """

    id: str
    task: RunId
    url: str
    token: str | None = None
    authentication: PushAuthentication | None = None

    def __post_init__(self) -> None:
        _check_config_id(self.id)
        object.__setattr__(self, "task", check_run(self.task, "task"))
        _check_url(self.url)
        if self.token is not None:
            _check_secret(self.token, "token")
        if self.authentication is not None and not isinstance(
            self.authentication, PushAuthentication
        ):
            raise TypeError(
                "authentication must be a PushAuthentication or None, not "
                f"{type(self.authentication).__name__}"
            )

    def __repr__(self) -> str:
        token = "None" if self.token is None else _REDACTED
        return (
            f"PushConfig(id={self.id!r}, task={self.task!r}, url={_display_url(self.url)!r}, "
            f"token={token}, authentication={self.authentication!r})"
        )


@dataclass(frozen=True, slots=True, repr=False)
class PushRegistration:
    """A registration with its delivery state, as ``due`` hands it to a worker.

    ``next_seq`` is the first journal seq not yet acknowledged; ``attempts`` counts failed
    deliveries since the last success; ``next_attempt_at`` (seconds) is when it is due again.
    """

    config: PushConfig
    next_seq: int
    attempts: int
    next_attempt_at: int
    last_error: str | None

    def __post_init__(self) -> None:
        if not isinstance(self.config, PushConfig):
            raise TypeError(f"config must be a PushConfig, not {type(self.config).__name__}")
        check_int(self.next_seq, "next_seq")
        check_int(self.attempts, "attempts", maximum=MAX_ATTEMPTS)
        check_int(self.next_attempt_at, "next_attempt_at")
        if self.last_error is not None and not isinstance(self.last_error, str):
            raise TypeError("last_error must be a string or None")

    def __repr__(self) -> str:
        return (
            f"PushRegistration(config={self.config!r}, next_seq={self.next_seq}, "
            f"attempts={self.attempts}, next_attempt_at={self.next_attempt_at}, "
            f"last_error={self.last_error!r})"
        )


# -- the store --------------------------------------------------------------------------


@runtime_checkable
class PushStore(Protocol):
    """agentplane's push-delivery store contract (see ``store-contract.md``).

    (``builtins.list`` in annotations: inside these classes ``list`` is the method.)
    """

    tenant: str

    def for_tenant(self, name: str) -> PushStore: ...
    async def put(self, config: PushConfig, next_seq: int) -> None: ...
    async def get(self, task: RunId, id: str) -> PushConfig | None: ...
    async def list(self, task: RunId) -> builtins.list[PushConfig]: ...
    async def due(self, at: int, limit: int) -> builtins.list[PushRegistration]: ...
    async def advance(self, task: RunId, id: str, next_seq: int) -> None: ...
    async def retry(self, task: RunId, id: str, next_attempt_at: int, error: str) -> None: ...
    async def delete(self, task: RunId, id: str) -> None: ...


_COLUMNS = (
    PushDelivery.task_id,
    PushDelivery.config_id,
    PushDelivery.url,
    PushDelivery.token,
    PushDelivery.auth_scheme,
    PushDelivery.auth_credentials,
)


class SqlPushStore(Repository):
    """agentplane's push-delivery store over SQLAlchemy's async engine (PostgreSQL or SQLite).

    Build it over an existing ``AsyncEngine`` or open one with :meth:`connect`; like the
    journal store it never creates tables and refuses an out-of-date schema. With
    ``secret_key=`` (32 bytes) or ``keyring=`` (a :class:`Keyring`), tokens and credentials
    are sealed at rest; without, they are stored as agentplane stores them, in plain text.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        tenant: str = DEFAULT_TENANT,
        secret_key: bytes | None = None,
        keyring: Keyring | None = None,
        clock: Callable[[], float] | None = None,
        _shared: Any = None,
    ) -> None:
        self._keyring = keyring_from(secret_key, keyring)
        super().__init__(engine, tenant=tenant, clock=clock, _shared=_shared)

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        tenant: str = DEFAULT_TENANT,
        secret_key: bytes | None = None,
        keyring: Keyring | None = None,
        clock: Callable[[], float] | None = None,
        engine_options: dict[str, Any] | None = None,
    ) -> SqlPushStore:
        """Open a store from a URL; the engine is the store's own (see :meth:`close`).

        The engine hides bound parameters from its error messages and logs
        (``hide_parameters``), so a failed statement cannot print a token.
        """
        keyring = keyring_from(secret_key, keyring)  # refuse a bad key before connecting
        return await cls._open(url, engine_options, tenant=tenant, keyring=keyring, clock=clock)

    def for_tenant(self, name: str) -> SqlPushStore:
        """A handle on the same engine and keys whose every statement carries ``name``."""
        return SqlPushStore(
            self._shared.engine,
            tenant=validate_tenant(name),
            keyring=self._keyring,
            clock=self._clock,
            _shared=self._shared,
        )

    @property
    def key_id(self) -> str | None:
        """The id new secrets are sealed under, or ``None`` when they are stored in plain text."""
        return None if self._keyring is None else self._keyring.current

    # -- helpers ------------------------------------------------------------------------

    def _where(self, task_id: str, config_id: str) -> Any:
        return and_(
            PushDelivery.tenant == self.tenant,
            PushDelivery.task_id == task_id,
            PushDelivery.config_id == config_id,
        )

    def _config(self, row: Any) -> PushConfig:
        try:
            task = RunId.parse(row.task_id)
        except ValueError:
            raise BackendError(
                f"push_delivery row {row.config_id!r} has task_id {row.task_id!r}, which is "
                "not a run id (run_<ULID>)"
            ) from None
        where = {"tenant": self.tenant, "task_id": row.task_id, "config_id": row.config_id}
        token = open_secret(self._keyring, row.token, column=_TOKEN, **where)
        authentication = None
        if row.auth_scheme is not None and row.auth_credentials is not None:
            credentials = open_secret(
                self._keyring, row.auth_credentials, column=_CREDENTIALS, **where
            )
            authentication = _build(
                PushAuthentication, scheme=row.auth_scheme, credentials=credentials
            )
        return _build(
            PushConfig,
            id=row.config_id,
            task=task,
            url=row.url,
            token=token,
            authentication=authentication,
        )

    async def _read(self, stmt: Any) -> Sequence[Any]:
        async def unit(session: AsyncSession) -> Sequence[Any]:
            return (await session.execute(stmt)).all()

        return await self._unit(unit, read_only=True)

    async def _write(self, stmt: Any) -> None:
        async def unit(session: AsyncSession) -> None:
            await session.execute(stmt)

        await self._unit(unit)

    # -- the contract -------------------------------------------------------------------

    async def put(self, config: PushConfig, next_seq: int) -> None:
        """Register ``config``, or replace its url and secrets while keeping its cursor.

        A new registration starts at ``next_seq``; an existing one keeps its own (the
        receiver has acknowledged up to there) and is due at once: attempts, backoff and the
        last error are reset.
        """
        if not isinstance(config, PushConfig):
            raise TypeError(f"config must be a PushConfig, not {type(config).__name__}")
        next_seq = check_int(next_seq, "next_seq")
        task_id = str(config.task)
        where = {"tenant": self.tenant, "task_id": task_id, "config_id": config.id}
        auth = config.authentication
        token = seal_secret(self._keyring, config.token, column=_TOKEN, **where)
        credentials = seal_secret(
            self._keyring, None if auth is None else auth.credentials, column=_CREDENTIALS, **where
        )
        stmt = self._dialect.insert(PushDelivery).values(
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
            },
        )
        await self._write(stmt)

    async def get(self, task: RunId | str, id: str) -> PushConfig | None:
        """One registration's configuration, or ``None``."""
        task_id, config_id = str(check_run(task, "task")), _check_config_id(id)
        rows = await self._read(select(*_COLUMNS).where(self._where(task_id, config_id)))
        return self._config(rows[0]) if rows else None

    async def list(self, task: RunId | str) -> builtins.list[PushConfig]:
        """Every registration of ``task``, ordered by config id."""
        task_id = str(check_run(task, "task"))
        stmt = (
            select(*_COLUMNS)
            .where(PushDelivery.tenant == self.tenant, PushDelivery.task_id == task_id)
            .order_by(PushDelivery.config_id)
        )
        return [self._config(row) for row in await self._read(stmt)]

    async def due(self, at: int, limit: int) -> builtins.list[PushRegistration]:
        """Registrations due at ``at``, by (next_attempt_at, task, config id), at most ``limit``.

        Nothing is locked: two workers may both deliver one registration. Delivery is at
        least once; the receiver sees duplicates, never gaps.
        """
        at, limit = check_int(at, "at"), check_int(limit, "limit")
        stmt = (
            select(
                *_COLUMNS,
                PushDelivery.next_seq,
                PushDelivery.attempts,
                PushDelivery.next_attempt_at,
                PushDelivery.last_error,
            )
            .where(PushDelivery.tenant == self.tenant, PushDelivery.next_attempt_at <= at)
            .order_by(PushDelivery.next_attempt_at, PushDelivery.task_id, PushDelivery.config_id)
            .limit(limit)
        )
        return [
            _build(
                PushRegistration,
                config=self._config(row),
                next_seq=row.next_seq,
                attempts=row.attempts,
                next_attempt_at=row.next_attempt_at,
                last_error=row.last_error,
            )
            for row in await self._read(stmt)
        ]

    async def advance(self, task: RunId | str, id: str, next_seq: int) -> None:
        """Record an acknowledgement: cursor = max(cursor, ``next_seq``); reset the backoff.

        A lower ``next_seq`` (a late, duplicate acknowledgement) leaves the cursor but still
        resets attempts: the receiver answered. An unknown registration is a no-op.
        """
        task_id, config_id = str(check_run(task, "task")), _check_config_id(id)
        next_seq = check_int(next_seq, "next_seq")
        # One statement: concurrent advances wait on the row lock and each re-evaluates
        # GREATEST against the latest committed cursor, so the largest always survives.
        await self._write(
            update(PushDelivery)
            .where(self._where(task_id, config_id))
            .values(
                next_seq=self._dialect.greatest(PushDelivery.next_seq, next_seq),
                attempts=0,
                next_attempt_at=0,
                last_error=None,
            )
        )

    async def retry(self, task: RunId | str, id: str, next_attempt_at: int, error: str) -> None:
        """Record a failed delivery: one more attempt, due again at ``next_attempt_at``.

        The cursor is untouched. ``error`` is kept (cut to :data:`MAX_ERROR_BYTES`). An unknown
        registration is a no-op.
        """
        task_id, config_id = str(check_run(task, "task")), _check_config_id(id)
        next_attempt_at = check_int(next_attempt_at, "next_attempt_at")
        error = _clip_error(error)
        # Incremented in the UPDATE, so concurrent retries each count. LEAST is taken before
        # the +1: 0.4.0's LEAST(attempts + 1, 2^31-1) overflows INTEGER at the cap.
        attempts = self._dialect.least(PushDelivery.attempts, MAX_ATTEMPTS - 1) + 1
        await self._write(
            update(PushDelivery)
            .where(self._where(task_id, config_id))
            .values(attempts=attempts, next_attempt_at=next_attempt_at, last_error=error)
        )

    async def delete(self, task: RunId | str, id: str) -> None:
        """Remove a registration; removing one that is not there is fine."""
        task_id, config_id = str(check_run(task, "task")), _check_config_id(id)
        await self._write(delete(PushDelivery).where(self._where(task_id, config_id)))

    async def reseal(self) -> int:
        """Re-seal this tenant's secrets under the current key; return the rows rewritten.

        After adding a new current key to the keyring, this moves rows off the old key (and
        seals plaintext rows) without touching cursors or backoff, so the old key can then be
        retired. Each row is rewritten only if it has not changed since it was read, so a
        concurrent ``put`` wins. Without a key it does nothing.
        """
        keyring = self._keyring
        if keyring is None:
            return 0
        prefix = f"apj:v1:{keyring.current}:"

        def stale(value: str | None) -> bool:
            return value is not None and not value.startswith(prefix)

        rows = await self._read(
            select(
                PushDelivery.task_id,
                PushDelivery.config_id,
                PushDelivery.token,
                PushDelivery.auth_credentials,
            ).where(PushDelivery.tenant == self.tenant)
        )
        rewritten = 0
        for row in rows:
            if not (stale(row.token) or stale(row.auth_credentials)):
                continue
            new: dict[str, str | None] = {}
            for column, value in ((_TOKEN, row.token), (_CREDENTIALS, row.auth_credentials)):
                where = {"tenant": self.tenant, "task_id": row.task_id, "config_id": row.config_id}
                plain = open_secret(keyring, value, column=column, **where)
                new[column] = seal_secret(keyring, plain, column=column, **where)

            async def unit(session: AsyncSession, row: Any = row, new: Any = new) -> int:
                result = await session.execute(
                    update(PushDelivery)
                    .where(
                        self._where(row.task_id, row.config_id),
                        PushDelivery.token.is_not_distinct_from(row.token),
                        PushDelivery.auth_credentials.is_not_distinct_from(row.auth_credentials),
                    )
                    .values(new)
                )
                return int(result.rowcount or 0)  # type: ignore[attr-defined]

            rewritten += await self._unit(unit)
        return rewritten
