"""Rows ``due``/``get``/``list`` must check before serving: the push store under an attacker
who can write the database (issue 18, "push rows served unchecked"). On both dialects.

* a stored ``url`` is held to the rules a registration's url is (http or https, a host, no
  control characters or whitespace), so a row pointed at ``file://`` is reported, not served;
* a sealed registration proves which of its secrets it has: blanking the token or the
  credentials (NULL) does not turn it into an unauthenticated registration;
* on SQLite a ``next_attempt_at`` of the wrong storage class (TEXT, BLOB) is reported by
  ``due``, not hidden for ever by the ``<=`` comparison.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from agentplane_journal import CorruptRegistrationError, RunId, SecretUnavailableError
from agentplane_journal.push.store import SqlPushStore

from support.logcheck import Capture, no_secret_logged
from support.push import CREDENTIALS, KEYS, SECRETS, TOKEN, config, full, key, raw_row, sql
from support.stores import store_factory


@pytest.fixture(autouse=True)
def no_secret_in_logs() -> Iterator[Capture]:
    with no_secret_logged(SECRETS, KEYS) as capture:
        yield capture


@pytest.fixture
async def make_push(database_url: str, clock: Any) -> AsyncIterator[Callable[..., Any]]:
    async with store_factory(
        SqlPushStore, database_url, f"t{uuid.uuid4().hex[:12]}", clock
    ) as make:
        yield make


async def set_column(store: SqlPushStore, id: str, column: str, value: Any) -> None:
    await sql(
        store,
        f"UPDATE push_delivery SET {column} = :v WHERE tenant = :t AND config_id = :id",
        v=value,
        t=store.tenant,
        id=id,
    )


async def only_bystander_served(store: SqlPushStore, task: RunId, victim: str) -> Any:
    """``due`` serves the bystander and names the victim; ``list`` too; the victim's error."""
    listing = await store.due(0, 10)
    assert [r.config.id for r in listing] == ["bystander"]
    [bad] = listing.unavailable
    assert bad.config_id == victim
    listed = await store.list(task)
    assert [c.id for c in listed] == ["bystander"]
    assert [u.config_id for u in listed.unavailable] == [victim]
    for leak in (TOKEN, CREDENTIALS):
        assert leak not in bad.reason
    return bad.error


# -- (a) a stored url is checked as a registered one is --------------------------------------

BAD_URLS = [
    "file:///etc/passwd",
    "gopher://receiver.example/hook",
    "javascript:alert(1)",
    "https:///no-host",
    "https://receiver.example/hook\r\nX-Injected: 1",
    "https://receiver.example/a b",
    "",
]


@pytest.mark.parametrize("url", BAD_URLS)
async def test_a_stored_url_a_registration_would_refuse_is_reported_never_served(
    make_push: Callable[..., Any], url: str
) -> None:
    push = await make_push()  # no key: nothing else binds the url
    task = RunId.generate()
    await push.put(config(task, "victim", token=TOKEN), 1)
    await push.put(config(task, "bystander"), 1)
    await set_column(push, "victim", "url", url)

    error = await only_bystander_served(push, task, "victim")
    assert isinstance(error, CorruptRegistrationError) and "url" in str(error)
    with pytest.raises(CorruptRegistrationError, match="url"):
        await push.get(task, "victim")


async def test_a_stored_url_with_a_password_or_beyond_the_input_limit_still_reads(
    make_push: Callable[..., Any],
) -> None:
    """What agentplane may have written (a password in the url, a very long url) reads."""
    push = await make_push()
    task = RunId.generate()
    await push.put(config(task, "long"), 1)
    long_url = "https://receiver.example/" + "a" * 5000
    await set_column(push, "long", "url", long_url)
    assert (await push.get(task, "long")).url == long_url


# -- (b) a sealed registration proves which secrets it has -----------------------------------


