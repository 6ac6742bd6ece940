"""Per-message TTLs (`Nats-TTL`) and subject delete markers, as nats-server reads and writes them.

A message's TTL counts from its timestamp, in whole seconds: a Go duration of at least a second
("90s", "1h"), a number of seconds ("60"), or "never" (-1: exempt from the stream's max_age
too). A stream with `subject_delete_marker_ttl` does not simply drop the last message of a
subject when it ages out: it publishes a delete marker in its place (nats-server's filestore
handleRemovalOrSdm), a message that rolls the subject up and expires itself after the marker
TTL, so that watchers see the key go.
"""

from __future__ import annotations

from typing import Final

from infinistream.jetstream.api import StreamConfig
from infinistream.jetstream.durations import SECOND_NS, go_duration, parse_go_duration
from infinistream.protocol import header_int, header_value, set_header

TTL_HEADER: Final = b"Nats-TTL"
MARKER_REASON: Final = b"Nats-Marker-Reason"
KV_OPERATION: Final = b"KV-Operation"
NEVER: Final = -1
# About 300 years; see parse_ttl.
MAX_TTL_SECONDS: Final = 10**10
_INT64_LIMIT: Final = 1 << 63


class InvalidTTL(ValueError):
    """A `Nats-TTL` that is neither "never", a duration of a second or more, nor seconds."""


def parse_ttl(raw: bytes) -> int:
    """nats-server's parseMessageTTL: seconds, NEVER, or 0 (none); InvalidTTL if malformed.

    A TTL beyond MAX_TTL_SECONDS counts as that many: its message outlives any agent either
    way, and its expiry entry keeps the width of the keys it sorts among.
    """
    text = raw.decode(errors="replace")
    if text.lower() == "never":
        return NEVER
    ns = parse_go_duration(text)
    # Go's time.ParseDuration refuses a duration an int64 of nanoseconds cannot hold.
    if ns is not None and -_INT64_LIMIT <= ns < _INT64_LIMIT:
        if ns < SECOND_NS:
            raise InvalidTTL(text)
        return min(ns // SECOND_NS, MAX_TTL_SECONDS)
    # parseInt64: ASCII digits only, anything else is -1, which is refused (as is a number
    # that wraps past 2^63 to a negative one).
    seconds = header_int(raw)
    if seconds < 0:
        raise InvalidTTL(text)
    return min(seconds, MAX_TTL_SECONDS)


def message_ttl(headers: bytes | None) -> int:
    """The TTL a message asks for (0 if none); InvalidTTL if it is malformed."""
    if headers is None:
        return 0
    raw = header_value(headers, TTL_HEADER)
    return parse_ttl(raw) if raw else 0


def asks_ttl(headers: bytes | None) -> bool:
    """Whether a message asks for a TTL it could have (a malformed one asks for none, as in
    nats-server's check for streams without TTLs)."""
    try:
        return message_ttl(headers) != 0
    except InvalidTTL:
        return False


def stored_headers(cfg: StreamConfig, headers: bytes) -> bytes:
    """The headers a message is stored with: with subject delete markers, a TTL is raised to
    the marker TTL at least, or a marker could be missed (nats-server's processJetStreamMsg;
    not with one message per subject, where no older marker can hide behind it)."""
    sdm = cfg.subject_delete_marker_ttl // SECOND_NS
    if sdm <= 0 or cfg.max_msgs_per_subject == 1:
        return headers
    try:
        ttl = message_ttl(headers)
    except InvalidTTL:
        return headers
    if ttl <= 0 or ttl >= sdm:
        return headers
    # nats-server's removeHeaderIfPresent then genHeader: the TTL goes last.
    return set_header(headers, TTL_HEADER, b"%d" % sdm)


def is_delete_marker(headers: bytes | None) -> bool:
    """nats-server's isSubjectDeleteMarker: a marker the server placed, or a KV purge."""
    if not headers:
        return False
    return bool(header_value(headers, MARKER_REASON)) or (
        header_value(headers, KV_OPERATION) == b"PURGE"
    )


def marker_headers(cfg: StreamConfig) -> bytes:
    """The headers of the delete marker that replaces a subject's last message as it ages out."""
    return (
        b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: %s\r\nNats-Rollup: sub\r\n\r\n"
        % go_duration(cfg.subject_delete_marker_ttl // SECOND_NS * SECOND_NS).encode()
    )
