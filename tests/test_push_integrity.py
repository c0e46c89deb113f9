"""Push secrets under an attacker who can write the database: the battery, on both dialects.

What a row's secret is bound to (url and auth_scheme too), the previous sealed format still
reading, plaintext refused where a sealed value belongs, bad rows reported instead of
stopping a tenant, ``reencrypt()``'s report, and no secret in any log with every logger at
DEBUG (``no_secret_in_logs``, as in ``test_push.py``).
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import traceback
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal import (
    BackendError,
    CorruptRegistrationError,
    RunId,
    SecretUnavailableError,
    configure_engine,
)
from agentplane_journal.push import logsafe as logsafe
from agentplane_journal.push.rows import PushListing, ReencryptReport
from agentplane_journal.push.secretbox import Keyring
from agentplane_journal.push.store import SqlPushStore

from support import logcheck
from support.checks_tools import around_checks
from support.logcheck import Capture, leaks, no_secret_logged
from support.push import (
    CREDENTIALS,
    KEYS,
    SECRETS,
    TOKEN,
    URL,
    config,
    full,
    insert_plaintext_row,
    key,
    raw_row,
    sql,
    state,
)
from support.stores import store_factory

EVIL = "https://attacker.example/hook"


@pytest.fixture(autouse=True)
def no_secret_in_logs() -> Iterator[Capture]:
    """As in ``test_push.py``: every logger at DEBUG, and no secret in any record."""
    with no_secret_logged(SECRETS, KEYS) as capture:
        yield capture


@pytest.fixture
async def make_push(database_url: str, clock: Any) -> AsyncIterator[Callable[..., Any]]:
    async with store_factory(
        SqlPushStore, database_url, f"t{uuid.uuid4().hex[:12]}", clock
    ) as make:
        yield make


async def set_column(store: SqlPushStore, id: str, column: str, value: Any) -> None:
    """``UPDATE push_delivery SET <column> = :v`` for one config id of the store's tenant
    (a negative number around the column's CHECK, as an attacker would have to)."""
    statement = f"UPDATE push_delivery SET {column} = :v WHERE tenant = :t AND config_id = :id"
    params = {"v": value, "t": store.tenant, "id": id}
    if type(value) is int and value < 0:
        await around(store, statement, **params)
        return
    await sql(store, statement, **params)


async def around(store: SqlPushStore, statement: str, **params: Any) -> None:
    """``statement`` past push_delivery's CHECKs (which PostgreSQL checks on every row an
    UPDATE writes, a bad row left by an earlier edit included)."""
    with logcheck.current().paused():
        async with store.engine.begin() as conn, around_checks(conn, "push_delivery"):
            await conn.execute(text(statement), params)


def seal_v1(
    key: bytes, key_id: str, plain: str, *, tenant: str, task: RunId, id: str, column: str
) -> str:
    """A value as the previous version (format v1) sealed it: tenant, task, id, column only."""
    aad = bytearray(b"agentplane_journal/push-secret/v1")
    for part in (tenant, str(task), id, column):
        data = part.encode()
        aad += len(data).to_bytes(4, "big") + data
    nonce = os.urandom(12)
    sealed = AESGCM(key).encrypt(nonce, plain.encode(), bytes(aad))
    return f"apj:v1:{key_id}:" + base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode()


# -- what a secret is bound to ------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("url", EVIL),
        ("url", "https://RECEIVER.example/hook"),  # bound byte for byte
        ("url", URL + "?"),
        ("auth_scheme", "Basic"),
        ("auth_scheme", None),
    ],
)
async def test_a_rewritten_url_or_auth_scheme_does_not_open(
    make_push: Callable[..., Any], column: str, value: Any
) -> None:
    push = await make_push(secret_key=key())
    task = RunId.generate()
    await push.put(full(task), 1)
    await push.put(full(task, "bystander"), 1)
    original = getattr(await raw_row(push, task), column)

    await set_column(push, "cfg", column, value)
    with pytest.raises(SecretUnavailableError, match="url or auth_scheme was rewritten") as info:
        await push.get(task, "cfg")
    err = info.value
    assert (err.key_id, err.column) == (push.key_id, "token")
    assert str(push.key_id) in str(err) and "token" in str(err)
    for leak in (TOKEN, CREDENTIALS):
        assert leak not in str(err) and leak not in repr(err)
    listing = await push.due(0, 10)
    assert [r.config.id for r in listing] == ["bystander"]
    assert [(u.config_id, u.error.column) for u in listing.unavailable] == [("cfg", "token")]

    # The binding, not damage: the original values open again.
    await set_column(push, "cfg", column, original)
    assert await push.get(task, "cfg") == full(task)


