"""Where scopes' wrapping keys live: a file, an environment variable, or a KMS (callbacks).

A source mints a **fresh** data key per payload, wrapped under the scope's wrapping key
(:meth:`KeySource.data_key`), opens a wrapped one (:meth:`KeySource.open`), and destroys a
scope's wrapping key (:meth:`KeySource.destroy`): the erasure. The wrapping key never
leaves the source; what travels with a payload is the wrapped data key, which is useless
without it, so a backup holds everything needed to restore and nothing needed to read.

The local sources (:class:`FileKeySource`, :class:`EnvKeySource`) wrap a data key as
agentplane's in-process ring does, with the same AEAD as the payload: ``sealed`` is a
24-byte nonce then XChaCha20-Poly1305 of the data key under the scope's wrapping key, bound
to the scope and the wrapping key's name, so a wrapped key relabelled to another scope does
not open. No key material is ever printed: reprs and errors name scopes and paths only.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import json
import os
import stat
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentplane_journal.core.envelope import (
    KEY_BYTES,
    NONCE_BYTES,
    EnvelopeRefusedError,
    ScopeErasedError,
    WrappedKey,
    aead_decrypt,
    aead_encrypt,
    random_bytes,
)
from agentplane_journal.errors import UnavailableError

__all__ = [
    "CallbackKeySource",
    "EnvKeySource",
    "FileKeySource",
    "KeyCustodyError",
    "KeySource",
    "Tombstone",
]


class KeyCustodyError(UnavailableError):
    """The key source cannot do what was asked (unreadable, unsafe, read-only, unreachable).

    Not an erasure and not tampering: the remedy is the operator's (a file mode, a variable,
    the KMS). Never carries key material.
    """


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A destroyed scope: when and why (the first destruction stands)."""

    scope: str
    at: float
    reason: str


@runtime_checkable
class KeySource(Protocol):
    """The key custody seam. Implement it to put wrapping keys in a KMS or an HSM
    (:class:`CallbackKeySource` adapts three callbacks)."""

    async def data_key(self, scope: str) -> tuple[bytes, WrappedKey]:
        """A fresh 32-byte data key and its wrapped form; :class:`ScopeErasedError` for a
        destroyed scope (a scope never comes back)."""
        ...

    async def open(self, wrapped: WrappedKey) -> bytes:
        """The data key ``wrapped`` holds; :class:`ScopeErasedError` once its scope was
        destroyed, :class:`EnvelopeRefusedError` when it does not unwrap."""
        ...

    async def destroy(self, scope: str, at: float, reason: str) -> None:
        """Destroy ``scope``'s wrapping key. Idempotent: a retry changes nothing."""
        ...


_WRAP_VERSION = "1"


def _wrap_aad(scope: str, wrapped_by: str) -> bytes:
    return f"agentplane-journal wrap:{scope}:{wrapped_by}".encode()


def _wrap(kek: bytes, scope: str, wrapped_by: str) -> tuple[bytes, WrappedKey]:
    data_key = random_bytes(KEY_BYTES)
    nonce = random_bytes(NONCE_BYTES)
    sealed = nonce + aead_encrypt(kek, nonce, data_key, _wrap_aad(scope, wrapped_by))
    return data_key, WrappedKey(scope, wrapped_by, sealed)


def _unwrap(kek: bytes, wrapped: WrappedKey) -> bytes:
    nonce, sealed = wrapped.sealed[:NONCE_BYTES], wrapped.sealed[NONCE_BYTES:]
    if len(nonce) != NONCE_BYTES:
        raise EnvelopeRefusedError("the wrapped data key is truncated")
    key = aead_decrypt(kek, nonce, sealed, _wrap_aad(wrapped.scope, wrapped.wrapped_by))
    if key is None or len(key) != KEY_BYTES:
        raise EnvelopeRefusedError(
            f"the data key wrapped for scope {wrapped.scope!r} did not unwrap under that "
            "scope's key (relabelled, or from another key ring)"
        )
    return key


