"""Typed JetStream API requests and stream configuration, as nats-server speaks them.

Requests are decoded with msgspec. nats-server 2.15 decodes API requests strictly (its decoder
disallows unknown fields): a request type whose every Go field is modelled here is `strict` and
refuses a field nats-server does not know, with Go's words; the stream configuration (and the
consumer configuration) are not yet checked field by field and still ignore unknown fields.
Responses are built as dicts because nats-server's `omitempty` rules differ field by field
and clients read exactly what it sends. Durations are integer nanoseconds on the wire.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

API_PREFIX = "$JS.API."
# Every response names its JSON schema: this prefix and the response kind.
TYPE_PREFIX = "io.nats.jetstream.api.v1."

# nats-server's defaults and bounds (server/stream.go, server/jetstream_api.go).
DEFAULT_DUPLICATE_WINDOW_NS = 2 * 60 * 1_000_000_000
MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
NAMES_LIMIT = 1024
LIST_LIMIT = 256
# The nats-server release whose client protocol and JetStream API this agent speaks. Clients
# choose API features by the server version they see, so INFO reports this one: 2.12's atomic
# batches and persist modes, 2.11's per-message TTLs and delete markers (of 2.12, counters and
# message schedules are refused with an error that says so).
NATS_COMPAT_VERSION = "2.12.0"
# nats-server's JetStream API level of that release (2.11: 1, 2.12: 2).
API_LEVEL = 2


class ConsumerLimits(msgspec.Struct, omit_defaults=True):
    inactive_threshold: int = 0
    max_ack_pending: int = 0


class StreamConfig(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A stream's configuration as requested; `streams.normalize` fills the defaults."""

    name: str = ""
    description: str = ""
    subjects: list[str] = msgspec.field(default_factory=list)
    retention: str = "limits"
    max_consumers: int = 0
    max_msgs: int = 0
    max_bytes: int = 0
    max_age: int = 0
    max_msgs_per_subject: int = 0
    max_msg_size: int = 0
    discard: str = "old"
    storage: str = "file"
    num_replicas: int = 0
    no_ack: bool = False
    duplicate_window: int = 0
    placement: dict[str, Any] | None = None
    mirror: dict[str, Any] | None = None
    sources: list[dict[str, Any]] | None = None
    compression: str = "none"
    first_seq: int = 0
    subject_transform: dict[str, Any] | None = None
    republish: dict[str, Any] | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: ConsumerLimits = msgspec.field(default_factory=ConsumerLimits)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: int = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    allow_batched: bool = False
    persist_mode: str = ""
    metadata: dict[str, str] | None = None


# Strict request types: each has exactly the fields of nats-server's Go struct (named in
# _GO_INT_FIELDS below), so any other field is refused as nats-server refuses it.
class PagedRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    offset: int = 0


class StreamNamesRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    offset: int = 0
    subject: str = ""


class StreamInfoRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    offset: int = 0
    deleted_details: bool = False
    subjects_filter: str = ""


class StreamPurgeRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    seq: int = 0
    filter: str = ""
    keep: int = 0


class MsgDeleteRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    seq: int = 0
    no_erase: bool = False


class MsgGetRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    seq: int = 0
    last_by_subj: str = ""
    next_by_subj: str = ""
    batch: int = 0
    max_bytes: int = 0
    start_time: str | None = None
    multi_last: list[str] | None = None
    up_to_seq: int = 0
    up_to_time: str | None = None
    no_hdr: bool = False


class DirectGetRequest(MsgGetRequest, forbid_unknown_fields=False):
    """A direct get's body: nats-server's direct get decodes it leniently (json.Unmarshal)."""