async def test_credentials_are_bound_to_the_scheme_they_are_sent_with(
    make_push: Callable[..., Any],
) -> None:
    push = await make_push(secret_key=key())
    task = RunId.generate()
    await push.put(config(task, auth=("Bearer", CREDENTIALS)), 1)
    await set_column(push, "cfg", "auth_scheme", "Basic")
    with pytest.raises(SecretUnavailableError) as info:
        await push.get(task, "cfg")
    # The token column's absence marker is bound to the scheme too, and is opened first.
    assert info.value.column == "token"
    await set_column(push, "cfg", "auth_scheme", "Bearer")
    await set_column(push, "cfg", "url", EVIL)
    with pytest.raises(SecretUnavailableError):
        await push.get(task, "cfg")


async def test_a_put_to_a_new_url_seals_for_that_url(make_push: Callable[..., Any]) -> None:
    push = await make_push(secret_key=key())
    task = RunId.generate()
    await push.put(full(task), 1)
    moved = full(task, url="https://new.example/hook")
    await push.put(moved, 1)
    assert await push.get(task, "cfg") == moved
    await set_column(push, "cfg", "url", URL)  # pointing it back is a rewrite too
    with pytest.raises(SecretUnavailableError):
        await push.get(task, "cfg")


# -- the previous sealed format -----------------------------------------------------------


async def test_rows_sealed_by_the_previous_version_read_and_reseal_upgrades_them(
    make_push: Callable[..., Any],
) -> None:
    k = key()
    kid = Keyring.key_id_for(k)
    push = await make_push(secret_key=k)
    task = RunId.generate()
    await push.put(full(task), 7)
    await push.retry(task, "cfg", 40, "down")
    v1 = {
        column: seal_v1(k, kid, secret, tenant=push.tenant, task=task, id="cfg", column=column)
        for column, secret in (("token", TOKEN), ("auth_credentials", CREDENTIALS))
    }
    for column, value in v1.items():
        await set_column(push, "cfg", column, value)

    assert await push.get(task, "cfg") == full(task)
    [reg] = await push.due(100, 10)
    assert (reg.config, reg.next_seq) == (full(task), 7)
    # v1 is bound to the row, not to its url: a moved v1 value still fails...
    await push.put(full(task, "other"), 1)
    await set_column(push, "other", "token", v1["token"])
    with pytest.raises(SecretUnavailableError):
        await push.get(task, "other")
    # ...and relabelling a v1 value as v2 (or back) does not open either.
    await set_column(push, "other", "token", v1["token"].replace("apj:v1:", "apj:v2:", 1))
    with pytest.raises(SecretUnavailableError):
        await push.get(task, "other")
    await push.put(full(task, "other"), 1)
    v3_token = (await raw_row(push, task, "other")).token
    for older in ("apj:v1:", "apj:v2:"):
        await set_column(push, "other", "token", v3_token.replace("apj:v3:", older, 1))
        with pytest.raises(SecretUnavailableError):
            await push.get(task, "other")
    await push.put(full(task, "other"), 1)

    report = await push.reencrypt()
    assert report == ReencryptReport(reencrypted=1, current=1, changed=0, unavailable=())
    row = await raw_row(push, task)
    assert row.token.startswith(f"apj:v3:{kid}:")
    assert row.auth_credentials.startswith(f"apj:v3:{kid}:")
    assert await push.get(task, "cfg") == full(task)
    assert await state(push, task) == (7, 1, 40, "down")  # cursor and backoff untouched
    # Now bound to its url.
    await set_column(push, "cfg", "url", EVIL)
    with pytest.raises(SecretUnavailableError):
        await push.get(task, "cfg")


# -- bad rows -------------------------------------------------------------------------------


