"""An account's JetStream limits, checked as nats-server checks them when a stream or a
consumer is created or updated.

Streams reserve what their `max_bytes` says, per storage type: a stream may be created (or
grown) only while the account's reservations stay within its `max_mem` / `max_file`. A stream
with no `max_bytes` reserves nothing, unless the account requires one (`max_bytes_required`).
The checks read the catalog the caller just refreshed and whose marker its transaction
compares, so two agents creating streams at once can not both pass a limit.
"""

from __future__ import annotations

from collections.abc import Iterable

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.security.config import JetStreamLimits

__all__ = ["check_consumer_count", "check_stream"]


def check_stream(
    limits: JetStreamLimits,
    cfg: StreamConfig,
    others: Iterable[StreamConfig],
    *,
    storage: str,
    creating: bool,
) -> None:
    """Refuse `cfg` if the account's limits do not allow it beside its `others` (every other
    stream of the account).

    `storage` is the storage the request asked for: every stream is kept in object storage
    (its stored config says `file`), so a stream asked in memory is held to `max_mem` when it
    is created, as nats-server holds it, and counts against `max_file` once it exists.
    """
    others = list(others)
    if creating and 0 < limits.max_streams <= len(others):
        raise errors.maximum_streams_limit()
    if limits.max_bytes_required and cfg.max_bytes <= 0:
        raise errors.stream_max_bytes_required()
    memory = storage == "memory"
    limit = limits.max_mem if memory else limits.max_file
    if limit < 0:
        return
    reserved = sum(
        o.max_bytes for o in others if o.max_bytes > 0 and (o.storage == "memory") == memory
    )
    # A stream without max_bytes still needs room for a byte, as in nats-server.
    if reserved + max(cfg.max_bytes, 1) > limit:
        raise errors.memory_resources_exceeded() if memory else errors.storage_resources_exceeded()


def check_consumer_count(limits: JetStreamLimits, consumers: int) -> None:
    """Refuse one more consumer for an account that has `consumers` already."""
    if 0 < limits.max_consumers <= consumers:
        raise errors.maximum_consumers_limit()
