"""The push-delivery store's behaviour battery, on SQLite and PostgreSQL.

Each test gets its own tenant (PostgreSQL shares one migrated database, SQLite gets a fresh
file). Secrets are checked at rest by reading the columns with plain SQL, as an attacker
holding a dump would. Every test runs with every logger at DEBUG (``no_secret_in_logs``),
and no token, credentials or key may appear in any record.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from agentplane_journal import CorruptRegistrationError, RunId, SecretUnavailableError
from agentplane_journal.contracts import PushStore
from agentplane_journal.push.rows import ReencryptReport
from agentplane_journal.push.secretbox import Keyring
from agentplane_journal.push.store import SqlPushStore
from agentplane_journal.push.values import (
    MAX_ERROR_BYTES,
    PushAuthentication,
    PushConfig,
    PushRegistration,
)

from support import logcheck
from support.markers import THROUGH_PGBOUNCER
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

# The battery runs once more through PgBouncer (tests/test_pgbouncer.py).
pytestmark = THROUGH_PGBOUNCER

MAX_ATTEMPTS = 2**31 - 1


@pytest.fixture(autouse=True)
def no_secret_in_logs() -> Iterator[logcheck.Capture]:
    """Run the test with every logger at DEBUG; fail it if any record holds a secret."""
    with logcheck.no_secret_logged(SECRETS, KEYS) as capture:
        yield capture


@pytest.fixture
async def make_push(database_url: str, clock: Any) -> AsyncIterator[Callable[..., Any]]:
    """``await make_push(**kw)`` -> a push store on this test's database and tenant."""
    async with store_factory(
        SqlPushStore, database_url, f"t{uuid.uuid4().hex[:12]}", clock
    ) as make:
        yield make


@pytest.fixture
async def push(make_push: Callable[..., Any]) -> SqlPushStore:
    return await make_push()


async def row_count(store: SqlPushStore) -> int:
    rows = await sql(store, "SELECT count(*) FROM push_delivery WHERE tenant = :t", t=store.tenant)
    return int(rows[0][0])


# -- the contract -----------------------------------------------------------------------


async def test_the_store_satisfies_the_push_store_protocol(push: SqlPushStore) -> None:
    assert isinstance(push, PushStore)
    assert isinstance(push.for_tenant("other"), PushStore)


async def test_registrations_round_trip(push: SqlPushStore) -> None:
    task = RunId.generate()
    one = full(task, "one")
    two = config(task, "two", url="http://other.example:8080/h?x=1")
    await push.put(one, 1)
    await push.put(two, 5)

    assert await push.get(task, "one") == one
    assert await push.get(str(task), "two") == two
    assert await push.list(task) == [one, two]
    due = await push.due(0, 10)
    assert [r.config for r in due] == [one, two]
    assert [(r.next_seq, r.attempts, r.next_attempt_at, r.last_error) for r in due] == [
        (1, 0, 0, None),
        (5, 0, 0, None),
    ]
    assert all(isinstance(r, PushRegistration) for r in due)


async def test_reference_cursor_scenario(push: SqlPushStore) -> None:
    """agentplane's Postgres guard (tests/guards/postgres.rs), step by step."""
    task = RunId.generate()
    cfg = PushConfig(
        "cfg",
        task,
        "https://client.example/hook",
        token="opaque",
        authentication=PushAuthentication("Bearer", "credential"),
    )
    await push.put(cfg, 3)
    [reg] = await push.due(0, 10)
    assert reg.next_seq == 3
    assert reg.config.authentication is not None
    assert reg.config.authentication.credentials == "credential"
    await push.retry(task, "cfg", 20, "offline")
    assert await push.due(19, 10) == []
    await push.advance(task, "cfg", 7)
    [reg] = await push.due(0, 10)
    assert reg.next_seq == 7
    await push.put(PushConfig("cfg", task, "https://client.example/new"), 99)
    [reg] = await push.due(0, 10)
    assert (reg.config.url, reg.next_seq) == ("https://client.example/new", 7)


