"""Key-encryption keys (KEKs): who holds them, how a data key is wrapped and unwrapped.

Every sealed object section carries its data key wrapped by a KEK, and the KEK's id (see
`crypto`). The KEK itself never leaves the `KeyProvider`: not into objects, not into metadata.
A provider is the one thing a KMS needs to implement (wrap, unwrap, a key for metadata
values); `LocalKeys` is the implementation for keys the operator hands the agent (a config
string, a key file, an environment variable).

A provider's calls are synchronous and made on the agent's event loop: `wrap` once per object
written, `unwrap` once per data key first read (then cached by `crypto.Encryption`). A KMS
implementation must keep them short (a local cache of what the KMS returned, refreshed off the
loop); making them asynchronous is left for when a KMS provider exists.

Key ids are derived from the key (a hash), so an operator never names keys and two agents given
the same key agree on its id; the id tells nothing about the key. For rotation a provider holds
one current key (new objects) and any number of previous ones (reading older objects until
`infinistream pipeline rewrap` has moved them to the current key).
"""

from __future__ import annotations

import hashlib
import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "CIPHERS",
    "CIPHER_AES",
    "CIPHER_CHACHA",
    "KEY_ENV",
    "PREV_KEY_ENV",
    "KeyProvider",
    "KeyRefusedError",
    "LocalKeys",
    "aead",
    "cipher_from_name",
    "cipher_name",
    "kek_from_text",
    "key_id_of",
    "load_provider",
    "read_key_file",
]

CIPHER_CHACHA = 1
"""ChaCha20-Poly1305: nats-server's default cipher (`cipher: chachapoly`)."""
CIPHER_AES = 2
"""AES-256-GCM (`cipher: aes`)."""
CIPHERS = {"chachapoly": CIPHER_CHACHA, "chacha": CIPHER_CHACHA, "aes": CIPHER_AES}
_NAMES = {CIPHER_CHACHA: "chachapoly", CIPHER_AES: "aes"}

KEY_ENV = "INFINISTREAM_KEY"
"""The environment variable a key may come from (its text, as `jetstream { key }` takes it)."""
PREV_KEY_ENV = "INFINISTREAM_PREV_KEY"

KEY_BYTES = 32
NONCE_BYTES = 12
_KEK_INFO = b"infinistream key-encryption key v1"
_VALUES_INFO = b"infinistream metadata values v1"
_ID_PREFIX = b"infinistream key id v1\0"
_WRAP_AAD = b"infinistream data key v1"

Aead = AESGCM | ChaCha20Poly1305


class KeyRefusedError(Exception):
    """A sealed object or value needs a key this process does not hold (a wrong key, or an
    old one already retired), or there is no key at all. Nothing is served in its place."""


def cipher_from_name(name: str) -> int:
    cipher = CIPHERS.get(name.strip().lower())
    if cipher is None:
        raise ValueError(f"unknown cipher {name!r} (known: chachapoly, aes)")
    return cipher


def cipher_name(cipher: int) -> str:
    return _NAMES.get(cipher, f"unknown cipher {cipher}")


def aead(cipher: int, key: bytes) -> Aead:
    if cipher == CIPHER_CHACHA:
        return ChaCha20Poly1305(key)
    if cipher == CIPHER_AES:
        return AESGCM(key)
    raise KeyRefusedError(f"unknown cipher {cipher}")


def kek_from_text(text: str | bytes) -> bytes:
    """The 256-bit KEK of a key as the operator writes it (`key: "..."`, a key file, the
    environment). Any string works, as in nats-server; it should be long and random."""
    raw = text.encode() if isinstance(text, str) else text
    raw = raw.strip()
    if not raw:
        raise ValueError("an encryption key must not be empty")
    return HKDF(hashes.SHA256(), KEY_BYTES, salt=None, info=_KEK_INFO).derive(raw)


def key_id_of(kek: bytes) -> str:
    """The public name of a KEK: 16 hex digits of a hash of it."""
    return hashlib.sha256(_ID_PREFIX + kek).hexdigest()[:16]


