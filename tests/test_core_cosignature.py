"""Cosignatures' rules (c2sp.org/tlog-cosignature), each held by a test that fails without it
(tlog/cosignature.py; witness rounds against a store are in tests/test_witness.py).

Written against the mutants that survived (tools/mutation.py cosignature).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import pickle

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from agentplane_journal.tlog.cosignature import (
    COSIGNATURE_TYPE,
    MAX_TIMESTAMP,
    Cosignature,
    Cosigner,
    CosignerKey,
    cosigned_message,
)

NAME = "witness.example/w1"
SEED = bytes(range(1, 33))
PUBLIC = (
    Ed25519PrivateKey.from_private_bytes(SEED)
    .public_key()
    .public_bytes(Encoding.Raw, PublicFormat.Raw)
)
BODY = "log.example/x\n5\n" + base64.b64encode(bytes(32)).decode() + "\n"
W = Cosigner(NAME, SEED)


def _hash(name: str, public: bytes) -> int:
    digest = hashlib.sha256(name.encode() + b"\n\x04" + public).digest()
    return int.from_bytes(digest[:4], "big")


def _vkey(name: str, hash_text: str, key: bytes) -> str:
    return f"{name}+{hash_text}+{base64.b64encode(key).decode()}"


def test_the_key_id_and_vkey_are_the_specs() -> None:
    assert COSIGNATURE_TYPE == 4
    assert W.key.public_key == PUBLIC
    assert W.key.key_hash == _hash(NAME, PUBLIC)
    assert W.key.vkey == _vkey(NAME, f"{_hash(NAME, PUBLIC):08x}", b"\x04" + PUBLIC)
    assert CosignerKey.from_vkey(W.key.vkey) == W.key
    # a hash with leading zeros keeps its 8 digits
    for i in range(200):
        key = CosignerKey(f"w{i}.example", PUBLIC)
        if key.key_hash < 0x10000000:
            assert key.vkey.split("+")[1] == f"{key.key_hash:08x}"
            assert CosignerKey.from_vkey(key.vkey) == key
            break
    else:
        pytest.fail("no key hash with a leading zero among 200 names")


def test_the_signed_message_is_header_time_and_body() -> None:
    assert cosigned_message(BODY, 7) == f"cosignature/v1\ntime 7\n{BODY}".encode()
    assert cosigned_message(BODY, 0).startswith(b"cosignature/v1\ntime 0\n")
    assert cosigned_message(BODY, MAX_TIMESTAMP).startswith(
        f"cosignature/v1\ntime {2**63 - 1}\n".encode()
    )


@pytest.mark.parametrize(
    ("body", "timestamp", "error"),
    [
        (BODY.rstrip("\n"), 1, ValueError),
        (BODY.encode(), 1, ValueError),
        (BODY, -1, ValueError),
        (BODY, 2**63, ValueError),
        (BODY, True, TypeError),
        (BODY, 1.0, TypeError),
    ],
)
def test_a_bad_body_or_timestamp_is_refused(body: object, timestamp: object, error: type) -> None:
    with pytest.raises(error):
        cosigned_message(body, timestamp)  # type: ignore[arg-type]


def test_a_cosignature_verifies_only_for_its_key_body_and_time() -> None:
    cosig = W.cosign(BODY, 1_700_000_000)
    assert (cosig.name, cosig.key_hash, cosig.timestamp) == (NAME, W.key.key_hash, 1_700_000_000)
    assert W.key.verify(BODY, cosig)
    assert not W.key.verify(BODY.replace("5", "6"), cosig)
    other_time = Cosignature(cosig.name, cosig.key_hash, 1_700_000_001, cosig.signature)
    assert not W.key.verify(BODY, other_time)
    renamed = CosignerKey("witness.example/w2", PUBLIC)
    assert not renamed.verify(BODY, cosig)
    other_hash = Cosignature(cosig.name, cosig.key_hash ^ 1, cosig.timestamp, cosig.signature)
    assert not W.key.verify(BODY, other_hash)
    other_key = Cosigner(NAME, bytes(range(2, 34)))
    assert not other_key.key.verify(BODY, cosig)
    # the same signature under another key claiming our name and hash
    forged = Cosignature(NAME, other_key.key.key_hash, cosig.timestamp, cosig.signature)
    assert not other_key.key.verify(BODY, forged)


@pytest.mark.parametrize(
    "cosig",
    [
        Cosignature(NAME, _hash(NAME, PUBLIC), -1, bytes(64)),
        Cosignature(NAME, _hash(NAME, PUBLIC), True, bytes(64)),
        Cosignature(NAME, _hash(NAME, PUBLIC), 1, bytes(63)),
        Cosignature(NAME, _hash(NAME, PUBLIC), 1, "sig"),  # type: ignore[arg-type]
    ],
)
def test_verify_answers_false_never_raises(cosig: Cosignature) -> None:
    assert W.key.verify(BODY, cosig) is False
    assert W.key.verify("no newline", W.cosign(BODY, 1)) is False


def test_a_line_round_trips_and_is_the_specs_layout() -> None:
    cosig = W.cosign(BODY, 258)
    line = cosig.line
    assert line.startswith(f"\u2014 {NAME} ") and line.endswith("\n")
    blob = base64.b64decode(line.split(" ")[2])
    assert blob == W.key.key_hash.to_bytes(4, "big") + (258).to_bytes(8, "big") + cosig.signature
    assert len(blob) == 76
    assert Cosignature.parse(line) == cosig
    assert Cosignature.parse(line[:-1]) == cosig
    top = Cosignature(NAME, 0xFFFFFFFF, MAX_TIMESTAMP, bytes(64))
    assert Cosignature.parse(top.line) == top


def _line(blob: bytes, name: str = NAME) -> str:
    return f"\u2014 {name} {base64.b64encode(blob).decode()}\n"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"\xe2\x80\x94 x", "a cosignature line is text, not bytes"),
        (_line(bytes(76)).replace("\u2014", "-"), "one line starting with"),
        (_line(bytes(76)) + "\n", "one line starting with"),
        (_line(bytes(76))[:-1] + "\nx", "one line starting with"),
        (_line(bytes(76), name="bad name"), "the cosignature is not canonical base64"),
        (_line(bytes(76), name=""), "not '— <name> <base64>'"),
        (_line(bytes(76), name="a+b"), "not '— <name> <base64>'"),
        (f"\u2014 {NAME}", "not '— <name> <base64>': no signature"),
        (f"\u2014 {NAME} !!", "the cosignature is not canonical base64"),
        (_line(bytes(75)), "the signature holds 75 bytes, not 76"),
        (_line(bytes(77)), "the signature holds 77 bytes, not 76"),
        (_line(bytes(68)), "the signature holds 68 bytes"),
        (
            _line(bytes(4) + (2**63).to_bytes(8, "big") + bytes(64)),
            f"the cosignature's timestamp {2**63} exceeds 2^63 - 1",
        ),
    ],
)
def test_a_malformed_line_is_refused_naming_the_rule(line: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        Cosignature.parse(line)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_parse_reads_key_id_timestamp_and_signature_in_order() -> None:
    blob = bytes([1, 2, 3, 4]) + (5).to_bytes(8, "big") + bytes(range(64))
    cosig = Cosignature.parse(_line(blob))
    assert (cosig.name, cosig.key_hash, cosig.timestamp, cosig.signature) == (
        NAME,
        0x01020304,
        5,
        bytes(range(64)),
    )


@pytest.mark.parametrize(
    ("vkey", "message"),
    [
        (
            _vkey(NAME, f"{_hash(NAME, PUBLIC):08x}", b"\x04" + PUBLIC).replace("+", "-", 1),
            "NAME+HASH+KEY",
        ),
        (f"{NAME}+{_hash(NAME, PUBLIC):08x}", "NAME+HASH+KEY"),
        (_vkey(NAME, f"{_hash(NAME, PUBLIC):07x}0"[:7], b"\x04" + PUBLIC), "NAME+HASH+KEY"),
        (_vkey(NAME, f"0{_hash(NAME, PUBLIC):08x}", b"\x04" + PUBLIC), "NAME+HASH+KEY"),
        (_vkey("bad name", "00000000", b"\x04" + PUBLIC), "is not a cosigner vkey"),
        (_vkey(NAME, "0000000g", b"\x04" + PUBLIC), "NAME+HASH+KEY"),
        (f"{NAME}+00000000+!!", "NAME+HASH+KEY"),
        (_vkey(NAME, "00000000", b""), "(empty;"),
        (_vkey(NAME, "00000000", b"\x01" + PUBLIC), "(type 0x01;"),
        (_vkey(NAME, "00000000", b"\x04" + PUBLIC[:31]), "(type 0x04;"),
        (_vkey(NAME, "00000000", b"\x04" + PUBLIC + b"\x00"), "(type 0x04;"),
        (
            _vkey(NAME, f"{_hash(NAME, PUBLIC) ^ 1:08x}", b"\x04" + PUBLIC),
            "does not match its name and key",
        ),
    ],
)
def test_a_malformed_vkey_is_refused_naming_the_rule(vkey: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        CosignerKey.from_vkey(vkey)
    assert message in str(info.value)


def test_a_misshapen_vkey_is_told_the_shape() -> None:
    with pytest.raises(ValueError) as info:
        CosignerKey.from_vkey(f"{NAME}+0000000+AA==")
    assert str(info.value) == (
        f"'{NAME}+0000000+AA==' is not a cosigner vkey: expected NAME+HASH+KEY (8 hex digits, "
        "then base64 of 0x04 and the key)"
    )


def test_a_vkey_is_text_and_a_key_32_bytes() -> None:
    with pytest.raises(TypeError, match="a cosigner vkey is a str, not bytes"):
        CosignerKey.from_vkey(b"x")  # type: ignore[arg-type]
    for public in (PUBLIC[:31], PUBLIC + b"\x00", bytearray(PUBLIC)):
        with pytest.raises(ValueError, match="exactly 32 bytes"):
            CosignerKey(NAME, public)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        CosignerKey("bad name", PUBLIC)


def test_a_cosigner_needs_a_32_byte_seed_and_keeps_it_to_itself() -> None:
    for seed in (SEED[:31], SEED + b"\x00", bytearray(SEED), "x" * 32):
        with pytest.raises(ValueError, match="an Ed25519 seed is exactly 32 bytes"):
            Cosigner(NAME, seed)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Cosigner("bad name", SEED)
    assert repr(W) == f"Cosigner({W.key.vkey!r})"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(W)
    with pytest.raises(TypeError, match="cannot be pickled"):
        copy.copy(W)
    with pytest.raises(TypeError, match="cannot be pickled"):
        W.__getstate__()
    with pytest.raises(AttributeError, match="Cosigner is immutable"):
        W.key = CosignerKey(NAME, PUBLIC)
    assert W.key == CosignerKey(NAME, PUBLIC)
