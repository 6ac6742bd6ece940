"""Encryption at rest: sealed object sections and sealed metadata values.

A sealed section (codec flag `CODEC_SEALED` in the TOC and in the index entry) is stored as

    b"ISE1" | u8 cipher | u8 key_id_len | key_id (ascii) | u16 wrapped_len | wrapped data key
    | nonce (12) | AEAD ciphertext of the section's (possibly compressed) record bytes + tag

Each object gets its own random 256-bit data key (`Encryption.sealer`), wrapped by the
operator's current key-encryption key (`keys.KeyProvider`) and repeated in each of its sealed
sections, so that a section fetched whole with one ranged GET carries all a reader needs, and a
reader that holds the KEK opens it without touching anything else. Each section has its own
random nonce. The associated data is the envelope's magic and cipher byte only: the wrapped
key and its id may change (`rewrap`, for key rotation) without touching the ciphertext.

Everything of a message is inside: subject, headers and payload are the records' bytes. What
stays in clear in the object: the stream name and the sizes in the TOC, the section index (the
offsets of records in the plain section), the key id.

A metadata value (an index entry: subjects and record lengths) is sealed as

    0xc1 b"IS1" | u8 cipher | u8 key_id_len | key_id | nonce (12) | ciphertext + tag

with a key fixed per KEK (`KeyProvider.values_key`) and the metadata key as associated data, so
a value cannot be moved to another key. 0xc1 is the one byte msgpack never uses, so a value
written before encryption was turned on (msgpack) is told apart from a sealed one.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct

from cryptography.exceptions import InvalidTag

from .keys import NONCE_BYTES, Aead, KeyProvider, KeyRefusedError, aead

__all__ = [
    "SEALED_MAGIC",
    "VALUE_MAGIC",
    "Encryption",
    "SealError",
    "Sealer",
    "section_key_id",
    "value_key_id",
]

SEALED_MAGIC = b"ISE1"
VALUE_MAGIC = b"\xc1IS1"
_HEAD = struct.Struct("<4sBB")
_WRAPPED = struct.Struct("<H")
_VALUE_HEAD = struct.Struct("<4sBB")
_TAG_BYTES = 16
DATA_KEY_BYTES = 32
# Data keys kept unwrapped, by (key id, wrapped bytes): a KMS would otherwise be asked once per
# section read. Cleared when full (no LRU bookkeeping on the read path).
DATA_KEY_CACHE = 4096

BytesLike = bytes | bytearray | memoryview


class SealError(Exception):
    """Sealed bytes that are damaged: a cut envelope, or a ciphertext that does not
    authenticate under a data key that did unwrap."""


class Sealer:
    """Seals the sections of one object under one new data key."""

    def __init__(self, keys: KeyProvider, cipher: int) -> None:
        data_key = os.urandom(DATA_KEY_BYTES)
        self.key_id, wrapped = keys.wrap(data_key)
        kid = self.key_id.encode()
        self._aad = SEALED_MAGIC + bytes([cipher])
        self._head = (
            _HEAD.pack(SEALED_MAGIC, cipher, len(kid)) + kid + _WRAPPED.pack(len(wrapped)) + wrapped
        )
        self._aead = aead(cipher, data_key)

    def seal(self, plain: BytesLike) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return self._head + nonce + self._aead.encrypt(nonce, bytes(plain), self._aad)


class _Envelope:
    __slots__ = ("body_at", "cipher", "key_id", "wrapped", "wrapped_at")

    def __init__(self, stored: BytesLike) -> None:
        mv = memoryview(stored)
        if len(mv) < _HEAD.size:
            raise SealError("sealed section shorter than its envelope")
        magic, self.cipher, kid_len = _HEAD.unpack_from(mv, 0)
        if magic != SEALED_MAGIC:
            raise SealError("sealed section does not start with its envelope")
        at = _HEAD.size
        self.key_id = bytes(mv[at : at + kid_len]).decode("ascii", "replace")
        at += kid_len
        if len(mv) < at + _WRAPPED.size:
            raise SealError("sealed section envelope is cut short")
        (wrapped_len,) = _WRAPPED.unpack_from(mv, at)
        self.wrapped_at = at
        at += _WRAPPED.size
        self.wrapped = bytes(mv[at : at + wrapped_len])
        at += wrapped_len
        self.body_at = at
        if len(mv) < at + NONCE_BYTES + _TAG_BYTES:
            raise SealError("sealed section envelope is cut short")


def section_key_id(stored: BytesLike) -> str:
    """The id of the KEK that a sealed section's data key is wrapped by."""
    return _Envelope(stored).key_id


def value_key_id(value: bytes) -> str | None:
    """The KEK id a metadata value is sealed under; None for a value in clear."""
    if not value.startswith(VALUE_MAGIC) or len(value) < _VALUE_HEAD.size:
        return None
    _, _, kid_len = _VALUE_HEAD.unpack_from(value, 0)
    return value[_VALUE_HEAD.size : _VALUE_HEAD.size + kid_len].decode("ascii", "replace")


