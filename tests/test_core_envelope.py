"""agentplane 0.22's sealed envelope v1 (core/envelope.py): each rule held by a test that
fails without it.

Written against the mutants that survived tests/test_sealed_core.py (tools/mutation.py
envelope). Pure: envelopes are built here with fixed keys, no key ring, no database.
"""

from __future__ import annotations

import pytest

from agentplane_journal.core.envelope import (
    KEY_BYTES,
    NONCE_BYTES,
    EnvelopeRefusedError,
    ParsedEnvelope,
    ScopeErasedError,
    UnknownEnvelopeFormatError,
    WrappedKey,
    aead_decrypt,
    aead_encrypt,
    build_envelope,
    open_envelope,
    parse_envelope,
    random_bytes,
)
from agentplane_journal.errors import CorruptionError, RefusedError

KEY = bytes(range(32))
AAD = b"journal:acme:run_X:EffectDone:-"
WRAPPED = WrappedKey("acme/run_X", "file:1", bytes([1, 2, 3]))
HEAD = WRAPPED.to_bytes()


def _envelope(plaintext: bytes = b"the plaintext") -> bytes:
    return build_envelope(WRAPPED, KEY, AAD, plaintext)


def _raw(head: bytes, rest: bytes, *, version: int = 1, length: int | None = None) -> bytes:
    claimed = len(head) if length is None else length
    return bytes([version]) + claimed.to_bytes(4, "big") + head + rest


# -- the errors say which of the three answers this is ---------------------------------------


def test_a_refusal_is_corruption_and_keeps_its_detail() -> None:
    err = EnvelopeRefusedError("the envelope is empty")
    assert isinstance(err, CorruptionError) and err.detail == "the envelope is empty"
    assert "the envelope is empty" in str(err)


def test_an_unknown_version_is_refused_not_corrupt_and_names_both_versions() -> None:
    err = UnknownEnvelopeFormatError(7)
    assert isinstance(err, RefusedError) and not isinstance(err, CorruptionError)
    assert (err.version, err.supported) == (7, 1)
    assert "version 7" in str(err) and "reads 1" in str(err)


def test_an_erased_scope_says_when_and_why_only_when_known() -> None:
    bare = ScopeErasedError("acme/run_X")
    assert (bare.scope, bare.at, bare.reason) == ("acme/run_X", None, None)
    assert "destroyed:" in str(bare) and "unix seconds" not in str(bare)
    full = ScopeErasedError("acme/run_X", 1700000000.4, "gdpr request")
    assert (full.at, full.reason) == (1700000000.4, "gdpr request")
    assert "destroyed at 1700000000 (unix seconds) (gdpr request):" in str(full)
    assert "()" not in str(ScopeErasedError("s", 0.0, ""))
    assert "at 0 (unix seconds)" in str(ScopeErasedError("s", 0.0))
    assert isinstance(bare, RefusedError) and not isinstance(bare, CorruptionError)


# -- the wrapped key -------------------------------------------------------------------------


def test_a_wrapped_key_is_agentplanes_json() -> None:
    assert HEAD == b'{"scope":"acme/run_X","sealed":[1,2,3],"wrapped_by":"file:1"}'
    assert WrappedKey("s", "b", b"").to_bytes() == b'{"scope":"s","sealed":[],"wrapped_by":"b"}'
    assert WrappedKey.from_bytes(HEAD) == WRAPPED
    assert repr(WRAPPED) == "WrappedKey(scope='acme/run_X', wrapped_by='file:1', sealed=<3 bytes>)"


def test_a_wrapped_key_that_cannot_be_canon_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"^wrapped key\.scope: "):
        WrappedKey("\ud800", "b", b"").to_bytes()


def test_a_wrapped_key_holding_every_byte_value_round_trips() -> None:
    every = WrappedKey("s", "b", bytes(range(256)))
    back = WrappedKey.from_bytes(every.to_bytes())
    assert back == every and type(back.sealed) is bytes
    empty = WrappedKey.from_bytes(b'{"scope":"s","sealed":[],"wrapped_by":"b"}')
    assert empty.sealed == b""


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"{", "would not parse"),
        (b"\xff\xfe", "would not parse"),
        (b"[1]", "not an object"),
        (b'"x"', "not an object"),
        (b'{"wrapped_by":"b","sealed":[]}', "lacks"),
        (b'{"scope":1,"wrapped_by":"b","sealed":[]}', "lacks"),
        (b'{"scope":"s","sealed":[]}', "lacks"),
        (b'{"scope":"s","wrapped_by":null,"sealed":[]}', "lacks"),
        (b'{"scope":"s","wrapped_by":"b"}', "lacks"),
        (b'{"scope":"s","wrapped_by":"b","sealed":"AAEC"}', "lacks"),
        (b'{"scope":"s","wrapped_by":"b","sealed":{}}', "lacks"),
        (b'{"scope":"s","wrapped_by":"b","sealed":[256]}', "lacks"),
        (b'{"scope":"s","wrapped_by":"b","sealed":[-1]}', "lacks"),
        (b'{"scope":"s","wrapped_by":"b","sealed":[1.0]}', "lacks"),
        (b'{"scope":"s","wrapped_by":"b","sealed":[true]}', "lacks"),
        (b'{"scope":"s","wrapped_by":"b","sealed":[0,"1"]}', "lacks"),
    ],
)
def test_a_malformed_wrapped_key_is_refused_never_a_crash(raw: bytes, why: str) -> None:
    with pytest.raises(EnvelopeRefusedError, match=why):
        WrappedKey.from_bytes(raw)