async def test_a_replacing_put_keeps_the_cursor_and_resets_the_backoff(
    push: SqlPushStore,
) -> None:
    task = RunId.generate()
    await push.put(full(task), 3)
    await push.advance(task, "cfg", 9)
    await push.retry(task, "cfg", 500, "receiver unavailable")
    await push.retry(task, "cfg", 900, "receiver unavailable again")
    assert await state(push, task) == (9, 2, 900, "receiver unavailable again")

    replacement = config(task, url="https://new.example/hook", token="new-token")
    await push.put(replacement, 1)

    assert await state(push, task) == (9, 0, 0, None)
    # url and token replaced; a put without authentication clears it.
    assert await push.get(task, "cfg") == replacement
    row = await raw_row(push, task)
    assert (row.auth_scheme, row.auth_credentials) == (None, None)


async def test_due_is_ordered_by_time_then_task_then_id_and_limited(push: SqlPushStore) -> None:
    a, b = sorted([RunId.generate(), RunId.generate()])
    for task in (b, a):
        for id in ("z", "m", "a"):
            await push.put(config(task, id), 1)
    await push.retry(a, "a", 50, "e")  # later than everything at 0
    await push.retry(b, "z", 10, "e")
    await push.retry(a, "m", 10, "e")
    await push.retry(b, "a", 99, "e")  # not due at 60

    def keys(regs: list[PushRegistration]) -> list[tuple[int, RunId, str]]:
        return [(r.next_attempt_at, r.config.task, r.config.id) for r in regs]

    expected = [
        (0, a, "z"),
        (0, b, "m"),
        (10, a, "m"),
        (10, b, "z"),
        (50, a, "a"),
    ]
    assert keys(await push.due(60, 100)) == expected
    assert keys(await push.due(60, 3)) == expected[:3]
    assert keys(await push.due(0, 100)) == expected[:2]
    assert keys(await push.due(10, 100)) == expected[:4]
    assert len(await push.due(99, 100)) == 6
    assert await push.due(60, 0) == []


async def test_advance_never_moves_the_cursor_backwards_but_resets_the_backoff(
    push: SqlPushStore,
) -> None:
    task = RunId.generate()
    await push.put(full(task), 5)
    await push.advance(task, "cfg", 12)
    assert await state(push, task) == (12, 0, 0, None)

    await push.retry(task, "cfg", 300, "timeout")
    await push.advance(task, "cfg", 4)  # a late duplicate acknowledgement
    assert await state(push, task) == (12, 0, 0, None)
    await push.advance(task, "cfg", 12)
    assert (await state(push, task))[0] == 12
    await push.advance(task, "cfg", 2**63 - 1)
    assert (await state(push, task))[0] == 2**63 - 1