def _b64key(text: Any, where: str) -> bytes:
    try:
        key = base64.b64decode(str(text), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise KeyCustodyError(f"{where} is not a base64 {KEY_BYTES}-byte key")
    return key


class FileKeySource:
    """Wrapping keys in one JSON file, mode 0600, that this process may rewrite.

    The file holds each scope's 32-byte key (base64) and each destroyed scope's tombstone;
    a scope is created on its first write. A file readable or writable by group or others
    is refused, naming the ``chmod`` that fixes it. Changes are atomic (a new file renamed
    over the old, both 0600) and serialised across processes on the host by ``flock`` on
    ``<file>.lock``, so two instances never resurrect a key the other destroyed.

    Destroying a key removes it from the file; a filesystem may keep old blocks, and a
    backup of the key file restores the key: keep the key file out of the database's
    backups, or use a KMS (``docs/concepts/erasure.md``).
    """

    wrapped_by = "file:" + _WRAP_VERSION

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._cache: tuple[tuple[int, int, int], dict[str, Any]] | None = None

    def __repr__(self) -> str:
        return f"FileKeySource({str(self.path)!r})"

    # -- the file ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _check_mode(self, st: os.stat_result) -> None:
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            mode = stat.S_IMODE(st.st_mode)
            raise KeyCustodyError(
                f"the key file {self.path} is open to group or others (mode {mode:04o}); "
                f"it holds erasure keys: chmod 600 {self.path}"
            )

    def _load(self) -> dict[str, Any]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return {"scopes": {}, "erased": {}}
        self._check_mode(st)
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError) as exc:
            raise KeyCustodyError(
                f"the key file {self.path} cannot be read as JSON ({type(exc).__name__})"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("scopes"), dict):
            raise KeyCustodyError(f"the key file {self.path} has no 'scopes' object")
        data.setdefault("erased", {})
        self._cache = (stamp, data)
        return data

    def _save(self, data: Mapping[str, Any]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, json.dumps(data, sort_keys=True).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dirfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)
        self._cache = None

    def _tombstone(self, data: Mapping[str, Any], scope: str) -> ScopeErasedError | None:
        gone = data["erased"].get(scope)
        if gone is None:
            return None
        return ScopeErasedError(scope, gone.get("at"), gone.get("reason"))

    def _kek(self, scope: str, *, create: bool) -> bytes:
        data = self._load()
        erased = self._tombstone(data, scope)
        if erased is not None:
            raise erased
        text = data["scopes"].get(scope)
        if text is None and create:
            with self._locked():
                data = dict(self._load())
                erased = self._tombstone(data, scope)
                if erased is not None:
                    raise erased
                text = data["scopes"].get(scope)
                if text is None:
                    text = base64.b64encode(random_bytes(KEY_BYTES)).decode()
                    data["scopes"] = {**data["scopes"], scope: text}
                    self._save(data)
        if text is None:
            raise ScopeErasedError(scope, None, f"no key for this scope in {self.path}")
        return _b64key(text, f"the key of scope {scope!r} in {self.path}")

    def tombstone(self, scope: str) -> Tombstone | None:
        """When and why ``scope`` was destroyed here, or ``None``."""
        gone = self._load()["erased"].get(scope)
        if gone is None:
            return None
        return Tombstone(scope, float(gone.get("at", 0)), str(gone.get("reason", "")))

    # -- KeySource -----------------------------------------------------------------------

    async def data_key(self, scope: str) -> tuple[bytes, WrappedKey]:
        return _wrap(self._kek(scope, create=True), scope, self.wrapped_by)

    async def open(self, wrapped: WrappedKey) -> bytes:
        return _unwrap(self._kek(wrapped.scope, create=False), wrapped)

    async def destroy(self, scope: str, at: float, reason: str) -> None:
        with self._locked():
            data = dict(self._load())
            if scope in data["erased"]:
                return  # the first destruction stands
            scopes = {k: v for k, v in data["scopes"].items() if k != scope}
            erased = {**data["erased"], scope: {"at": at, "reason": reason}}
            self._save({**data, "scopes": scopes, "erased": erased})


