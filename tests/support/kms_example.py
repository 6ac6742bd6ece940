"""A key provider that is not `LocalKeys`, plugged in by
`--key-provider support.kms_example:FileKms`: what a KMS integration looks like from
InfiniStream's side.

It stands for a KMS whose keys live in its own store (here a JSON file named by $KMS_FILE:
{"current": "name", "keys": {"name": "hex of 32 bytes", ...}}), which InfiniStream never sees:
the agent holds neither a key in its config nor the file's path in its settings. Key ids are
the KMS's own names. Wrapping is AES-256-GCM under the named key, as a KMS's Encrypt would.
"""

from __future__ import annotations

import hashlib
import json
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from infinistream.storage import KeyProvider, KeyRefusedError


class FileKms(KeyProvider):
    def __init__(self) -> None:
        with open(os.environ["KMS_FILE"]) as f:
            spec = json.load(f)
        self._current = str(spec["current"])
        self._keys = {name: bytes.fromhex(k) for name, k in spec["keys"].items()}

    @property
    def current_id(self) -> str:
        return self._current

    def key_ids(self) -> list[str]:
        return [self._current, *(k for k in self._keys if k != self._current)]

    def wrap(self, data_key: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(12)
        return self._current, nonce + AESGCM(self._keys[self._current]).encrypt(
            nonce, data_key, b"kms"
        )

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        key = self._keys.get(key_id)
        if key is None:
            raise KeyRefusedError(f"the KMS has no key {key_id}")
        try:
            return AESGCM(key).decrypt(wrapped[:12], wrapped[12:], b"kms")
        except InvalidTag:
            raise KeyRefusedError(f"the KMS key {key_id} does not unwrap this") from None

    def values_key(self, key_id: str) -> bytes:
        key = self._keys.get(key_id)
        if key is None:
            raise KeyRefusedError(f"the KMS has no key {key_id}")
        return hashlib.sha256(b"metadata values\0" + key).digest()
