"""A stream's identity, as nats-server names one incarnation of a stream: the short hash
(getHash: eight base-62 digits of a SHA-256) of its creation time in RFC 3339. A stream
deleted and made again under the same name has another; sources carry it in their
`Nats-Stream-Source` header to notice that their origin was made again.
"""

from __future__ import annotations

import hashlib
from typing import Final

from infinistream.jetstream.times import go_time

DIGITS: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
HASH_LEN: Final = 8


def short_hash(text: str) -> str:
    """nats-server's getHash of `text`."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(DIGITS[b % len(DIGITS)] for b in digest[:HASH_LEN])


def stream_identity(created_ns: int) -> str:
    """The identity of a stream created at `created_ns` (nanoseconds since the epoch)."""
    return short_hash(go_time(created_ns))