@pytest.mark.parametrize(
    ("registered", "blanked"),
    [
        ("token-only", ("token",)),
        ("full", ("token",)),
        ("full", ("auth_credentials",)),
        ("full", ("auth_credentials", "auth_scheme")),
        ("full", ("token", "auth_credentials", "auth_scheme")),
        ("auth-only", ("auth_credentials",)),
        ("auth-only", ("auth_credentials", "auth_scheme")),
    ],
)
async def test_blanking_a_sealed_secret_is_detected_not_served_unauthenticated(
    make_push: Callable[..., Any], registered: str, blanked: tuple[str, ...]
) -> None:
    push = await make_push(secret_key=key())
    task = RunId.generate()
    victim = {
        "token-only": config(task, "victim", token=TOKEN),
        "full": full(task, "victim"),
        "auth-only": config(task, "victim", auth=("Bearer", CREDENTIALS)),
    }[registered]
    await push.put(victim, 1)
    await push.put(full(task, "bystander"), 1)
    for column in blanked:
        await set_column(push, "victim", column, None)

    error = await only_bystander_served(push, task, "victim")
    assert isinstance(error, SecretUnavailableError)
    with pytest.raises(SecretUnavailableError):
        await push.get(task, "victim")


async def test_a_sealed_registration_without_secrets_cannot_be_given_or_stripped_of_them(
    make_push: Callable[..., Any],
) -> None:
    """A registration put without secrets is sealed too: its row says so, and a token or
    credentials copied in (from another of its own rows) do not open."""
    push = await make_push(secret_key=key())
    task = RunId.generate()
    await push.put(config(task, "victim"), 1)
    await push.put(full(task, "bystander"), 1)
    assert await push.get(task, "victim") == config(task, "victim")
    marker = (await raw_row(push, task, "victim")).token
    assert marker is not None and marker.startswith(f"apj:v3:{push.key_id}:")

    await set_column(push, "victim", "token", None)
    with pytest.raises(SecretUnavailableError, match="blanked"):
        await push.get(task, "victim")
    await set_column(push, "victim", "token", marker)
    assert await push.get(task, "victim") == config(task, "victim")

    other = await raw_row(push, task, "bystander")
    await set_column(push, "victim", "auth_scheme", "Bearer")
    await set_column(push, "victim", "auth_credentials", other.auth_credentials)
    with pytest.raises(SecretUnavailableError):
        await push.get(task, "victim")


async def test_adopting_a_row_with_no_sealed_token_is_explicit(
    make_push: Callable[..., Any],
) -> None:
    """A NULL token on a keyed store is indistinguishable from a blanked one: refused, and
    adopted only as plaintext is, by ``accept_plaintext=True`` and ``reencrypt()``."""
    k = key()
    push = await make_push(secret_key=k)
    adopting = await make_push(secret_key=k, accept_plaintext=True)
    adopting = adopting.for_tenant(push.tenant)
    task = RunId.generate()
    await push.put(config(task, "legacy"), 3)
    await set_column(push, "legacy", "token", None)  # as a store before format v3 wrote it

    assert (await push.reencrypt()).unavailable[0].config_id == "legacy"
    assert await adopting.get(task, "legacy") == config(task, "legacy")
    report = await adopting.reencrypt()
    assert (report.reencrypted, report.unavailable) == (1, ())
    assert await push.get(task, "legacy") == config(task, "legacy")
    assert (await push.reencrypt()).current == 1


# -- (c) a next_attempt_at of the wrong storage class is reported ----------------------------


@pytest.mark.parametrize("value", ["soon", b"\x00\x01", 1e300])
async def test_a_next_attempt_at_of_the_wrong_type_is_reported_by_due(
    make_push: Callable[..., Any], dialect: str, value: Any
) -> None:
    if dialect != "sqlite":
        pytest.skip("PostgreSQL's BIGINT column holds integers only")
    push = await make_push()
    task = RunId.generate()
    await push.put(config(task, "victim"), 1)
    await push.put(config(task, "bystander"), 1)
    await set_column(push, "victim", "next_attempt_at", value)

    listing = await push.due(0, 10)
    assert [r.config.id for r in listing] == ["bystander"]
    [bad] = listing.unavailable
    assert bad.config_id == "victim"
    assert isinstance(bad.error, CorruptRegistrationError)
    assert "next_attempt_at" in bad.reason
    # However many good registrations are due, the hidden one is reported too.
    listing = await push.due(0, 1)
    assert [r.config.id for r in listing] == ["bystander"]
    assert [u.config_id for u in listing.unavailable] == ["victim"]