async def test_bad_rows_leave_due_serving_the_rest_and_are_reported(
    make_push: Callable[..., Any], dialect: str, no_secret_in_logs: Capture
) -> None:
    push = await make_push(secret_key=key())
    stranger = await make_push(secret_key=key())
    task = RunId.generate()
    good = [f"good-{n}" for n in range(3)]
    for id in good:
        await push.put(full(task, id), 1)
        await push.retry(task, id, 5, "later")  # every bad row below sorts first
    bad: dict[str, tuple[str, Any]] = {
        "bad-tampered": ("token", None),
        "bad-url": ("url", EVIL),
        "bad-plaintext": ("token", "swapped-in"),
        "bad-cursor": ("next_seq", -1),
        "bad-attempts": ("attempts", -2),
        "bad-due": ("next_attempt_at", -5),
    }
    if dialect == "sqlite":  # SQLite stores any type in any column
        bad |= {
            "bad-text-in-integer": ("next_seq", "abc"),
            "bad-real-in-integer": ("next_attempt_at", 0.5),
            "bad-blob-token": ("token", b"\x00\xff"),
            "bad-blob-url": ("url", b"https://x"),
        }
    for id, (column, value) in bad.items():
        await push.put(full(task, id), 1)
        if id == "bad-tampered":
            sealed = (await raw_row(push, task, id)).token
            value = sealed[:-3] + ("A" if sealed[-3] != "A" else "B") + sealed[-2:]
        await set_column(push, id, column, value)
    await stranger.put(full(task, "bad-foreign-key"), 1)
    await around(
        push,
        "UPDATE push_delivery SET tenant = :t WHERE tenant = :s",
        t=push.tenant,
        s=stranger.tenant,
    )
    await sql(
        push,
        "INSERT INTO push_delivery (tenant, task_id, config_id, url, next_seq) "
        "VALUES (:t, 'not-a-run', 'bad-task', :url, 1)",
        t=push.tenant,
        url=URL,
    )
    names = {*bad, "bad-foreign-key", "bad-task"}

    served = await push.due(10, 2)  # fewer than the bad rows ahead of them
    assert isinstance(served, PushListing) and isinstance(served, list)
    assert [r.config.id for r in served] == good[:2]
    assert {u.config_id for u in served.unavailable} == names
    everything = await push.due(10, 100)
    assert [r.config for r in everything] == [full(task, id) for id in good]
    assert len(everything.unavailable) == len(names)
    for u in everything.unavailable:
        assert isinstance(u.error, SecretUnavailableError | CorruptRegistrationError), u
        assert u.config_id in u.reason and TOKEN not in repr(u) and CREDENTIALS not in repr(u)
    kinds = {u.config_id: type(u.error) for u in everything.unavailable}
    assert kinds["bad-task"] is CorruptRegistrationError
    assert kinds["bad-foreign-key"] is SecretUnavailableError
    assert kinds["bad-cursor"] is CorruptRegistrationError
    assert kinds["bad-attempts"] is CorruptRegistrationError
    assert kinds["bad-due"] is CorruptRegistrationError
    # Each was logged as a warning, naming the row.
    warnings = [line for line in no_secret_in_logs.lines if "left out of due()" in line]
    assert len(warnings) == len(names) * 2
    assert await push.due(10, 0) == [] and (await push.due(10, 0)).unavailable == ()

    # list serves the rest likewise (it does not look at the delivery state); get raises.
    listing = await push.list(task)
    assert [c.id for c in listing] == sorted(
        [*good, "bad-cursor", "bad-attempts", "bad-due"]
        + (["bad-real-in-integer", "bad-text-in-integer"] if dialect == "sqlite" else [])
    )
    assert {u.config_id for u in listing.unavailable} == names - {
        "bad-task",
        "bad-cursor",
        "bad-attempts",
        "bad-due",
        "bad-text-in-integer",
        "bad-real-in-integer",
    }
    with pytest.raises(SecretUnavailableError):
        await push.get(task, "bad-url")
    if dialect == "sqlite":
        with pytest.raises(CorruptRegistrationError, match="token is not text"):
            await push.get(task, "bad-blob-token")
    # A worker can move a bad row out of the way, park it (keeping its cursor: parked()
    # reports it from then on), or an operator can delete it.
    await push.retry(task, "bad-url", 10**9, "secret unavailable")
    await push.park(task, "bad-plaintext", "secret unavailable")
    await push.delete(task, "bad-tampered")
    assert {u.config_id for u in (await push.due(10, 100)).unavailable} == names - {
        "bad-url",
        "bad-plaintext",
        "bad-tampered",
    }
    parked = await push.parked(10)
    assert parked == [] and [u.config_id for u in parked.unavailable] == ["bad-plaintext"]


