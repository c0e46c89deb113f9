"""The push store's values: registrations, their authentication, and the input checks.

Everything here is pure (no I/O). The checks refuse, with a ``ValueError``/``TypeError``
naming the argument, what the store must not write: a secret never appears in one of their
messages, and the value types never show a token or credentials in ``repr`` or ``str``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from agentplane_journal.core.checks import check_int, check_run, check_text
from agentplane_journal.core.ids import RunId

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_CONFIG_ID_CHARS",
    "MAX_ERROR_BYTES",
    "MAX_SCHEME_CHARS",
    "MAX_SECRET_CHARS",
    "MAX_URL_CHARS",
    "PushAuthentication",
    "PushConfig",
    "PushRegistration",
    "build_unchecked",
    "check_config_id",
    "clip_error",
    "url_problem",
]

#: Longest configuration id (characters).
MAX_CONFIG_ID_CHARS = 256
#: Longest webhook URL (characters).
MAX_URL_CHARS = 2048
#: Longest token or credentials (characters), before encrypting.
MAX_SECRET_CHARS = 8192
#: Longest authentication scheme (characters); an HTTP auth-scheme is one short token.
MAX_SCHEME_CHARS = 256
#: ``retry`` keeps at most this many UTF-8 bytes of the error; the rest is cut off.
MAX_ERROR_BYTES = 4096
#: ``attempts`` is a 32-bit INTEGER column; it saturates here instead of overflowing.
MAX_ATTEMPTS = 2**31 - 1

_REDACTED = "<redacted>"
# RFC 9110 `token`: what an Authorization header's scheme may be.
_SCHEME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


# -- argument checks (nothing here echoes a secret) -----------------------------------


def check_config_id(value: object, name: str = "config id") -> str:
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
    problem = url_problem(url)
    if problem is not None:
        raise ValueError(f"url {problem}")
    if urlsplit(url).password is not None:
        raise ValueError(
            "url must not carry a password (user:password@host): pass it as the token or "
            "the authentication, which are kept secret"
        )
    return url


def url_problem(url: str) -> str | None:
    """What makes ``url`` one the store must never deliver to, or ``None`` if it is fine.

    The rules a registration's url is held to, and a stored row's url is held to again on
    every read (someone with write access to the table can put anything there): an http or
    https URL naming a host, with no control character (header injection) or whitespace.
    Not the length limit or the password rule: rows agentplane wrote may break those and
    must still read. The answer never repeats the url (it may hold a password).
    """
    if not url:
        return "must not be empty"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in url):
        return "must not contain control characters"
    if any(c.isspace() for c in url):
        return "must not contain whitespace"
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (validates the port)
    except ValueError:
        # Not the parser's message: it can quote the port's text, which a hostile row chose.
        return "is not a valid URL (a bad port or IPv6 address)"
    if parts.scheme.lower() not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if not host:
        return "must name a host, as in https://receiver.example/hook"
    return None


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


def clip_error(error: object) -> str:
    if not isinstance(error, str):
        raise TypeError(f"error must be a string, not {type(error).__name__}")
    # Diagnostics, not data: a message from a failed HTTP call may hold anything, so it is
    # made storable (no NUL, no lone surrogates) and cut to size instead of refused.
    raw = error.replace("\x00", "\ufffd").encode("utf-8", "replace")[:MAX_ERROR_BYTES]
    return raw.decode("utf-8", "ignore")


_T = TypeVar("_T")


def build_unchecked(cls: type[_T], **fields: Any) -> _T:
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
        check_config_id(self.id)
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
    """A registration with its delivery state, as ``due`` and ``parked`` hand it out.

    ``next_seq`` is the first journal seq not yet acknowledged; ``attempts`` counts failed
    deliveries since the last success; ``next_attempt_at`` (seconds) is when it is due again.
    ``parked`` says delivery has stopped with the cursor kept (a receiver that answered
    permanently or outlasted the retry ceiling): ``due`` never serves such a registration,
    ``parked`` lists them, ``unpark`` re-arms one. It defaults to ``False``, so code that
    built the four-field value still does.
    """

    config: PushConfig
    next_seq: int
    attempts: int
    next_attempt_at: int
    last_error: str | None
    parked: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.config, PushConfig):
            raise TypeError(f"config must be a PushConfig, not {type(self.config).__name__}")
        check_int(self.next_seq, "next_seq")
        check_int(self.attempts, "attempts", maximum=MAX_ATTEMPTS)
        check_int(self.next_attempt_at, "next_attempt_at")
        if self.last_error is not None and not isinstance(self.last_error, str):
            raise TypeError("last_error must be a string or None")
        if not isinstance(self.parked, bool):
            raise TypeError(f"parked must be True or False, not {type(self.parked).__name__}")

    def __repr__(self) -> str:
        return (
            f"PushRegistration(config={self.config!r}, next_seq={self.next_seq}, "
            f"attempts={self.attempts}, next_attempt_at={self.next_attempt_at}, "
            f"last_error={self.last_error!r}, parked={self.parked})"
        )