def test_the_byte_range_edges_are_accepted() -> None:
    key = WrappedKey.from_bytes(b'{"scope":"s","wrapped_by":"b","sealed":[0,255]}')
    assert key.sealed == b"\x00\xff"


# -- the AEAD --------------------------------------------------------------------------------


def test_random_bytes_are_as_many_as_asked_and_differ() -> None:
    assert len(random_bytes(24)) == 24 and len(random_bytes(0)) == 0
    assert random_bytes(32) != random_bytes(32)


def test_the_aead_opens_what_it_sealed_and_nothing_else() -> None:
    nonce = bytes(NONCE_BYTES)
    sealed = aead_encrypt(KEY, nonce, b"data", AAD)
    assert len(sealed) == 4 + 16
    assert aead_decrypt(KEY, nonce, sealed, AAD) == b"data"
    assert aead_decrypt(KEY, nonce, sealed, AAD + b"x") is None
    assert aead_decrypt(bytes(32), nonce, sealed, AAD) is None
    assert aead_decrypt(KEY, bytes([1]) * NONCE_BYTES, sealed, AAD) is None
    assert aead_decrypt(KEY, nonce, sealed[:-1] + bytes([sealed[-1] ^ 1]), AAD) is None


# -- building and parsing --------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 16, KEY_BYTES - 1, KEY_BYTES + 1, 64])
def test_a_data_key_of_another_length_is_refused(size: int) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        build_envelope(WRAPPED, bytes(size), AAD, b"x")


def test_an_envelope_is_the_layout_with_a_fresh_nonce() -> None:
    raw = _envelope(b"abc")
    assert raw[0] == 1 and raw[1:5] == len(HEAD).to_bytes(4, "big")
    assert raw[5 : 5 + len(HEAD)] == HEAD
    assert len(raw) == 5 + len(HEAD) + NONCE_BYTES + 3 + 16
    parsed = parse_envelope(raw)
    assert parsed.wrapped == WRAPPED
    assert parsed.nonce == raw[5 + len(HEAD) : 5 + len(HEAD) + NONCE_BYTES]
    assert parsed.sealed == raw[5 + len(HEAD) + NONCE_BYTES :]
    assert aead_decrypt(KEY, parsed.nonce, parsed.sealed, AAD) == b"abc"
    assert parse_envelope(_envelope(b"abc")).nonce != parsed.nonce
    assert open_envelope(parsed, KEY, AAD) == b"abc"


def test_an_envelope_with_an_empty_plaintext_opens() -> None:
    assert open_envelope(parse_envelope(_envelope(b"")), KEY, AAD) == b""


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"", "empty"),
        (b"\x01", "no header"),
        (b"\x01\x00\x00\x00", "no header"),
        (b"\x01\x00\x00\x00\x00", "shorter than its own header"),  # a header, no nonce
    ],
)
def test_an_envelope_without_a_header_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(EnvelopeRefusedError, match=why):
        parse_envelope(raw)


@pytest.mark.parametrize("version", [0, 2, 255])
def test_another_version_is_unknown_before_anything_else_is_read(version: int) -> None:
    with pytest.raises(UnknownEnvelopeFormatError) as caught:
        parse_envelope(bytes([version]))
    assert caught.value.version == version


def test_the_header_length_is_checked_to_the_byte() -> None:
    exact = _raw(HEAD, bytes(NONCE_BYTES))  # a nonce and no ciphertext: parses
    parsed = parse_envelope(exact)
    assert parsed == ParsedEnvelope(WRAPPED, bytes(NONCE_BYTES), b"")
    with pytest.raises(EnvelopeRefusedError, match="shorter than its own header"):
        parse_envelope(exact[:-1])
    with pytest.raises(EnvelopeRefusedError, match="shorter than its own header"):
        parse_envelope(_raw(HEAD, bytes(NONCE_BYTES), length=len(HEAD) + 1))
    # the length is big-endian, all four bytes of it: read little-endian, or from three of
    # its bytes, it would claim what there is
    for claimed in (len(HEAD) << 24, (1 << 24) + len(HEAD), (1 << 31) + len(HEAD)):
        with pytest.raises(EnvelopeRefusedError, match="shorter than its own header"):
            parse_envelope(_raw(HEAD, bytes(NONCE_BYTES), length=claimed))


def test_a_shorter_claimed_length_cuts_the_wrapped_key_and_is_refused() -> None:
    with pytest.raises(EnvelopeRefusedError, match="would not parse"):
        parse_envelope(_raw(HEAD, bytes(NONCE_BYTES + 1), length=len(HEAD) - 1))


def test_a_moved_or_altered_payload_does_not_authenticate() -> None:
    parsed = parse_envelope(_envelope())
    with pytest.raises(EnvelopeRefusedError, match="did not authenticate") as caught:
        open_envelope(parsed, KEY, AAD + b"other")
    assert caught.value.detail == "the sealed payload did not authenticate"
    with pytest.raises(EnvelopeRefusedError):
        open_envelope(ParsedEnvelope(WRAPPED, parsed.nonce, parsed.sealed[1:]), KEY, AAD)
