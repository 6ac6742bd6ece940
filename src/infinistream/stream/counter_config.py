"""What a counter stream (`allow_msg_counter`) may not be combined with, as nats-server says.

Every message of a counter stream is an increment on its subject's last value, so nothing
may drop or refuse messages by other rules: no discard new, no per-message TTLs, no message
schedules, and limits retention only (checkStreamCfg, in its order).
"""

from __future__ import annotations

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig


def check_counter(cfg: StreamConfig) -> None:
    if not cfg.allow_msg_counter:
        return
    if cfg.discard == "new":
        raise errors.stream_invalid_config("counter stream cannot use discard new")
    if cfg.allow_msg_ttl:
        raise errors.stream_invalid_config("counter stream cannot use message TTLs")
    if cfg.allow_msg_schedules:
        raise errors.stream_invalid_config("counter stream cannot use message schedules")
    if cfg.retention != "limits":
        raise errors.stream_invalid_config("counter stream can only use limits retention")