async def test_reseal_reseals_what_it_can_and_reports_the_rest(
    make_push: Callable[..., Any],
) -> None:
    old, new, foreign = key(), key(), key()
    before = await make_push(keyring=Keyring({"k1": old}))
    rotated = await make_push(keyring=Keyring({"k1": old, "k2": new}, current="k2"))
    elsewhere = await make_push(keyring=Keyring({"k9": foreign}))
    task = RunId.generate()
    await before.put(full(task, "a-old-key"), 3)
    await rotated.put(full(task, "b-current"), 1)
    await before.put(full(task, "c-v1"), 1)
    for column, secret in (("token", TOKEN), ("auth_credentials", CREDENTIALS)):
        v1 = seal_v1(old, "k1", secret, tenant=before.tenant, task=task, id="c-v1", column=column)
        await set_column(before, "c-v1", column, v1)
    await rotated.put(full(task, "d-tampered"), 1)
    await set_column(rotated, "d-tampered", "url", EVIL)
    await elsewhere.put(full(task, "e-unknown-key"), 1)
    await insert_plaintext_row(rotated, task, "f-plaintext")
    await rotated.put(config(task, "g-no-secrets"), 1)
    await rotated.retry(task, "a-old-key", 99, "down")

    report = await rotated.reencrypt()
    assert (report.reencrypted, report.current, report.changed) == (2, 2, 0)
    assert not report.complete
    why = {u.config_id: u.error for u in report.unavailable}
    assert sorted(why) == ["d-tampered", "e-unknown-key", "f-plaintext"]
    assert all(u.task_id == str(task) for u in report.unavailable)
    assert (why["d-tampered"].key_id, why["e-unknown-key"].key_id) == ("k2", "k9")
    assert why["f-plaintext"].key_id is None and "accept_plaintext" in str(why["f-plaintext"])
    for shown in (repr(report), *(u.reason for u in report.unavailable)):
        assert TOKEN not in shown and CREDENTIALS not in shown
    for id in ("a-old-key", "c-v1"):
        assert (await raw_row(rotated, task, id)).token.startswith("apj:v3:k2:")
        assert await rotated.get(task, id) == full(task, id)
    assert await state(rotated, task, "a-old-key") == (3, 1, 99, "down")
    assert (await raw_row(rotated, task, "f-plaintext")).token == TOKEN  # left alone

    again = await rotated.reencrypt()
    assert (again.reencrypted, again.current, len(again.unavailable)) == (0, 4, 3)


async def test_reseal_leaves_a_row_changed_under_it(make_push: Callable[..., Any]) -> None:
    old, new = key(), key()
    before = await make_push(keyring=Keyring({"k1": old}))
    rotated = await make_push(keyring=Keyring({"k1": old, "k2": new}, current="k2"))
    task = RunId.generate()
    await before.put(full(task, "one"), 1)
    await before.put(full(task, "two"), 1)
    replacement = full(task, "two", url="https://replaced.example/hook")
    read = rotated._read

    async def read_then_put(stmt: Any, session: Any = None) -> Any:
        rows = await read(stmt, session)
        await before.put(replacement, 1)  # a put (under k1) between the read and the rewrite
        return rows

    rotated._read = read_then_put  # type: ignore[method-assign]
    report = await rotated.reencrypt()
    assert report == ReencryptReport(reencrypted=1, current=0, changed=1, unavailable=())
    assert not report.complete
    assert (await raw_row(rotated, task, "two")).token.startswith("apj:v3:k1:")  # the put won
    assert await rotated.get(task, "two") == replacement
    del rotated._read
    assert (await rotated.reencrypt()).complete


# -- logs -----------------------------------------------------------------------------------


async def exercise(store: SqlPushStore, task: RunId) -> None:
    """Every write and read of the push store, once."""
    await store.put(full(task), 1)
    await store.put(full(task, "second"), 2)
    await store.put(full(task, "second"), 3)  # the upsert's update branch
    assert await store.get(task, "cfg") == full(task)
    assert len(await store.list(task)) == 2
    assert len(await store.due(10**9, 10)) == 2
    await store.advance(task, "cfg", 5)
    await store.retry(task, "cfg", 9, "HTTP 503")
    await store.park(task, "cfg", "HTTP 410")
    assert len(await store.parked(10)) == 1
    assert await store.unpark(task, "cfg", 9)
    if store.key_id is not None:
        await store.reencrypt()
    await store.delete(task, "second")
    await store.delete(task, "cfg")


