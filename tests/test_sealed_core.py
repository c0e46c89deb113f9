"""Sealed payloads' pure core: agentplane 0.22's envelope v1, markers, field list and AAD.

agentplane's own envelope tests (``src/keyring/envelope.rs``: scope ``acme/matter``, AAD
``case-state:acme:matter``, plaintext ``the plaintext``) are repeated here on our bytes; the
AEAD is checked against the XChaCha20-Poly1305 test vector of draft-irtf-cfrg-xchacha (A.3.1)
so "XChaCha20-Poly1305" means the standard construction agentplane's ``chacha20poly1305``
crate implements. The vectors are literals: these tests need no ``../shared``.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentplane_journal.core.append import Append
from agentplane_journal.core.envelope import (
    ENVELOPE_FORMAT_VERSION,
    EnvelopeRefusedError,
    UnknownEnvelopeFormatError,
    WrappedKey,
    aead_encrypt,
    build_envelope,
    open_envelope,
    parse_envelope,
)
from agentplane_journal.core.ids import EffectKey, RunId
from agentplane_journal.core.sealed import (
    Erased,
    is_sealed,
    is_sealed_text,
    journal_aad,
    sealed_fields,
    unwrap_text,
    unwrap_value,
    wrap_text,
    wrap_value,
)
from agentplane_journal.keyring import (
    CallbackKeySource,
    EnvKeySource,
    FileKeySource,
    KeyCustodyError,
    Keyring,
    ScopeErasedError,
    Tombstone,
)

AAD = b"case-state:acme:matter"
KEY = bytes(range(32))


def envelope() -> bytes:
    wrapped = WrappedKey("acme/matter", "test:1", bytes([7, 8, 9]))
    return build_envelope(wrapped, KEY, AAD, b"the plaintext")


def test_the_aead_is_xchacha20_poly1305_ietf() -> None:
    key = bytes(range(0x80, 0xA0))
    nonce = bytes(range(0x40, 0x58))
    aad = bytes.fromhex("50515253c0c1c2c3c4c5c6c7")
    msg = (
        b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for "
        b"the future, sunscreen would be it."
    )
    out = aead_encrypt(key, nonce, msg, aad)
    assert out[:16].hex() == "bd6d179d3e83d43b9576579493c0e939"
    assert out[-16:].hex() == "c0875924c1c7987947deafd8780acf49"


def test_a_wrapped_key_is_canon_v1_json_as_serde_writes_it() -> None:
    wrapped = WrappedKey("acme/matter", "test:1", bytes([0, 7, 255]))
    assert wrapped.to_bytes() == b'{"scope":"acme/matter","sealed":[0,7,255],"wrapped_by":"test:1"}'
    assert WrappedKey.from_bytes(wrapped.to_bytes()) == wrapped
    assert "255" not in repr(wrapped)  # lengths, never bytes


def test_an_envelope_leads_with_its_version_and_agentplanes_layout() -> None:
    raw = envelope()
    head = WrappedKey("acme/matter", "test:1", bytes([7, 8, 9])).to_bytes()
    assert raw[0] == ENVELOPE_FORMAT_VERSION == 1
    assert int.from_bytes(raw[1:5], "big") == len(head)
    assert raw[5 : 5 + len(head)] == head
    assert len(raw) == 5 + len(head) + 24 + len(b"the plaintext") + 16
    parsed = parse_envelope(raw)
    assert open_envelope(parsed, KEY, AAD) == b"the plaintext"
    assert parsed.wrapped.scope == "acme/matter"


def test_a_version_this_build_does_not_read_is_not_reported_as_tampering() -> None:
    raw = bytearray(envelope())
    raw[0] = ENVELOPE_FORMAT_VERSION + 1
    with pytest.raises(UnknownEnvelopeFormatError) as caught:
        parse_envelope(bytes(raw))
    assert caught.value.version == 2 and caught.value.supported == 1
    assert "authenticate" not in str(caught.value)
    assert not isinstance(caught.value, EnvelopeRefusedError)


@pytest.mark.parametrize("cut", [0, 1, 5, 9])
def test_a_truncated_envelope_is_refused_rather_than_read_short(cut: int) -> None:
    with pytest.raises(EnvelopeRefusedError):
        parse_envelope(envelope()[:cut])


def test_a_length_beyond_the_envelope_is_refused() -> None:
    raw = bytearray(envelope())
    raw[1:5] = (2**32 - 1).to_bytes(4, "big")
    with pytest.raises(EnvelopeRefusedError, match="shorter than its own header"):
        parse_envelope(bytes(raw))


def test_a_flipped_ciphertext_bit_or_other_aad_does_not_authenticate() -> None:
    raw = bytearray(envelope())
    raw[-1] ^= 1
    with pytest.raises(EnvelopeRefusedError, match="did not authenticate"):
        open_envelope(parse_envelope(bytes(raw)), KEY, AAD)
    with pytest.raises(EnvelopeRefusedError):
        open_envelope(parse_envelope(envelope()), KEY, b"case-state:acme:other")


def test_markers_are_agentplanes_shapes() -> None:
    raw = envelope()
    value, text = wrap_value(raw), wrap_text(raw)
    assert value == {"$sealed": base64.b64encode(raw).decode()}
    assert text == "$sealed:" + base64.b64encode(raw).decode()
    assert is_sealed(value) and unwrap_value(value) == raw
    assert is_sealed_text(text) and unwrap_text(text) == raw
    assert not is_sealed({"$sealed": "x", "other": 1}) and not is_sealed({"$sealed": 1})
    assert not is_sealed_text("$sealed:not base64!")


def test_the_aad_is_agentplanes_sealed_journal_binding() -> None:
    key = EffectKey.from_hex("ab" * 32)
    aad = journal_aad("acme", "run_01J8Z3B6Q0A8M8V9W8X7Y6Z5T4", "EffectDone", key.hex())
    assert aad == b"journal:acme:run_01J8Z3B6Q0A8M8V9W8X7Y6Z5T4:EffectDone:" + b"ab" * 32
    assert journal_aad("acme", "run_X", "Note", None) == b"journal:acme:run_X:Note:-"


def test_the_field_list_is_agentplanes_payloads() -> None:
    def paths(kind: str, payload: dict[str, object]) -> list[tuple[tuple[str, ...], bool]]:
        return [(f.path, f.text) for f in sealed_fields(kind, payload)]

    assert paths("RunAdmitted", {"input": None, "capability": "c"}) == [(("input",), False)]
    assert paths("PlanFrozen", {"plan": {}, "steps": []}) == [(("plan",), False)]
    assert paths("EffectStarted", {"descriptor": {"kind": "k", "args": 1}}) == [
        (("descriptor", "args"), False)
    ]
    assert paths("EffectDone", {"output": 1}) == [(("output",), False)]
    assert paths("EffectReconciled", {"output": None, "detail": "d"}) == [(("detail",), True)]
    assert paths("EffectFailed", {"error": "e", "disposition": "in_doubt"}) == [(("error",), True)]
    assert paths("Note", {"text": "t"}) == [(("text",), True)]
    assert paths("GroupSettled", {"group": "g", "outcome": "o"}) == []
    assert paths("RunSealed", {"outcome": "ok", "reason": "r"}) == [(("reason",), True)]
    assert paths("RunSealed", {"outcome": "ok", "output": 1}) == [(("output",), False)]
    for clear in ("StepStarted", "StepFinished", "CaseBound", "PolicyDenied", "Released"):
        assert paths(clear, {"skill": "s", "outcome": "o", "reason": "r"}) == []


# -- through a key ring (a file source), no database ---------------------------------------


async def _sealed(tmp_path: Path, kind: str, payload: dict[str, object]) -> tuple[Keyring, Append]:
    ring = Keyring(FileKeySource(tmp_path / "keys.json"))
    run = RunId.generate()
    item = Append(run, kind, payload, effect_key="cd" * 32 if kind == "EffectDone" else None)
    return ring, await ring.seal_append(item, tenant="acme", scope=f"acme/{run}")


async def test_a_payload_moved_to_another_run_tenant_or_record_is_refused(tmp_path: Path) -> None:
    ring, item = await _sealed(tmp_path, "EffectDone", {"output": {"card": "4111"}})
    body = {"kind": item.kind, "run": item.run.ulid, "effect_key": "cd" * 32, **item.payload}
    opened, sealed, erased = await ring.open_payload("acme", body)
    assert opened["output"] == {"card": "4111"} and sealed == ["output"] and erased == []
    moves = [
        ("acme", {**body, "run": RunId.generate().ulid}),  # another run
        ("other", body),  # another tenant
        ("acme", {**body, "effect_key": "ef" * 32}),  # another effect
        ("acme", {**body, "kind": "RunAdmitted", "input": body["output"]}),  # another record
    ]
    for tenant, moved in moves:
        with pytest.raises(EnvelopeRefusedError, match="did not authenticate"):
            await ring.open_payload(tenant, moved)
    with pytest.raises(EnvelopeRefusedError, match="sealed under scope"):
        await ring.open_payload("acme", body, scope="acme/another-scope")


async def test_a_relabelled_scope_does_not_unwrap(tmp_path: Path) -> None:
    ring, item = await _sealed(tmp_path, "Note", {"text": "secret"})
    await ring.source.data_key("acme/other")  # the other scope exists, with its own key
    parsed = parse_envelope(unwrap_text(item.payload["text"]) or b"")
    forged = WrappedKey("acme/other", parsed.wrapped.wrapped_by, parsed.wrapped.sealed)
    raw = build_envelope(forged, KEY, b"x", b"y")  # only the header matters here
    body = {"kind": "Note", "run": item.run.ulid, "text": wrap_text(raw)}
    with pytest.raises(EnvelopeRefusedError, match="did not unwrap"):
        await ring.open_payload("acme", body)


async def test_an_erased_scope_opens_as_erased_never_as_tampering(tmp_path: Path) -> None:
    ring, item = await _sealed(tmp_path, "Note", {"text": "secret"})
    scope = f"acme/{item.run}"
    await ring.source.destroy(scope, 1_760_000_000.0, "a request")
    body = {"kind": "Note", "run": item.run.ulid, "text": item.payload["text"]}
    opened, sealed, erased = await ring.open_payload("acme", body)
    assert opened["text"] == Erased(scope, 1_760_000_000.0, "a request")
    assert erased == ["text"] and sealed == ["text"]
    secret = json.loads((tmp_path / "keys.json").read_text())
    assert scope not in secret["scopes"] and scope in secret["erased"]


async def test_the_key_file_must_be_private(tmp_path: Path) -> None:
    ring, _ = await _sealed(tmp_path, "Note", {"text": "secret"})
    path = tmp_path / "keys.json"
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    with pytest.raises(KeyCustodyError, match="chmod 600") as caught:
        await ring.source.data_key("acme/x")
    key = json.loads(path.read_text())["scopes"]
    assert all(v not in str(caught.value) for v in key.values())


async def test_a_hostile_sealed_marker_is_refused_not_a_crash(tmp_path: Path) -> None:
    ring = Keyring(FileKeySource(tmp_path / "keys.json"))
    run = RunId.generate().ulid
    for body in (
        {"kind": "EffectDone", "run": run, "output": {"$sealed": "!!not base64!!"}},
        {
            "kind": "EffectDone",
            "run": run,
            "output": {"$sealed": base64.b64encode(b"\x01").decode()},
        },
        {"kind": "Note", "run": run, "text": "$sealed:" + base64.b64encode(b"\x01\x00").decode()},
    ):
        with pytest.raises(EnvelopeRefusedError):
            await ring.open_payload("acme", body)


async def test_a_second_instance_on_the_key_file_sees_the_erasure(tmp_path: Path) -> None:
    """Two sources on one file (two processes): one erases, the other can neither write nor
    read under the scope, and never writes the destroyed key back."""
    first, second = FileKeySource(tmp_path / "k.json"), FileKeySource(tmp_path / "k.json")
    _, wrapped = await first.data_key("acme/a")
    await second.data_key("acme/b")  # rewrites the file: must keep a's key
    assert len(await first.open(wrapped)) == 32
    await second.destroy("acme/a", 1.0, "request")
    with pytest.raises(ScopeErasedError):
        await first.data_key("acme/a")
    with pytest.raises(ScopeErasedError):
        await first.open(wrapped)
    await first.data_key("acme/c")  # a later rewrite by the other instance keeps the tombstone
    assert second.tombstone("acme/a") is not None and first.tombstone("acme/a") is not None
    await second.destroy("acme/a", 2.0, "a retry")  # idempotent: the first stands
    assert first.tombstone("acme/a") == Tombstone("acme/a", 1.0, "request")


async def test_env_source_is_read_only_custody(monkeypatch: pytest.MonkeyPatch) -> None:
    key = base64.b64encode(bytes(32)).decode()
    monkeypatch.setenv("APJ_TEST_KEYS", json.dumps({"acme/a": key}))
    source = EnvKeySource("APJ_TEST_KEYS")
    data_key, wrapped = await source.data_key("acme/a")
    assert await source.open(wrapped) == data_key and wrapped.wrapped_by == "env:1"
    with pytest.raises(KeyCustodyError, match="read-only"):
        await source.data_key("acme/b")
    with pytest.raises(KeyCustodyError, match="removing its key"):
        await source.destroy("acme/a", 1.0, "r")
    monkeypatch.setenv("APJ_TEST_KEYS", "{}")  # the operator removed it: erased
    with pytest.raises(ScopeErasedError):
        await source.open(wrapped)
    assert key not in repr(source)


async def test_a_kms_behind_callbacks(tmp_path: Path) -> None:
    """A stand-in KMS (a dict in this process): what the callbacks must do and raise."""
    kms: dict[str, bytes] = {}

    async def generate(scope: str) -> tuple[bytes, bytes, str]:
        if scope not in kms:
            kms[scope] = bytes(range(32))
        data_key = bytes([len(kms)] * 32)
        return data_key, b"blob:" + data_key, f"kms/{scope}/v1"

    async def decrypt(scope: str, blob: bytes, key_id: str) -> bytes:
        if scope not in kms:
            raise ScopeErasedError(scope, None, "the KMS key is deleted")
        return blob.removeprefix(b"blob:")

    async def destroy(scope: str) -> None:
        kms.pop(scope, None)

    ring = Keyring(CallbackKeySource(generate, decrypt, destroy))
    item = await ring.seal_append(
        Append(RunId.generate(), "Note", {"text": "t"}), tenant="acme", scope="acme/x"
    )
    body = {"kind": "Note", "run": item.run.ulid, **item.payload}
    assert (await ring.open_payload("acme", body))[0]["text"] == "t"
    await ring.source.destroy("acme/x", 0.0, "r")
    assert isinstance((await ring.open_payload("acme", body))[0]["text"], Erased)


def test_importing_the_package_needs_no_pynacl(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['nacl'] = None\n"
        "import agentplane_journal, agentplane_journal.keyring\n"
        "from agentplane_journal.core.envelope import random_bytes\n"
        "try:\n    random_bytes(1)\nexcept ImportError as e:\n    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert "'sealed' extra" in done.stdout, done.stdout + done.stderr