class EnvKeySource:
    """Wrapping keys from an environment variable: read-only custody.

    The variable holds a JSON object ``{"<scope>": "<base64 32-byte key>", ...}`` (one
    scope per tenant is the usual shape). A process cannot change its operator's
    environment, so this source mints and opens under the scopes it is given and refuses
    to create or destroy one (:class:`KeyCustodyError` saying what to do instead): erasure
    with this source is the operator removing the scope from the variable everywhere.
    """

    wrapped_by = "env:" + _WRAP_VERSION

    def __init__(self, variable: str = "AGENTPLANE_JOURNAL_KEYS") -> None:
        self.variable = variable

    def __repr__(self) -> str:
        return f"EnvKeySource({self.variable!r})"

    def _kek(self, scope: str) -> bytes:
        text = os.environ.get(self.variable)
        if text is None:
            raise KeyCustodyError(f"${self.variable} is not set (a JSON object of scope keys)")
        try:
            keys = json.loads(text)
        except ValueError:
            raise KeyCustodyError(f"${self.variable} is not a JSON object") from None
        if not isinstance(keys, dict):
            raise KeyCustodyError(f"${self.variable} is not a JSON object")
        if scope not in keys:
            raise KeyCustodyError(
                f"scope {scope!r} has no key in ${self.variable}; this source is read-only: "
                "add a key for the scope, or use a FileKeySource or a KMS"
            )
        return _b64key(keys[scope], f"${self.variable}[{scope!r}]")

    async def data_key(self, scope: str) -> tuple[bytes, WrappedKey]:
        return _wrap(self._kek(scope), scope, self.wrapped_by)

    async def open(self, wrapped: WrappedKey) -> bytes:
        try:
            kek = self._kek(wrapped.scope)
        except KeyCustodyError:
            raise ScopeErasedError(
                wrapped.scope, None, f"no key for this scope in ${self.variable}"
            ) from None
        return _unwrap(kek, wrapped)

    async def destroy(self, scope: str, at: float, reason: str) -> None:
        raise KeyCustodyError(
            f"${self.variable} is read-only custody: erase scope {scope!r} by removing its "
            f"key from ${self.variable} wherever it is set, or keep keys in a FileKeySource "
            "or a KMS"
        )


class CallbackKeySource:
    """A KMS (AWS KMS, Vault transit, an HSM) behind three async callbacks.

    * ``generate(scope) -> (plaintext_key, ciphertext_blob, key_id)``: a fresh 32-byte data
      key and its form wrapped under the scope's key (KMS ``GenerateDataKey``, Vault
      ``transit/datakey/plaintext``); ``key_id`` names the wrapping key and version;
    * ``decrypt(scope, ciphertext_blob, key_id) -> plaintext_key``: raise
      :class:`ScopeErasedError` when the scope's key no longer exists, anything else for
      an outage (reported as :class:`KeyCustodyError`);
    * ``destroy(scope) -> None``: delete the scope's key, idempotently.
    """

    def __init__(
        self,
        generate: Callable[[str], Awaitable[tuple[bytes, bytes, str]]],
        decrypt: Callable[[str, bytes, str], Awaitable[bytes]],
        destroy: Callable[[str], Awaitable[None]],
    ) -> None:
        self._generate, self._decrypt, self._destroy = generate, decrypt, destroy

    def __repr__(self) -> str:
        return "CallbackKeySource(<kms>)"

    async def data_key(self, scope: str) -> tuple[bytes, WrappedKey]:
        try:
            key, blob, key_id = await self._generate(scope)
        except (ScopeErasedError, KeyCustodyError):
            raise
        except Exception as exc:
            raise KeyCustodyError(
                f"the KMS did not mint a data key for scope {scope!r} ({type(exc).__name__})"
            ) from None
        if len(key) != KEY_BYTES or not key_id:
            raise KeyCustodyError("the KMS returned a data key that is not 32 bytes, or no key id")
        return bytes(key), WrappedKey(scope, key_id, bytes(blob))

    async def open(self, wrapped: WrappedKey) -> bytes:
        try:
            key = await self._decrypt(wrapped.scope, wrapped.sealed, wrapped.wrapped_by)
        except (ScopeErasedError, EnvelopeRefusedError, KeyCustodyError):
            raise
        except Exception as exc:
            raise KeyCustodyError(
                f"the KMS did not open a data key of scope {wrapped.scope!r} ({type(exc).__name__})"
            ) from None
        if len(key) != KEY_BYTES:
            raise EnvelopeRefusedError("the KMS opened a data key that is not 32 bytes")
        return bytes(key)

    async def destroy(self, scope: str, at: float, reason: str) -> None:
        await self._destroy(scope)


def now() -> float:
    """Wall-clock seconds, for tombstones (a function so tests can read it once)."""
    return time.time()