# The range of each Go integer type nats-server decodes request fields into.
_GO_INT_RANGES: dict[str, tuple[int, int]] = {
    "int": (-(2**63), 2**63 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "time.Duration": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint64": (0, 2**64 - 1),
}

# Per request type: nats-server's Go struct name and the Go type of each integer field (a dotted
# path for a nested struct's field). msgspec reads any JSON integer into a Python int.
_GO_INT_FIELDS: dict[type[msgspec.Struct], tuple[str, dict[str, str]]] = {
    StreamConfig: (
        "StreamConfigRequest",
        {
            "max_consumers": "int",
            "max_msgs": "int64",
            "max_bytes": "int64",
            "max_age": "time.Duration",
            "max_msgs_per_subject": "int64",
            "max_msg_size": "int32",
            "num_replicas": "int",
            "duplicate_window": "time.Duration",
            "first_seq": "uint64",
            "consumer_limits.inactive_threshold": "time.Duration",
            "consumer_limits.max_ack_pending": "int",
            "subject_delete_marker_ttl": "time.Duration",
        },
    ),
    PagedRequest: ("JSApiConsumersRequest", {"offset": "int"}),
    StreamNamesRequest: ("JSApiStreamNamesRequest", {"offset": "int"}),
    StreamInfoRequest: ("JSApiStreamInfoRequest", {"offset": "int"}),
    StreamPurgeRequest: ("JSApiStreamPurgeRequest", {"seq": "uint64", "keep": "uint64"}),
    MsgDeleteRequest: ("JSApiMsgDeleteRequest", {"seq": "uint64"}),
    MsgGetRequest: (
        "JSApiMsgGetRequest",
        {"seq": "uint64", "batch": "int", "max_bytes": "int", "up_to_seq": "uint64"},
    ),
}


def _check_go_ints(request: msgspec.Struct) -> None:
    """Refuse a number its Go field could not hold, with encoding/json's words.

    nats-server's decoder fails on such a number; taken as it is, a sequence past 2^64 or a
    negative purge `keep` would reach the store (where it can not be written) or the purge
    arithmetic.
    """
    known = _GO_INT_FIELDS.get(type(request))
    if known is None:
        return
    struct_name, fields = known
    for path, go_type in fields.items():
        value: Any = request
        for part in path.split("."):
            value = getattr(value, part)
        low, high = _GO_INT_RANGES[go_type]
        if not low <= value <= high:
            raise msgspec.ValidationError(
                f"json: cannot unmarshal number {value} into Go struct field"
                f" {struct_name}.{path} of type {go_type}"
            )


_UNKNOWN_FIELD = re.compile(r"Object contains unknown field `(.*)`", re.DOTALL)


def go_json_error(exc: msgspec.DecodeError) -> str:
    """The text nats-server's strict decoder gives for an error msgspec reports.

    An unknown field is named as encoding/json names it (`json: unknown field "bogus"`); msgspec
    stops at the first unknown field in the body, as Go reports the first one.
    """
    text = str(exc)
    match = _UNKNOWN_FIELD.fullmatch(text)
    if match is None:
        return text
    return "json: unknown field " + go_quote(match.group(1))


_GO_ESCAPES: dict[str, str] = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def go_quote(text: str) -> str:
    """Go's strconv.Quote (the %q verb), used in the error texts nats-server builds.

    Text decoded with "surrogateescape" shows each byte that was not UTF-8 as a `\\xNN` escape, as
    Go quotes such bytes.
    """
    parts = []
    for ch in text:
        code = ord(ch)
        if ch in _GO_ESCAPES:
            parts.append(_GO_ESCAPES[ch])
        elif 0xDC80 <= code <= 0xDCFF:
            parts.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            parts.append(ch)
        elif code < 0x80:
            parts.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    return '"' + "".join(parts) + '"'


def decode(data: bytes, kind: type[msgspec.Struct]) -> Any:
    """Decode a request body; an empty body means all defaults, as in nats-server.

    A number out of its Go type's range raises msgspec.ValidationError, worded as nats-server's
    decoder words it.
    """
    if not data or data.isspace():
        return kind()
    try:
        request = msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        request = _decode_folded(data, kind, exc)
    _check_go_ints(request)
    return request


def _decode_folded(data: bytes, kind: type[msgspec.Struct], exc: msgspec.ValidationError) -> Any:
    """encode/json matches a key to a field case-insensitively ("SEQ" sets seq), so a key msgspec
    did not know but that names a field in other case is that field, not an unknown one."""
    fields = {name.lower(): name for name in kind.__struct_fields__}
    raw = msgspec.json.decode(data)
    if not isinstance(raw, dict) or not any(
        key not in kind.__struct_fields__ and key.lower() in fields for key in raw
    ):
        raise msgspec.ValidationError(go_json_error(exc)) from None
    folded: dict[str, Any] = {}
    for key, value in raw.items():
        # Go keeps the last value a field is given, whichever case named it.
        name: str = fields.get(str(key).lower(), str(key))
        folded.pop(name, None)
        folded[name] = value
    try:
        return msgspec.convert(folded, kind)
    except msgspec.ValidationError as err:
        raise msgspec.ValidationError(go_json_error(err)) from None


_json_encode = msgspec.json.Encoder().encode


def encode(response: dict[str, Any]) -> bytes:
    return _json_encode(response)


def stream_config_to_wire(cfg: StreamConfig) -> dict[str, Any]:
    """The config as nats-server renders it (its `omitempty` choices, field by field)."""
    out: dict[str, Any] = {"name": cfg.name}
    if cfg.description:
        out["description"] = cfg.description
    if cfg.subjects:
        out["subjects"] = cfg.subjects
    out.update(
        retention=cfg.retention,
        max_consumers=cfg.max_consumers,
        max_msgs=cfg.max_msgs,
        max_bytes=cfg.max_bytes,
        max_age=cfg.max_age,
        max_msgs_per_subject=cfg.max_msgs_per_subject,
    )
    if cfg.max_msg_size:
        out["max_msg_size"] = cfg.max_msg_size
    out.update(discard=cfg.discard, storage=cfg.storage, num_replicas=cfg.num_replicas)
    if cfg.no_ack:
        out["no_ack"] = True
    if cfg.duplicate_window:
        out["duplicate_window"] = cfg.duplicate_window
    out["compression"] = cfg.compression
    if cfg.first_seq:
        out["first_seq"] = cfg.first_seq
    out.update(
        allow_direct=cfg.allow_direct,
        mirror_direct=cfg.mirror_direct,
    )
    if cfg.discard_new_per_subject:
        out["discard_new_per_subject"] = True
    out.update(
        sealed=cfg.sealed,
        deny_delete=cfg.deny_delete,
        deny_purge=cfg.deny_purge,
        allow_rollup_hdrs=cfg.allow_rollup_hdrs,
        consumer_limits=msgspec.to_builtins(cfg.consumer_limits),
        allow_msg_ttl=cfg.allow_msg_ttl,
    )
    if cfg.subject_delete_marker_ttl:
        out["subject_delete_marker_ttl"] = cfg.subject_delete_marker_ttl
    if cfg.allow_atomic:
        out["allow_atomic"] = True
    if cfg.allow_msg_schedules:
        out["allow_msg_schedules"] = True
    if cfg.persist_mode and cfg.persist_mode != "default":
        out["persist_mode"] = cfg.persist_mode
    if cfg.allow_batched:
        out["allow_batched"] = True
    if cfg.metadata:
        out["metadata"] = cfg.metadata
    return out
