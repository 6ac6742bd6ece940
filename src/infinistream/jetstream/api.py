"""Typed JetStream API requests and stream configuration, as nats-server speaks them.

Each request type has exactly the fields of nats-server's Go struct (its name is `go_name`),
with the Go types that decide how a field is read (`GoType`): requests are decoded by
`jetstream.gojson` with the rules of the Go encoding/json that nats-server decodes with, null,
numbers, case-insensitive keys and unknown fields included. Responses are built as dicts
because nats-server's `omitempty` rules differ field by field and clients read exactly what it
sends. Durations are integer nanoseconds on the wire.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final, Generic, TypeVar

import msgspec

from infinistream.jetstream import errors
from infinistream.jetstream.gojson import (
    GoJSONError,
    GoType,
    decode_request,
    enum,
    go_quote,
    is_empty_object,
    unmarshal_string,
)

__all__ = ["go_quote"]  # re-exported: the %q of nats-server's error texts

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
# batches, persist modes and counters, 2.11's per-message TTLs and delete markers.
NATS_COMPAT_VERSION = "2.12.0"
# nats-server's JetStream API level of that release (2.11: 1, 2.12: 2).
API_LEVEL = 2

# Go's integer types as request fields have them. msgspec bounds what it can (it can not bound
# above int64); gojson checks every range as Go does.
GoInt = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1), GoType("int")]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1), GoType("int64")]
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1), GoType("int32")]
UInt64 = Annotated[int, msgspec.Meta(ge=0), GoType("uint64")]
Duration = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1), GoType("time.Duration")]
# A time.Time: RFC 3339 text as the client sent it (None: a nil *time.Time, or not sent).
GoTime = Annotated[str, GoType("time.Time")]

T = TypeVar("T", bound=msgspec.Struct)


def _quoted(*names: str) -> dict[str, str]:
    return {f'"{name}"': name for name in names}


# nats-server's enums read their raw JSON themselves (server/store.go, stream.go UnmarshalJSON).
Retention = Annotated[
    str, enum("server.RetentionPolicy", _quoted("limits", "interest", "workqueue"))
]
Discard = Annotated[str, enum("server.DiscardPolicy", _quoted("old", "new"), lower=True)]
Storage = Annotated[str, enum("server.StorageType", _quoted("file", "memory"))]
PersistMode = Annotated[
    str, enum("server.PersistModeType", {'"default"': "default", '""': ""} | _quoted("async"))
]


def _compression(raw: bytes) -> str:
    """StoreCompression's UnmarshalJSON: a JSON string, "s2" or "none"."""
    name = unmarshal_string(raw)
    if name not in ("s2", "none"):
        raise GoJSONError("unknown compression algorithm")
    return name


Compression = Annotated[str, GoType("server.StoreCompression", _compression)]


class ConsumerLimits(msgspec.Struct, omit_defaults=True):
    go_name: ClassVar[str] = "StreamConsumerLimits"

    inactive_threshold: Duration = 0
    max_ack_pending: GoInt = 0


# What a stream config says of the features InfiniStream refuses (mirrors, sources, placement,
# subject transforms, republish) is decoded as nats-server's structs are, so that a malformed
# one gets nats-server's answer, and a well-formed one the refusal.
class Placement(msgspec.Struct, omit_defaults=True):
    go_name: ClassVar[str] = "Placement"

    cluster: str = ""
    tags: list[str] | None = None
    preferred: str = ""


class SubjectTransformConfig(msgspec.Struct):
    # Both fields always written, empty too: Go's struct has no omitempty on them.
    go_name: ClassVar[str] = "SubjectTransformConfig"

    src: str = ""
    dest: str = ""


class ExternalStream(msgspec.Struct, omit_defaults=True):
    go_name: ClassVar[str] = "ExternalStream"

    api: str = ""
    deliver: str = ""


class StreamConsumerSource(msgspec.Struct, omit_defaults=True):
    go_name: ClassVar[str] = "StreamConsumerSource"

    name: str = ""
    deliver_subject: str = ""


class StreamSource(msgspec.Struct, omit_defaults=True):
    go_name: ClassVar[str] = "StreamSource"

    name: str = ""
    opt_start_seq: UInt64 = 0
    opt_start_time: GoTime | None = None
    filter_subject: str = ""
    subject_transforms: list[SubjectTransformConfig] | None = None
    external: ExternalStream | None = None
    consumer: StreamConsumerSource | None = None


class RePublish(msgspec.Struct, omit_defaults=True):
    go_name: ClassVar[str] = "RePublish"

    src: str = ""
    dest: str = ""
    headers_only: bool = False


