"""The one strict base64 decoder for notes: RFC 4648 standard alphabet, padded, canonical.

A note's signature covers its *text*, so two spellings that decode to one value would be two
texts that both verify and name the same checkpoint: an operator could hand two auditors
different bytes for one history. Python's ``base64.b64decode(..., validate=True)`` still
accepts one such spelling (non-zero bits below the last whole byte: ``AB==`` and ``AC==``
both decode to ``0x00``), so every note field (a checkpoint's root, a signature line, a
verifier key) is read here, and the error names the rule the text broke. Pure, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import re

__all__ = ["b64decode_canonical"]

_ALPHABET = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def b64decode_canonical(text: str) -> bytes:
    """The bytes ``text`` spells, or ``ValueError`` naming the rule it breaks: standard
    alphabet only (``A-Z a-z 0-9 + /``, no URL-safe ``- _``, no whitespace), padded to a
    multiple of 4 characters with ``=`` only at the end, and zero bits below the last
    byte (the one spelling an encoder produces)."""
    if not text:
        return b""
    if not text.isascii() or not _ALPHABET.fullmatch(text):
        raise ValueError(
            "it has a character outside standard base64 (A-Z a-z 0-9 + /, '=' only as the "
            "final padding; no URL-safe alphabet, no whitespace)"
        )
    if len(text) % 4:
        raise ValueError(
            f"its length {len(text)} is not a multiple of 4: the '=' padding is required"
        )
    try:
        decoded = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):  # unreachable after the checks above; kept honest
        raise ValueError("it is not standard base64") from None
    if base64.b64encode(decoded).decode("ascii") != text:
        raise ValueError(
            "it is not canonical: the bits below its last byte are not zero, so it is a "
            "second spelling of the same bytes"
        )
    return decoded
