"""A stream's identity, nats-server's short hash of its creation time (jetstream.identity).

That it is nats-server's very hash is checked against nats-server itself, end to end
(tests/e2e/test_sources.py: the identity in its source headers and its stream's `created`).
"""

from __future__ import annotations

from infinistream.jetstream.identity import DIGITS, HASH_LEN, short_hash, stream_identity
from infinistream.jetstream.times import go_time


def test_a_stream_made_again_has_another_identity() -> None:
    created = 1_790_000_000_123_456_789
    assert stream_identity(created) == short_hash(go_time(created))
    assert stream_identity(created) == stream_identity(created)
    assert stream_identity(created) != stream_identity(created + 1)
    identity = stream_identity(created)
    assert len(identity) == HASH_LEN and all(c in DIGITS for c in identity)