class StreamConfig(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A stream's configuration as requested; `streams.normalize` fills the defaults.

    Not strict as a msgspec type: stored records decode with it too. Requests are decoded as
    `StreamConfigRequest`, strictly.
    """

    go_name: ClassVar[str] = "StreamConfig"

    name: str = ""
    description: str = ""
    subjects: list[str] = msgspec.field(default_factory=list)
    retention: Retention = "limits"
    max_consumers: GoInt = 0
    max_msgs: Int64 = 0
    max_bytes: Int64 = 0
    max_age: Duration = 0
    max_msgs_per_subject: Int64 = 0
    max_msg_size: Int32 = 0
    discard: Discard = "old"
    storage: Storage = "file"
    num_replicas: GoInt = 0
    no_ack: bool = False
    duplicate_window: Duration = 0
    placement: Placement | None = None
    mirror: StreamSource | None = None
    sources: Annotated[list[StreamSource], GoType("[]*server.StreamSource")] | None = None
    compression: Compression = "none"
    first_seq: UInt64 = 0
    subject_transform: SubjectTransformConfig | None = None
    republish: RePublish | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: ConsumerLimits = msgspec.field(default_factory=ConsumerLimits)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: Duration = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    persist_mode: PersistMode = ""
    allow_batched: bool = False
    metadata: dict[str, str] | None = None


class StreamConfigRequest(StreamConfig, kw_only=True):
    """STREAM.CREATE and STREAM.UPDATE bodies: the config and the request's `pedantic`."""

    go_name: ClassVar[str] = "StreamConfigRequest"

    pedantic: bool = False

    def config(self) -> StreamConfig:
        fields = {f: getattr(self, f) for f in StreamConfig.__struct_fields__}
        return StreamConfig(**fields)


Listed = TypeVar("Listed")


@dataclass(frozen=True)
class Page(Generic[Listed]):
    """One page of a list request's answer, and what nats-server's ApiPaged says of it."""

    items: Sequence[Listed]
    total: int
    offset: int
    limit: int

    def response(self, kind: str) -> dict[str, Any]:
        """The response's type and ApiPaged fields; the caller adds the page's items."""
        return {
            "type": TYPE_PREFIX + kind,
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
        }


def page_of(items: Sequence[Listed], offset: int, limit: int) -> Page[Listed]:
    """The page of `items` from `offset`; nats-server clamps an offset past the end to the
    total (an empty page)."""
    start = min(max(offset, 0), len(items))
    return Page(items[start : start + limit], len(items), start, limit)


# Request types: each has exactly the fields of nats-server's Go struct, named by `go_name`.
class PagedRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    go_name: ClassVar[str] = "JSApiConsumersRequest"

    offset: GoInt = 0


class StreamNamesRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    go_name: ClassVar[str] = "JSApiStreamNamesRequest"

    offset: GoInt = 0
    subject: str = ""


class StreamListRequest(StreamNamesRequest, forbid_unknown_fields=True):
    go_name: ClassVar[str] = "JSApiStreamListRequest"


class StreamInfoRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    go_name: ClassVar[str] = "JSApiStreamInfoRequest"

    offset: GoInt = 0
    deleted_details: bool = False
    subjects_filter: str = ""


class StreamPurgeRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    go_name: ClassVar[str] = "JSApiStreamPurgeRequest"

    seq: UInt64 = 0
    filter: str = ""
    keep: UInt64 = 0


class MsgDeleteRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    go_name: ClassVar[str] = "JSApiMsgDeleteRequest"

    seq: UInt64 = 0
    no_erase: bool = False


class MsgGetRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    go_name: ClassVar[str] = "JSApiMsgGetRequest"

    seq: UInt64 = 0
    last_by_subj: str = ""
    next_by_subj: str = ""
    batch: GoInt = 0
    max_bytes: GoInt = 0
    start_time: GoTime | None = None
    multi_last: list[str] | None = None
    up_to_seq: UInt64 = 0
    up_to_time: GoTime | None = None
    no_hdr: bool = False


def decode(data: bytes, kind: type[T]) -> T:
    """A request body as nats-server's strict decoder reads it: an empty body is all defaults,
    and what it refuses is refused with JSInvalidJSONErr (400, 10025) in Go's words."""
    try:
        return decode_request(data, kind)
    except GoJSONError as exc:
        raise errors.invalid_json(exc) from None


def decode_if_object(data: bytes, kind: type[T]) -> T:
    """A body read only where it is a JSON object or array (nats-server's isJSONObjectOrArray,
    before the info, list, purge and pause requests): any other body asks for the defaults."""
    if data.lstrip(b" \t\n\r")[:1] in (b"{", b"["):
        return decode(data, kind)
    return kind()


def is_empty_request(data: bytes) -> bool:
    """nats-server's isEmptyRequest: no body, or one JSON object with no fields."""
    return not data or is_empty_object(data)


_json_encode = msgspec.json.Encoder().encode


def encode(response: dict[str, Any]) -> bytes:
    return _json_encode(response)


# The StreamConfig fields nats-server leaves out at their zero value (`omitempty` in its
# JSON tags); the others are always rendered.
_OMITTED_WHEN_EMPTY: Final = frozenset(
    {
        "description",
        "subjects",
        "max_msg_size",
        "no_ack",
        "duplicate_window",
        "placement",
        "mirror",
        "sources",
        "first_seq",
        "subject_transform",
        "republish",
        "discard_new_per_subject",
        "subject_delete_marker_ttl",
        "allow_msg_counter",
        "allow_atomic",
        "allow_msg_schedules",
        "persist_mode",
        "allow_batched",
        "metadata",
    }
)


def stream_config_to_wire(cfg: StreamConfig) -> dict[str, Any]:
    """The config as nats-server renders it: its fields in order, less those `omitempty`
    leaves out."""
    out: dict[str, Any] = {}
    for name in StreamConfig.__struct_fields__:
        value = getattr(cfg, name)
        if value or name not in _OMITTED_WHEN_EMPTY:
            out[name] = msgspec.to_builtins(value)
    if cfg.persist_mode == "default":
        del out["persist_mode"]
    if cfg.republish is not None:
        # RePublish's omitempty: src (never empty once checked) and headers_only, not dest.
        rp = cfg.republish
        out["republish"] = {"src": rp.src} if rp.src else {}
        out["republish"]["dest"] = rp.dest
        if rp.headers_only:
            out["republish"]["headers_only"] = True
    return out