class Encryption:
    """The operator's keys and cipher: seals what this process writes, opens what it reads."""

    def __init__(self, keys: KeyProvider, cipher: int) -> None:
        aead(cipher, bytes(DATA_KEY_BYTES))  # an unknown cipher fails here, not at first use
        self.keys = keys
        self.cipher = cipher
        self._data_keys: dict[tuple[str, bytes], Aead] = {}
        self._value_keys: dict[tuple[str, int], Aead] = {}
        self._token_keys: dict[str, bytes] = {}
        # Metadata values refused for want of their key, since start (sections refused are
        # counted by their reader).
        self.value_refusals = 0

    @property
    def current_id(self) -> str:
        return self.keys.current_id

    # -- sections ----------------------------------------------------------------------------

    def sealer(self) -> Sealer:
        """A new data key for one object."""
        return Sealer(self.keys, self.cipher)

    def open(self, stored: BytesLike) -> bytes:
        """The bytes a sealed section holds. Raises `KeyRefusedError` when its key is not
        held, `SealError` when the bytes are damaged."""
        env = _Envelope(stored)
        box = self._data_key(env)
        mv = memoryview(stored)
        nonce = bytes(mv[env.body_at : env.body_at + NONCE_BYTES])
        try:
            return box.decrypt(
                nonce, bytes(mv[env.body_at + NONCE_BYTES :]), SEALED_MAGIC + bytes([env.cipher])
            )
        except InvalidTag:
            raise SealError("sealed section does not authenticate (damaged)") from None

    def rewrap(self, stored: BytesLike) -> bytes:
        """The same sealed section with its data key wrapped by the current KEK; the
        ciphertext is untouched. A section already under the current KEK comes back as is."""
        env = _Envelope(stored)
        if env.key_id == self.keys.current_id:
            return bytes(stored)
        key_id, wrapped = self.keys.wrap(self._unwrap(env))
        kid = key_id.encode()
        head = _HEAD.pack(SEALED_MAGIC, env.cipher, len(kid)) + kid
        return (
            head + _WRAPPED.pack(len(wrapped)) + wrapped + bytes(memoryview(stored)[env.body_at :])
        )

    def _unwrap(self, env: _Envelope) -> bytes:
        return self.keys.unwrap(env.key_id, env.wrapped)

    def _data_key(self, env: _Envelope) -> Aead:
        cached = self._data_keys.get((env.key_id, env.wrapped))
        if cached is not None:
            return cached
        box = aead(env.cipher, self._unwrap(env))
        if len(self._data_keys) >= DATA_KEY_CACHE:
            self._data_keys.clear()
        self._data_keys[(env.key_id, env.wrapped)] = box
        return box

    # -- metadata values ---------------------------------------------------------------------

    def seal_value(self, mkey: str, value: bytes) -> bytes:
        kid = self.keys.current_id
        nonce = os.urandom(NONCE_BYTES)
        kb = kid.encode()
        head = _VALUE_HEAD.pack(VALUE_MAGIC, self.cipher, len(kb)) + kb
        return head + nonce + self._value_box(kid, self.cipher).encrypt(nonce, value, mkey.encode())

    def open_value(self, mkey: str, value: bytes) -> bytes:
        """The value in clear: a sealed one opened, one written in clear as it is."""
        if not value.startswith(VALUE_MAGIC):
            return value
        if len(value) < _VALUE_HEAD.size:
            raise SealError(f"metadata value of {mkey} is cut short")
        _, cipher, kid_len = _VALUE_HEAD.unpack_from(value, 0)
        at = _VALUE_HEAD.size + kid_len
        if len(value) < at + NONCE_BYTES + _TAG_BYTES:
            raise SealError(f"metadata value of {mkey} is cut short")
        kid = value[_VALUE_HEAD.size : at].decode("ascii", "replace")
        try:
            box = self._value_box(kid, cipher)
        except KeyRefusedError:
            self.value_refusals += 1
            raise
        try:
            return box.decrypt(
                value[at : at + NONCE_BYTES], value[at + NONCE_BYTES :], mkey.encode()
            )
        except InvalidTag:
            raise SealError(f"metadata value of {mkey} does not authenticate") from None

    # -- names in metadata keys ---------------------------------------------------------------

    def token(self, text: str) -> str:
        """A keyed hash of `text` under the current key: a name (a Nats-Msg-Id) that metadata
        keys may hold without holding the name. Equal names give equal tokens."""
        return self._token(self.keys.current_id, text)

    def tokens(self, text: str) -> list[str]:
        """`text`'s token under every key held, the current key's first: what a lookup of a
        name written before a key rotation must try."""
        return [self._token(kid, text) for kid in self.keys.key_ids()]

    def _token(self, kid: str, text: str) -> str:
        key = self._token_keys.get(kid)
        if key is None:
            base = self.keys.values_key(kid)
            key = self._token_keys[kid] = hmac.new(base, b"names in keys", hashlib.sha256).digest()
        return "~" + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:40]

    def _value_box(self, kid: str, cipher: int) -> Aead:
        box = self._value_keys.get((kid, cipher))
        if box is None:
            box = self._value_keys[(kid, cipher)] = aead(cipher, self.keys.values_key(kid))
        return box