def read_key_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class KeyProvider(ABC):
    """Wraps and unwraps data keys under KEKs it holds; what a KMS implements."""

    @property
    @abstractmethod
    def current_id(self) -> str:
        """The id of the KEK that new data keys are wrapped with."""

    @abstractmethod
    def key_ids(self) -> Sequence[str]:
        """Every KEK id this provider can unwrap with, the current one first."""

    @abstractmethod
    def wrap(self, data_key: bytes) -> tuple[str, bytes]:
        """`data_key` wrapped by the current KEK: (its id, the wrapped bytes)."""

    @abstractmethod
    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        """The data key; raises `KeyRefusedError` if `key_id` is not held or the wrapped
        bytes do not open under it."""

    @abstractmethod
    def values_key(self, key_id: str) -> bytes:
        """A 256-bit key, fixed for `key_id`, that seals small metadata values (index
        entries) directly: one per value would cost a KMS call per read. A KMS provider
        keeps one data key per KEK for this, wrapped, wherever it keeps state."""


def load_provider(spec: str) -> KeyProvider:
    """The key provider a setting names, `package.module:name`: a `KeyProvider` class or a
    function returning one, called without arguments (a KMS provider reads its own settings,
    its credentials from where its SDK looks). Raises ValueError naming what is wrong."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ValueError(f"key provider {spec!r}: expected package.module:name")
    try:
        factory = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"key provider {spec!r}: {exc}") from None
    provider = factory()
    if not isinstance(provider, KeyProvider):
        raise ValueError(
            f"key provider {spec!r} made a {type(provider).__name__}, not a KeyProvider"
        )
    return provider


class LocalKeys(KeyProvider):
    """KEKs held in this process, from the operator's config, key file or environment."""

    def __init__(self, current: bytes, previous: Sequence[bytes] = (), *, cipher: int) -> None:
        self.cipher = cipher
        self._keks: dict[str, bytes] = {}
        for kek in (current, *previous):
            if len(kek) != KEY_BYTES:
                raise ValueError(f"a key-encryption key is {KEY_BYTES} bytes")
            self._keks.setdefault(key_id_of(kek), kek)
        self._current = key_id_of(current)
        # A wrapped key starts with the cipher it was wrapped with: a server configured with
        # another cipher (or none, chachapoly being the default) still unwraps it.
        self._wrappers = {(kid, c): aead(c, kek) for kid, kek in self._keks.items() for c in _NAMES}

    @classmethod
    def from_texts(
        cls, current: str | bytes, previous: Sequence[str | bytes] = (), *, cipher: int
    ) -> LocalKeys:
        return cls(kek_from_text(current), [kek_from_text(p) for p in previous], cipher=cipher)

    @property
    def current_id(self) -> str:
        return self._current

    def key_ids(self) -> list[str]:
        return [self._current, *(k for k in self._keks if k != self._current)]

    def wrap(self, data_key: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._wrappers[(self._current, self.cipher)].encrypt(nonce, data_key, _WRAP_AAD)
        return self._current, bytes([self.cipher]) + nonce + sealed

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        if key_id not in self._keks:
            raise KeyRefusedError(
                f"sealed with key {key_id}, which this server does not hold "
                f"(it holds {', '.join(self.key_ids())}): wrong or retired encryption key"
            )
        wrapper = self._wrappers.get((key_id, wrapped[0] if wrapped else 0))
        if wrapper is None:
            raise KeyRefusedError(f"a data key wrapped by key {key_id} with an unknown cipher")
        try:
            return wrapper.decrypt(
                wrapped[1 : 1 + NONCE_BYTES], wrapped[1 + NONCE_BYTES :], _WRAP_AAD
            )
        except InvalidTag:
            raise KeyRefusedError(f"a data key wrapped by key {key_id} does not open") from None

    def values_key(self, key_id: str) -> bytes:
        kek = self._keks.get(key_id)
        if kek is None:
            raise KeyRefusedError(
                f"metadata sealed with key {key_id}, which this server does not hold "
                f"(it holds {', '.join(self.key_ids())}): wrong or retired encryption key"
            )
        return HKDF(hashes.SHA256(), KEY_BYTES, salt=None, info=_VALUES_INFO).derive(kek)
