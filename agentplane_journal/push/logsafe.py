"""Keeping push secrets out of the drivers' logs.

Three loggers can print what a statement carries, whatever ``hide_parameters`` says:

* ``sqlalchemy.engine.Engine`` (INFO) prints bound parameters unless the engine hides them,
  and (DEBUG) every result row, which ``hide_parameters`` does not hide;
* ``aiosqlite`` (DEBUG) prints every call it runs, bound parameters included;
* ``asyncpg`` logs only pool warnings, never a statement or its parameters.

With a key the push store is safe by construction: a token or credentials is encrypted before
it is bound and opened after it is fetched, so parameters and rows only ever hold
``apj:v<n>:`` envelopes, and key material never leaves :mod:`.encrypting`. Without a key (the
plaintext format agentplane 0.4.0 uses) the secret must travel through the driver, so the
push store installs :class:`PushLogFilter` on the engine's logger and on ``aiosqlite``. It
changes nothing but push statements: SQLAlchemy records made while a push-store call runs
(a context variable, which SQLAlchemy carries into its greenlet) lose their parameters and
rows, and aiosqlite records of statements on ``push_delivery`` (aiosqlite logs from its own
thread, where the context variable is not visible) lose their parameters. The SQL text and
timings stay, so the logs remain useful.

Exceptions are the other way out: a SQLAlchemy ``StatementError`` prints its parameters
unless its engine hides them, and a host that logs an error with its traceback prints the
whole ``__cause__`` chain. :func:`scrub` makes every statement error in a push-store
exception's chain forget its parameters before the exception leaves the store.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeGuard

from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.log import InstanceLogger

from agentplane_journal.db.dialect import dialect_for

__all__ = ["PushLogFilter", "install", "push_statements", "scrub"]

_IN_PUSH = contextvars.ContextVar("agentplane_journal_push_call", default=False)
_HIDDEN_PARAMETERS = "[parameters hidden: push delivery]"
_HIDDEN_ROW = "(row hidden: push delivery)"
_TABLE = "push_delivery"


@contextmanager
def push_statements() -> Iterator[None]:
    """Mark the statements run inside as the push store's (their logs lose values)."""
    token = _IN_PUSH.set(True)
    try:
        yield
    finally:
        _IN_PUSH.reset(token)


class _HiddenCall:
    """An aiosqlite call shown without its arguments beyond the SQL text."""

    __slots__ = ("_text",)

    def __init__(self, call: functools.partial[Any]) -> None:
        name = getattr(call.func, "__name__", type(call.func).__name__)
        sql = next((a for a in call.args if isinstance(a, str)), "")
        self._text = f"{name}({sql!r}, {_HIDDEN_PARAMETERS})"

    def __repr__(self) -> str:
        return self._text

    __str__ = __repr__


def _is_push_call(arg: object) -> TypeGuard[functools.partial[Any]]:
    return isinstance(arg, functools.partial) and any(
        isinstance(a, str) and _TABLE in a for a in arg.args
    )


class PushLogFilter(logging.Filter):
    """Strips push statements' parameters and rows from driver log records (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or not args:
            return True
        if record.name == "aiosqlite" or record.name.startswith("aiosqlite."):
            if any(_is_push_call(a) for a in args):
                record.args = tuple(_HiddenCall(a) if _is_push_call(a) else a for a in args)
            return True
        if _IN_PUSH.get():
            message = str(record.msg)
            if "Row %r" in message:
                record.args = (_HIDDEN_ROW,)
            elif message.endswith("] %r"):  # "[<stats>] <parameters>"
                record.args = (*args[:-1], _HIDDEN_PARAMETERS)
        return True


_FILTER = PushLogFilter()


def _logger_of(engine: AsyncEngine) -> logging.Logger:
    logger = engine.sync_engine.logger
    # An engine made with echo= or logging_name= wraps its logger in an InstanceLogger.
    return logger.logger if isinstance(logger, InstanceLogger) else logger


def install(engine: AsyncEngine) -> None:
    """Put the filter on ``engine``'s SQLAlchemy logger and on ``aiosqlite`` (idempotent)."""
    loggers = [_logger_of(engine)]
    loggers += [logging.getLogger(name) for name in dialect_for(engine).driver_loggers]
    for logger in loggers:
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def scrub(error: BaseException) -> None:
    """Drop the bound parameters of every statement error in ``error``'s cause chain."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StatementError):
            current.hide_parameters = True
            current.params = None
        current = current.__cause__ or current.__context__