async def test_every_logger_at_debug_on_both_drivers_shows_no_secret(
    database_url: str, dialect: str, no_secret_in_logs: Capture
) -> None:
    """The autouse check covers the battery; this shows the logs are on and what guards them.

    On an engine of the host's own that does not hide parameters, a store with a key is safe
    by construction (only envelopes are bound or fetched); a store without a key relies on
    the log filter, and without it the token would be in the logs.
    """
    k = key()
    engine = create_async_engine(database_url)  # no hide_parameters
    tenant = f"logs{os.urandom(6).hex()}"
    keyed = SqlPushStore(engine, tenant=tenant + "k", secret_key=k)
    plain = SqlPushStore(engine, tenant=tenant + "p")
    try:
        await exercise(keyed, RunId.generate())
        await exercise(plain, RunId.generate())
        text = no_secret_in_logs.text
        assert "sqlalchemy.engine.Engine INFO INSERT INTO push_delivery" in text
        assert "[parameters hidden: push delivery]" in text
        assert "(row hidden: push delivery)" in text
        if dialect == "sqlite":
            assert "aiosqlite DEBUG executing execute('INSERT INTO push_delivery" in text

        # Without the filter: the keyed store still leaks nothing, the plaintext one would.
        loggers = [logsafe._logger_of(engine)]
        if dialect == "sqlite":
            loggers.append(logging.getLogger("aiosqlite"))
        bare = Capture()
        root = logging.getLogger()
        for logger in loggers:
            logger.removeFilter(logsafe._FILTER)
        root.addHandler(bare)
        try:
            with no_secret_in_logs.paused():
                await exercise(keyed, RunId.generate())
                by_construction = list(bare.lines)
                await plain.get(RunId.generate(), "cfg")
                await exercise(plain, RunId.generate())
        finally:
            root.removeHandler(bare)
            for logger in loggers:
                logger.addFilter(logsafe._FILTER)
        assert "apj:v3:" in "\n".join(by_construction)  # envelopes are bound and logged
        assert not leaks("\n".join(by_construction), SECRETS, KEYS)
        assert TOKEN in bare.text  # what the filter keeps out
    finally:
        await engine.dispose()


def test_the_filter_only_touches_push_statements() -> None:
    def record(name: str, msg: str, *args: Any) -> logging.LogRecord:
        return logging.LogRecord(name, logging.DEBUG, __file__, 1, msg, args, None)

    journal = record("aiosqlite", "executing %s", functools.partial(print, "SELECT 1", ("x",)))
    push = record(
        "aiosqlite", "executing %s", functools.partial(print, "UPDATE push_delivery", (TOKEN,))
    )
    params = record("sqlalchemy.engine.Engine", "[%s] %r", "cached", (TOKEN,))
    for r in (journal, push, params):
        assert logsafe._FILTER.filter(r)
    assert "'x'" in journal.getMessage()
    assert TOKEN not in push.getMessage() and "UPDATE push_delivery" in push.getMessage()
    assert TOKEN in params.getMessage()  # outside a push-store call: the host's own business
    with logsafe.push_statements():
        params = record("sqlalchemy.engine.Engine", "[%s] %r", "cached", (TOKEN,))
        row = record("sqlalchemy.engine.Engine", "Row %r", (TOKEN,))
        logsafe._FILTER.filter(params)
        logsafe._FILTER.filter(row)
    assert TOKEN not in params.getMessage() and "cached" in params.getMessage()
    assert TOKEN not in row.getMessage()


async def test_a_failed_statement_carries_no_secret_out(
    dialect: str, request: pytest.FixtureRequest, no_secret_in_logs: Capture
) -> None:
    """A statement error prints its parameters unless its engine hides them; the store's don't.

    On a host's engine without ``hide_parameters``, a put refused by the database raises
    ``BackendError`` whose cause chain (what a host's ``log.exception`` prints) holds no
    secret, with or without a key.
    """
    if dialect == "sqlite":
        url = request.getfixturevalue("sqlite_database")()
        ddl = [
            "CREATE TRIGGER refuse_boom BEFORE INSERT ON push_delivery "
            "WHEN NEW.config_id = 'boom' BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
        ]
    else:
        url = request.getfixturevalue("pg_database")()
        ddl = [
            "CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused by a trigger'; END $$",
            "CREATE TRIGGER refuse_boom BEFORE INSERT ON push_delivery FOR EACH ROW "
            "WHEN (NEW.config_id = 'boom') EXECUTE FUNCTION refuse_boom()",
        ]
    engine = configure_engine(create_async_engine(url))  # no hide_parameters
    try:
        with no_secret_in_logs.paused():
            async with engine.begin() as conn:
                for statement in ddl:
                    await conn.execute(text(statement))
        for store in (SqlPushStore(engine), SqlPushStore(engine, secret_key=key())):
            with pytest.raises(BackendError, match="refused by a trigger") as info:
                await store.put(full(RunId.generate(), "boom"), 1)
            shown = "".join(traceback.format_exception(info.value))
            assert "refused by a trigger" in shown and "INSERT INTO push_delivery" in shown
            assert not leaks(shown, SECRETS, KEYS), shown
            logging.getLogger("host").error("delivery setup failed", exc_info=info.value)
        assert "delivery setup failed" in no_secret_in_logs.text
    finally:
        await engine.dispose()
