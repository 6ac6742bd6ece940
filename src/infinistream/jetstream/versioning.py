"""The versioning metadata nats-server keeps in stream and consumer configs (ADR-44).

A config's stored metadata holds `_nats.req.level`: the JetStream API level it needs, from the
features it uses and the release that brought each (server/jetstream_versioning.go). Every
answer that shows a config adds `_nats.ver` and `_nats.level`, the server's version and API
level; those two are never stored, and a config sent back with them (as clients do when they
update what they read) has them taken out. The required level is worked out anew on every
create and update, whatever the request says, and a config compared with the one stored (an
identical create) is compared as if it had the stored level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from infinistream.jetstream.api import API_LEVEL, NATS_COMPAT_VERSION

if TYPE_CHECKING:
    from infinistream.jetstream.api import StreamConfig

REQUIRED_LEVEL: Final = "_nats.req.level"
SERVER_VERSION: Final = "_nats.ver"
SERVER_LEVEL: Final = "_nats.level"
_KEYS: Final = (REQUIRED_LEVEL, SERVER_VERSION, SERVER_LEVEL)


def stream_required_level(cfg: StreamConfig) -> int:
    """The API level a stream config needs (setStaticStreamMetadata)."""
    level = 0
    if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0:
        level = 1  # 2.11: per-message TTLs and delete markers
    if (
        cfg.allow_msg_counter
        or cfg.allow_atomic
        or cfg.allow_msg_schedules
        or cfg.persist_mode == "async"
    ):
        level = 2  # 2.12: counters, atomic batches, schedules, async persistence
    if cfg.allow_batched:
        level = 4  # 2.14: fast batch publishing
    return level


def consumer_required_level(*, paused: bool, priority: bool, ack_flow_control: bool) -> int:
    """The API level a consumer config needs (setStaticConsumerMetadata): 1 once it is paused
    or uses priority groups (2.11), 4 for acks by flow control (2.14)."""
    if ack_flow_control:
        return 4
    return 1 if paused or priority else 0


def with_required_level(metadata: dict[str, str] | None, level: int) -> dict[str, str]:
    """`metadata` as stored: without the server's own keys, with the required level."""
    stored = without_server_keys(metadata) or {}
    stored[REQUIRED_LEVEL] = str(level)
    return stored


def without_server_keys(metadata: dict[str, str] | None) -> dict[str, str] | None:
    """`metadata` without `_nats.ver` and `_nats.level` (deleteDynamicMetadata)."""
    if metadata is None:
        return None
    return {k: v for k, v in metadata.items() if k not in (SERVER_VERSION, SERVER_LEVEL)}


def as_answered(metadata: dict[str, str] | None) -> dict[str, str]:
    """Stored metadata as an answer shows it: with this server's version and API level."""
    shown = dict(metadata or {})
    shown[SERVER_VERSION] = NATS_COMPAT_VERSION
    shown[SERVER_LEVEL] = str(API_LEVEL)
    return shown


def without_versioning(metadata: dict[str, str] | None) -> dict[str, str] | None:
    """`metadata` without any of the versioning keys, None if nothing else is left: configs
    compare so, whatever level each was stored with (copyStreamMetadata,
    copyConsumerMetadata)."""
    if metadata is None:
        return None
    rest = {k: v for k, v in metadata.items() if k not in _KEYS}
    return rest or None