async def test_retry_counts_attempts_and_leaves_the_cursor(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(full(task), 7)
    await push.retry(task, "cfg", 100, "connection refused")
    assert await state(push, task) == (7, 1, 100, "connection refused")
    await push.retry(task, "cfg", 40, "HTTP 503")  # the next attempt may move earlier
    assert await state(push, task) == (7, 2, 40, "HTTP 503")
    await push.retry(task, "cfg", 40, "")
    assert await state(push, task) == (7, 3, 40, "")


async def test_retry_keeps_a_bounded_storable_error(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(config(task), 1)
    await push.retry(task, "cfg", 1, "é" * 5000)
    error = (await state(push, task))[3]
    assert error == "é" * (MAX_ERROR_BYTES // 2)
    await push.retry(task, "cfg", 1, "bad\x00byte and a lone \ud800 surrogate")
    error = (await state(push, task))[3]
    assert "\x00" not in error and error.startswith("bad\ufffdbyte")


async def test_attempts_saturate_at_the_integer_column_limit(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(config(task), 1)
    await sql(
        push,
        "UPDATE push_delivery SET attempts = :n WHERE tenant = :t",
        n=MAX_ATTEMPTS - 1,
        t=push.tenant,
    )
    await push.retry(task, "cfg", 1, "e")
    assert (await state(push, task))[1] == MAX_ATTEMPTS
    await push.retry(task, "cfg", 1, "e")  # 0.4.0's LEAST(attempts + 1, ...) overflows here
    assert (await state(push, task))[1] == MAX_ATTEMPTS


async def test_delete_is_idempotent(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(full(task, "one"), 1)
    await push.put(full(task, "two"), 1)
    await push.delete(task, "one")
    await push.delete(task, "one")
    assert await push.get(task, "one") is None
    assert [c.id for c in await push.list(task)] == ["two"]
    await push.delete(RunId.generate(), "never-registered")


async def test_unknown_registrations_are_no_ops(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(full(task), 3)
    other = RunId.generate()
    await push.advance(other, "cfg", 10)
    await push.retry(other, "cfg", 10, "e")
    await push.advance(task, "missing", 10)
    await push.retry(task, "missing", 10, "e")
    await push.delete(task, "missing")
    assert await push.get(other, "cfg") is None
    assert await push.get(task, "missing") is None
    assert await push.list(other) == []
    assert await row_count(push) == 1
    assert await state(push, task) == (3, 0, 0, None)


async def test_authentication_only_when_both_halves_exist(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(full(task, "no-scheme"), 1)
    await push.put(full(task, "no-credentials"), 1)
    await push.put(config(task, "token-only", token=TOKEN), 1)
    await push.put(config(task, "auth-only", auth=("Basic", CREDENTIALS)), 1)
    where = "WHERE tenant = :t AND config_id = :id"
    await sql(
        push, f"UPDATE push_delivery SET auth_scheme = NULL {where}", t=push.tenant, id="no-scheme"
    )
    await sql(
        push,
        f"UPDATE push_delivery SET auth_credentials = NULL {where}",
        t=push.tenant,
        id="no-credentials",
    )

    got = {c.id: c for c in await push.list(task)}
    assert got["no-scheme"].authentication is None
    assert got["no-scheme"].token == TOKEN  # the token is independent
    assert got["no-credentials"].authentication is None
    assert got["token-only"].authentication is None
    assert got["token-only"].token == TOKEN
    assert got["auth-only"].token is None
    assert got["auth-only"].authentication == PushAuthentication("Basic", CREDENTIALS)


async def test_tenants_are_isolated(push: SqlPushStore) -> None:
    acme, globex = push.for_tenant("acme-" + push.tenant), push.for_tenant("globex-" + push.tenant)
    task = RunId.generate()
    await acme.put(full(task), 3)
    await acme.retry(task, "cfg", 50, "down")

    assert await globex.get(task, "cfg") is None
    assert await globex.list(task) == []
    assert await globex.due(10**9, 100) == []
    await globex.advance(task, "cfg", 99)
    await globex.retry(task, "cfg", 1, "not yours")
    await globex.delete(task, "cfg")
    assert await state(acme, task) == (3, 1, 50, "down")
    assert await acme.get(task, "cfg") == full(task)

    # The same ids in another tenant are another registration.
    await globex.put(config(task, url="https://globex.example/h"), 40)
    assert (await acme.get(task, "cfg")).url == URL  # type: ignore[union-attr]
    assert (await state(globex, task))[0] == 40
    assert [r.config.url for r in await acme.due(10**9, 10)] == [URL]


async def test_bad_input_is_refused_before_the_database(push: SqlPushStore) -> None:
    task = RunId.generate()
    await push.put(config(task), 5)
    refused: list[tuple[type[Exception], Callable[[], Any]]] = [
        (ValueError, lambda: push.put(config(task, "new"), -1)),
        (TypeError, lambda: push.put(config(task, "new"), True)),
        (TypeError, lambda: push.put(config(task, "new"), 1.5)),
        (TypeError, lambda: push.put({"id": "x"}, 1)),  # type: ignore[arg-type]
        (ValueError, lambda: push.put(config(task, "new"), 2**63)),
        (ValueError, lambda: push.advance(task, "cfg", -1)),
        (ValueError, lambda: push.retry(task, "cfg", -1, "e")),
        (TypeError, lambda: push.retry(task, "cfg", 1, None)),  # type: ignore[arg-type]
        (ValueError, lambda: push.due(-1, 10)),
        (ValueError, lambda: push.due(0, -1)),
        (ValueError, lambda: push.get(task, "")),
        (ValueError, lambda: push.get(task, "x" * 257)),
        (ValueError, lambda: push.get("run_nonsense", "cfg")),
        (TypeError, lambda: push.list(42)),  # type: ignore[arg-type]
        (ValueError, lambda: push.delete(task, "a\x00b")),
        (ValueError, lambda: push.advance(task, " ", 9)),
    ]
    for error, call in refused:
        with pytest.raises(error):
            await call()
    assert await row_count(push) == 1
    assert await state(push, task) == (5, 0, 0, None)

    # Not even a connection is needed to refuse them.
    nowhere = SqlPushStore(create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none"))
    for error, call in [
        (ValueError, lambda: nowhere.put(config(task), -1)),
        (ValueError, lambda: nowhere.advance(task, "cfg", -5)),
        (ValueError, lambda: nowhere.due(0, -1)),
    ]:
        with pytest.raises(error):
            await call()
    await nowhere.engine.dispose()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"id": ""}, "config id must not be empty"),
        ({"id": "x" * 257}, "limit is 256"),
        ({"id": "a\x00"}, "NUL"),
        ({"url": "ftp://receiver.example/h"}, "http:// or https://"),
        ({"url": "receiver.example/h"}, "http:// or https://"),
        ({"url": "https:///path-only"}, "must name a host"),
        ({"url": "https://receiver.example/" + "a" * 2048}, "limit is 2048"),
        ({"url": "https://receiver.example/a b"}, "whitespace"),
        ({"url": "https://receiver.example/\r\nX-Evil: 1"}, "control characters"),
        ({"url": "https://receiver.example:99999/h"}, "not a valid URL"),
        ({"url": "https://user:hunter2@receiver.example/h"}, "password"),
        ({"token": ""}, "token must not be empty"),
        ({"token": "t" * 8193}, "limit is 8192"),
        ({"token": "tok\r\nX-Evil: 1"}, "control characters"),
        ({"token": "tok\ud800"}, "lone surrogate"),
        ({"task": "not-a-run"}, "not a RunId"),
        ({"task": 7}, "RunId"),
        ({"authentication": ("Bearer", "x")}, "PushAuthentication"),
    ],
)
def test_bad_configurations_are_refused(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"id": "cfg", "task": RunId.generate(), "url": URL}
    fields.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=message) as info:
        PushConfig(**fields)
    assert "hunter2" not in str(info.value)
    assert "X-Evil" not in str(info.value)


@pytest.mark.parametrize(
    ("scheme", "credentials", "message"),
    [
        ("", CREDENTIALS, "must not be empty"),
        ("Bear er", CREDENTIALS, "single HTTP token"),
        ("B" * 257, CREDENTIALS, "limit is 256"),
        ("Bearer", "", "must not be empty"),
        ("Bearer", "c" * 8193, "limit is 8192"),
        ("Bearer", "ab\ncd-" + CREDENTIALS, "control characters"),
    ],
)
def test_bad_authentication_is_refused(scheme: str, credentials: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        PushAuthentication(scheme, credentials)
    assert CREDENTIALS not in str(info.value)


def test_a_task_may_be_given_in_text_form() -> None:
    task = RunId.generate()
    assert PushConfig("cfg", str(task), URL).task == task
    assert PushConfig("cfg", task.ulid, URL) == PushConfig("cfg", task, URL)


def test_secrets_never_appear_in_repr_or_str() -> None:
    task = RunId.generate()
    cfg = full(task)
    reg = PushRegistration(cfg, 1, 0, 0, None)
    for value in (cfg, reg, cfg.authentication):
        for shown in (repr(value), str(value), f"{value}", f"{value!r}"):
            assert TOKEN not in shown
            assert CREDENTIALS not in shown
            assert "<redacted>" in shown
    assert "token=None" in repr(config(task))
    with pytest.raises(ValueError):
        PushRegistration(cfg, -1, 0, 0, None)


# -- secrets at rest --------------------------------------------------------------------


async def test_sealed_columns_never_hold_the_secret(make_push: Callable[..., Any]) -> None:
    k = key()
    push = await make_push(secret_key=k)
    task = RunId.generate()
    await push.put(full(task), 1)
    await push.put(full(task, "twin"), 1)

    row = await raw_row(push, task)
    twin = await raw_row(push, task, "twin")
    kid = Keyring.key_id_for(k)
    assert push.key_id == kid
    for value, secret in ((row.token, TOKEN), (row.auth_credentials, CREDENTIALS)):
        assert value.startswith(f"apj:v3:{kid}:")
        assert secret not in value
    assert row.auth_scheme == "Bearer"  # not a secret
    assert row.token != twin.token  # a fresh nonce each time
    dump = await sql(push, "SELECT * FROM push_delivery WHERE tenant = :t", t=push.tenant)
    assert TOKEN not in repr(dump) and CREDENTIALS not in repr(dump)
    assert await push.get(task, "cfg") == full(task)
    assert [r.config for r in await push.due(0, 10)] == [full(task), full(task, "twin")]


async def test_a_tampered_ciphertext_is_refused(make_push: Callable[..., Any]) -> None:
    push = await make_push(secret_key=key())
    task = RunId.generate()
    await push.put(full(task), 1)
    sealed = (await raw_row(push, task)).token
    flip = "A" if sealed[-5] != "A" else "B"
    tampered = sealed[:-5] + flip + sealed[-4:]
    await sql(
        push, "UPDATE push_delivery SET token = :v WHERE tenant = :t", v=tampered, t=push.tenant
    )

    with pytest.raises(SecretUnavailableError) as info:
        await push.get(task, "cfg")
    err = info.value
    assert (err.key_id, err.column) == (push.key_id, "token")
    assert "does not authenticate" in str(err)
    for leak in (TOKEN, CREDENTIALS, sealed, tampered, sealed.rsplit(":", 1)[1][:12]):
        assert leak not in str(err) and leak not in repr(err)
    # due and list serve the others and name it (see the bad-row tests below)
    for listing in (await push.due(0, 10), await push.list(task)):
        assert listing == []
        [bad] = listing.unavailable
        assert (bad.task_id, bad.config_id) == (str(task), "cfg")
        assert isinstance(bad.error, SecretUnavailableError)

    for bad in (
        sealed.rsplit(":", 1)[0] + ":",
        sealed[:30],
        "apj:v1:k:x",
        "apj:v1:k:AAAA",
        "apj:v2:k:AAAA",
        "apj:v12:k:AAAA",
    ):
        await sql(
            push, "UPDATE push_delivery SET token = :v WHERE tenant = :t", v=bad, t=push.tenant
        )
        with pytest.raises(SecretUnavailableError):
            await push.get(task, "cfg")


async def test_a_ciphertext_moved_elsewhere_does_not_open(make_push: Callable[..., Any]) -> None:
    k = key()
    push = await make_push(secret_key=k)
    other_tenant = push.for_tenant("other-" + push.tenant)
    task, other_task = RunId.generate(), RunId.generate()
    await push.put(full(task, "victim"), 1)
    for store, t, id in (
        (push, task, "attacker"),
        (push, other_task, "victim"),
        (other_tenant, task, "victim"),
    ):
        await store.put(config(t, id, token="attackers-own", auth=("Bearer", "attackers-own")), 1)
    victim = await raw_row(push, task, "victim")

    # another row of the same task, the same id in another task, the same row in another tenant
    for tenant, t, id in (
        (push.tenant, task, "attacker"),
        (push.tenant, other_task, "victim"),
        (other_tenant.tenant, task, "victim"),
    ):
        await sql(
            push,
            "UPDATE push_delivery SET token = :v WHERE tenant = :t AND task_id = :task "
            "AND config_id = :id",
            v=victim.token,
            t=tenant,
            task=str(t),
            id=id,
        )
    with pytest.raises(SecretUnavailableError, match="copied from another row"):
        await push.get(task, "attacker")
    with pytest.raises(SecretUnavailableError):
        await push.get(other_task, "victim")
    with pytest.raises(SecretUnavailableError):
        await other_tenant.get(task, "victim")

    # another column of the same row
    await sql(
        push,
        "UPDATE push_delivery SET auth_credentials = token WHERE tenant = :t AND config_id = :id",
        t=push.tenant,
        id="victim",
    )
    with pytest.raises(SecretUnavailableError) as info:
        await push.get(task, "victim")
    assert info.value.column == "auth_credentials"
    assert TOKEN not in str(info.value)


async def test_key_rotation_reads_old_rows_and_writes_new_ones(
    make_push: Callable[..., Any],
) -> None:
    old, new = key(), key()
    before = await make_push(keyring=Keyring({"k1": old}))
    task = RunId.generate()
    await before.put(full(task, "old-row"), 3)
    await before.retry(task, "old-row", 77, "down")

    rotated = await make_push(keyring=Keyring({"k1": old, "k2": new}, current="k2"))
    assert rotated.key_id == "k2"
    assert await rotated.get(task, "old-row") == full(task, "old-row")
    await rotated.put(full(task, "new-row"), 1)
    assert (await raw_row(rotated, task, "new-row")).token.startswith("apj:v3:k2:")
    assert (await raw_row(rotated, task, "old-row")).token.startswith("apj:v3:k1:")

    only_new = await make_push(keyring=Keyring({"k2": new}))
    assert await only_new.get(task, "new-row") == full(task, "new-row")
    with pytest.raises(SecretUnavailableError) as info:
        await only_new.get(task, "old-row")
    assert info.value.key_id == "k1"
    assert "k1" in str(info.value) and "does not hold" in str(info.value)

    # re-encrypt moves old rows to the current key without touching cursor or backoff.
    assert await rotated.reencrypt() == ReencryptReport(
        reencrypted=1, current=1, changed=0, unavailable=()
    )
    assert await rotated.reencrypt() == ReencryptReport(
        reencrypted=0, current=2, changed=0, unavailable=()
    )
    assert (await raw_row(rotated, task, "old-row")).token.startswith("apj:v3:k2:")
    assert await only_new.get(task, "old-row") == full(task, "old-row")
    assert await state(rotated, task, "old-row") == (3, 1, 77, "down")


async def test_a_bare_key_and_a_keyring_of_it_agree(make_push: Callable[..., Any]) -> None:
    old, new = key(), key()
    first = await make_push(secret_key=old)
    task = RunId.generate()
    await first.put(full(task), 1)
    later = await make_push(keyring=Keyring.from_keys(new, old))
    assert later.key_id == Keyring.key_id_for(new) != first.key_id
    assert await later.get(task, "cfg") == full(task)
    wrong = await make_push(secret_key=new)
    with pytest.raises(SecretUnavailableError) as info:
        await wrong.get(task, "cfg")
    assert info.value.key_id == first.key_id


async def test_plaintext_reads_without_a_key_and_is_refused_with_one(
    make_push: Callable[..., Any],
) -> None:
    k = key()
    plain = await make_push()
    sealed = await make_push(secret_key=k)
    adopting = await make_push(secret_key=k, accept_plaintext=True)
    task = RunId.generate()
    await insert_plaintext_row(plain, task)

    # Without a key the store keeps agentplane 0.4.0's format: plaintext reads and writes.
    assert await plain.get(task, "cfg") == full(task)
    await plain.put(full(task, "second"), 1)
    assert (await raw_row(plain, task, "second")).token == TOKEN

    # With a key, plaintext in a sealed column is a downgrade: refused, never read.
    with pytest.raises(SecretUnavailableError, match="plaintext") as info:
        await sealed.get(task, "cfg")
    assert (info.value.key_id, info.value.column) == (None, "token")
    assert "accept_plaintext=True" in str(info.value) and TOKEN not in str(info.value)
    listing = await sealed.due(0, 10)
    assert listing == [] and len(listing.unavailable) == 2
    # A sealed row whose credentials were swapped for plaintext is refused just the same.
    await sealed.put(full(task, "third"), 1)
    await sql(
        sealed,
        "UPDATE push_delivery SET auth_credentials = 'swapped-in' WHERE tenant = :t "
        "AND config_id = 'third'",
        t=sealed.tenant,
    )
    with pytest.raises(SecretUnavailableError, match="plaintext") as info:
        await sealed.get(task, "third")
    assert info.value.column == "auth_credentials"
    report = await sealed.reencrypt()
    assert (report.reencrypted, report.current, len(report.unavailable)) == (0, 0, 3)
    assert (await raw_row(plain, task, "second")).token == TOKEN  # left as it was

    # accept_plaintext=True adopts them: they read, and re-encrypt seals them in place.
    assert await adopting.get(task, "cfg") == full(task)
    [reg] = await adopting.due(0, 1)
    assert (reg.config, reg.next_seq) == (full(task), 4)
    await sql(
        sealed,
        "UPDATE push_delivery SET auth_credentials = :c WHERE tenant = :t AND config_id = 'third'",
        c=CREDENTIALS,
        t=sealed.tenant,
    )
    report = await adopting.reencrypt()
    assert report == ReencryptReport(reencrypted=3, current=0, changed=0, unavailable=())
    assert report.complete
    for id in ("cfg", "second", "third"):
        row = await raw_row(plain, task, id)
        assert row.token.startswith(f"apj:v3:{sealed.key_id}:")
        assert row.auth_credentials.startswith(f"apj:v3:{sealed.key_id}:")
        assert await sealed.get(task, id) == full(task, id)
    assert await adopting.reencrypt() == ReencryptReport(0, 3, 0, ())
    assert adopting.for_tenant(adopting.tenant)._accept_plaintext is True


async def test_a_sealed_row_without_a_key_is_an_error(make_push: Callable[..., Any]) -> None:
    sealed = await make_push(secret_key=key())
    plain = await make_push()
    task = RunId.generate()
    await sealed.put(full(task), 1)
    await sealed.put(config(task, "no-secrets"), 1)
    with pytest.raises(SecretUnavailableError) as info:
        await plain.get(task, "cfg")
    assert info.value.key_id == sealed.key_id
    assert "no secret key" in str(info.value)
    assert TOKEN not in str(info.value)
    bad, marked = (await plain.due(0, 10)).unavailable
    assert isinstance(bad.error, SecretUnavailableError) and bad.config_id == "cfg"
    # A keyed registration without secrets holds a sealed absence marker, unreadable too.
    assert isinstance(marked.error, SecretUnavailableError) and marked.config_id == "no-secrets"
    with pytest.raises(SecretUnavailableError, match="no secret key"):
        await plain.get(task, "no-secrets")
    with pytest.raises(ValueError, match="has none"):
        await plain.reencrypt()

    # Without a key, a value that would read back as sealed cannot be stored.
    with pytest.raises(ValueError, match="marks encrypted values"):
        await plain.put(config(task, "x", token="apj:v1:k1:AAAA"), 1)
    # An envelope of a later format version is not mistaken for a token.
    await sql(
        plain,
        "UPDATE push_delivery SET token = 'apj:v4:k1:AAAA' WHERE tenant = :t "
        "AND config_id = 'no-secrets'",
        t=plain.tenant,
    )
    with pytest.raises(SecretUnavailableError, match="format v4"):
        await plain.get(task, "no-secrets")


async def test_keys_are_validated_and_never_shown(make_push: Callable[..., Any]) -> None:
    k = bytes(range(32))
    for bad in (k[:31], k + b"\x00", b""):
        with pytest.raises(ValueError, match="exactly 32 bytes") as info:
            await make_push(secret_key=bad)
        assert repr(bad) not in str(info.value)
    with pytest.raises(TypeError, match="not a str"):
        SqlPushStore(create_async_engine("sqlite+aiosqlite://"), secret_key=k.hex())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        await make_push(secret_key=k, keyring=Keyring({"k": k}))
    with pytest.raises(ValueError, match="current"):
        Keyring({"a": k, "b": bytes(32)})
    with pytest.raises(ValueError, match="not in the keyring"):
        Keyring({"a": k}, current="b")
    with pytest.raises(ValueError, match="key id"):
        Keyring({"a:b": k})
    with pytest.raises(ValueError, match="exactly 32 bytes"):
        Keyring({"a": k[:16]})

    ring = Keyring({"k1": k, "k2": bytes(32)}, current="k2")
    store = await make_push(keyring=ring)
    for shown in (repr(ring), str(ring), repr(store), str(store)):
        assert repr(k) not in shown and k.hex() not in shown
    assert repr(ring) == "Keyring(key_ids=('k1', 'k2'), current='k2')"


async def test_rows_written_elsewhere_read_back_as_they_are(push: SqlPushStore) -> None:
    """agentplane may store what this package refuses as input; reading must not fail."""
    task = RunId.generate()
    await sql(
        push,
        "INSERT INTO push_delivery (tenant, task_id, config_id, url, token, next_seq) "
        "VALUES (:t, :task, 'odd', 'https://u:hunter2@receiver.example/h', '', 1)",
        t=push.tenant,
        task=str(task),
    )
    [cfg] = await push.list(task)
    assert (cfg.url, cfg.token) == ("https://u:hunter2@receiver.example/h", "")
    assert "hunter2" not in repr(cfg) and "<redacted>" in repr(cfg)

    await sql(
        push,
        "INSERT INTO push_delivery (tenant, task_id, config_id, url, next_seq) "
        "VALUES (:t, 'not-a-run', 'x', :url, 1)",
        t=push.tenant,
        url=URL,
    )
    listing = await push.due(0, 10)
    assert [r.config.id for r in listing] == ["odd"]
    [bad] = listing.unavailable
    assert (bad.task_id, bad.config_id) == ("not-a-run", "x")
    assert isinstance(bad.error, CorruptRegistrationError) and "not a run id" in bad.reason
