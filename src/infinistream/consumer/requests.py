"""What clients send about consumers, read the way nats-server's Go decoder reads it.

The consumer config and the create request (server/consumer.go ConsumerConfig,
CreateConsumerRequest), and pull requests for $JS.API.CONSUMER.MSG.NEXT (nextReqFromMsg),
decoded by `jetstream.gojson` with Go's rules: a JSON null leaves a field at its zero value,
numbers must fit Go's integer types, the enum fields accept only their names (null included),
with nats-server's error texts. The create request is read by nats-server's strict decoder
(unknown fields refused); a pull request by json.Unmarshal (unknown fields ignored). The rules
about what a config may say are in `consumer.config`.
"""

from __future__ import annotations

import re
from datetime import timedelta, timezone
from typing import Annotated, ClassVar, Final, TypeVar

import msgspec

from infinistream.jetstream import errors
from infinistream.jetstream.api import (
    Duration,
    GoInt,
    GoTime,
    Int64,
    UInt64,
    decode,
    go_quote,
)
from infinistream.jetstream.durations import go_duration
from infinistream.jetstream.gojson import GoJSONError, enum, unmarshal
from infinistream.jetstream.times import go_time, parse_go_time

_Lenient = TypeVar("_Lenient", bound=msgspec.Struct)

DELIVER_POLICIES: Final = (
    "all",
    "last",
    "new",
    "by_start_sequence",
    "by_start_time",
    "last_per_subject",
)
ACK_POLICIES: Final = ("none", "all", "explicit", "flow_control")
REPLAY_POLICIES: Final = ("instant", "original")
PRIORITY_POLICIES: Final = ("none", "overflow", "pinned_client", "prioritized")
ACTIONS: Final = ("", "create", "update")

_ATOI: Final = re.compile(r"[+-]?[0-9]+")
# The offset at the end of an RFC 3339 time, where it is not Z.
_OFFSET: Final = re.compile(r"([+-])([0-9]{2}):([0-9]{2})$")


def _quoted(names: tuple[str, ...]) -> dict[str, str]:
    return {f'"{name}"': name for name in names}


# nats-server's enums read their raw JSON themselves (server/store.go, consumer.go).
DeliverPolicy = Annotated[
    str,
    enum("server.DeliverPolicy", _quoted(DELIVER_POLICIES) | {'"undefined"': "all"}),
]
AckPolicy = Annotated[str, enum("server.AckPolicy", _quoted(ACK_POLICIES))]
ReplayPolicy = Annotated[str, enum("server.ReplayPolicy", _quoted(REPLAY_POLICIES))]
PriorityPolicy = Annotated[
    str,
    enum(
        "server.PriorityPolicy",
        _quoted(PRIORITY_POLICIES),
        error="unknown priority policy: {raw}",
    ),
]
ConsumerAction = Annotated[
    str,
    enum(
        "server.ConsumerAction",
        _quoted(ACTIONS),
        error="unknown consumer action: {raw}",
    ),
]


class ConsumerConfig(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A consumer's configuration as nats-server's JSON has it; `config.normalize` fills it in.

    Defaults are Go's zero values, so an omitted ack_policy is "none", as in nats-server (clients
    such as nats.go send "explicit" themselves). Durations are integer nanoseconds; times are
    RFC 3339 strings, None when unset (nats-server's nil pointers). Fields are declared in
    nats-server's order, which `consumer_config_to_wire` keeps. Not strict as a msgspec type:
    stored records decode with it too.
    """

    go_name: ClassVar[str] = "ConsumerConfig"

    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: DeliverPolicy = "all"
    opt_start_seq: UInt64 = 0
    opt_start_time: GoTime | None = None
    ack_policy: AckPolicy = "none"
    ack_wait: Duration = 0
    max_deliver: GoInt = 0
    backoff: list[Duration] | None = None
    filter_subject: str = ""
    filter_subjects: list[str] | None = None
    replay_policy: ReplayPolicy = "instant"
    rate_limit_bps: UInt64 = 0
    sample_freq: str = ""
    max_waiting: GoInt = 0
    max_ack_pending: GoInt = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: GoInt = 0
    max_expires: Duration = 0
    max_bytes: GoInt = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: Duration = 0
    inactive_threshold: Duration = 0
    num_replicas: GoInt = 0
    mem_storage: bool = False
    direct: bool = False
    sourcing: bool = False
    metadata: dict[str, str] | None = None
    pause_until: GoTime | None = None
    priority_groups: list[str] | None = None
    priority_policy: PriorityPolicy = "none"
    priority_timeout: Duration = 0


class CreateConsumerRequest(
    msgspec.Struct, omit_defaults=True, kw_only=True, forbid_unknown_fields=True
):
    """The body of $JS.API.CONSUMER.CREATE and $JS.API.CONSUMER.DURABLE.CREATE."""

    go_name: ClassVar[str] = "CreateConsumerRequest"

    stream_name: str = ""
    config: ConsumerConfig = msgspec.field(default_factory=ConsumerConfig)
    action: ConsumerAction = ""  # "" creates or updates, "create" only creates, "update" updates
    pedantic: bool = False


def decode_create_request(body: bytes) -> CreateConsumerRequest:
    """Decode a create request, raising JSInvalidJSONErr as nats-server does.

    An empty body is an all-default request, as nats-server's decoder reads it. Timestamps come
    back as nats-server writes them (see `canonical_time`).
    """
    request = decode(body, CreateConsumerRequest)
    config = request.config
    for field in ("opt_start_time", "pause_until"):
        value = getattr(config, field)
        if value is not None:
            setattr(config, field, canonical_time(value))
    return request


class ConsumerPauseRequest(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """$JS.API.CONSUMER.PAUSE's body (nats-server's JSApiConsumerPauseRequest): a time.Time,
    not a pointer, so a null leaves it unset."""

    go_name: ClassVar[str] = "JSApiConsumerPauseRequest"

    pause_until: GoTime | None = None


class ConsumerUnpinRequest(msgspec.Struct, omit_defaults=True):
    """$JS.API.CONSUMER.UNPIN's body (JSApiConsumerUnpinRequest), read with json.Unmarshal."""

    go_name: ClassVar[str] = "JSApiConsumerUnpinRequest"

    group: str = ""


class ConsumerResetRequest(msgspec.Struct, omit_defaults=True):
    """$JS.API.CONSUMER.RESET's body (JSApiConsumerResetRequest), read with json.Unmarshal:
    no sequence is just past the ack floor."""

    go_name: ClassVar[str] = "JSApiConsumerResetRequest"

    seq: UInt64 = 0


def read_lenient(body: bytes, kind: type[_Lenient]) -> _Lenient:
    """`body` as nats-server's json.Unmarshal reads it into `kind` (unknown fields ignored,
    nulls the zero value); JSInvalidJSONErr in Go's words where it refuses it."""
    try:
        return unmarshal(body, kind)
    except GoJSONError as exc:
        raise errors.invalid_json(exc) from None


class NextRequest(msgspec.Struct, omit_defaults=True, kw_only=True, forbid_unknown_fields=True):
    """A pull request (nats-server's JSApiConsumerGetNextRequest); durations in nanoseconds.

    `batch` is kept as sent: in nats-server a batch of 0 or less (a JSON body without "batch")
    still hands out one message. The priority-group fields (ADR-42) are read by consumers with a
    priority policy; for the others, `group` alone is ignored, and the rest refused.
    """

    go_name: ClassVar[str] = "JSApiConsumerGetNextRequest"

    expires: Duration = 0
    batch: GoInt = 0
    max_bytes: GoInt = 0
    no_wait: bool = False
    idle_heartbeat: Duration = 0
    group: str = ""
    min_pending: Int64 = 0
    min_ack_pending: Int64 = 0
    id: str = ""
    priority: GoInt = 0


class NextRequestError(ValueError):
    """A pull request nats-server answers with the status `NATS/1.0 <status> <description>`.

    str() is the reason alone; for a 400 the description is "Bad Request - <reason>", as
    nats-server words it.
    """

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.description = f"Bad Request - {reason}" if status == 400 else reason


def parse_next_request(body: bytes) -> NextRequest:
    """Read a MSG.NEXT body as nats-server's nextReqFromMsg does.

    Empty: one message. A JSON object: the request, as json.Unmarshal reads it (a bad one is a
    400 NextRequestError with Go's words; Go names no struct there, as nats-server decodes
    through a pointer to a pointer). Anything else: a batch size if it is an integer, and one
    message if it is not.
    """
    req = body.strip()
    if not req:
        return NextRequest(batch=1)
    if req.startswith(b"{"):
        try:
            parsed = unmarshal(req, NextRequest, struct_name="")
        except GoJSONError as exc:
            raise NextRequestError(400, str(exc)) from None
        if parsed.idle_heartbeat > 0 and parsed.idle_heartbeat * 2 > parsed.expires:
            # Heartbeats need an expiry of at least two of them, or a client could not tell a
            # missed heartbeat from a finished request.
            raise NextRequestError(400, "heartbeat value too large")
        return parsed
    try:
        return NextRequest(batch=go_atoi(req.decode()))
    except ValueError:  # UnicodeDecodeError too
        return NextRequest(batch=1)


def check_next_request(req: NextRequest, cfg: ConsumerConfig) -> None:
    """The consumer's limits on a pull request, in processNextMsgRequest's order and texts."""
    if cfg.max_batch > 0 and req.batch > cfg.max_batch:
        raise NextRequestError(409, f"Exceeded MaxRequestBatch of {cfg.max_batch}")
    if req.expires != 0 and cfg.max_expires > 0 and req.expires > cfg.max_expires:
        raise NextRequestError(409, f"Exceeded MaxRequestExpires of {go_duration(cfg.max_expires)}")
    if req.max_bytes > 0 and cfg.max_bytes > 0 and req.max_bytes > cfg.max_bytes:
        raise NextRequestError(409, f"Exceeded MaxRequestMaxBytes of {cfg.max_bytes}")
    policy = cfg.priority_policy
    if (req.min_pending != 0 or req.min_ack_pending != 0) and policy != "overflow":
        raise NextRequestError(400, "Not a Overflow Priority consumer")
    if req.id and policy != "pinned_client":
        raise NextRequestError(400, "Not a Pinned Client Priority consumer")
    if not 0 <= req.priority <= 9:
        raise NextRequestError(400, "Priority must be between 0 and 9")
    if policy != "none":
        if not req.group:
            raise NextRequestError(400, "Priority Group missing")
        if req.group not in (cfg.priority_groups or ()):
            raise NextRequestError(400, "Invalid Priority Group")


def valid_group_name(group: str) -> bool:
    """A priority group's name: 1 to 16 of A-Z, a-z, 0-9, `/_=-` (nats-server's validGroupName)."""
    return _GROUP_NAME.fullmatch(group) is not None


_GROUP_NAME: Final = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")


def timestamp_ns(value: str | None) -> int:
    """Nanoseconds since the epoch of opt_start_time/pause_until; 0 when unset."""
    return 0 if value is None else parse_go_time(value)


def canonical_time(text: str) -> str:
    """An RFC 3339 timestamp as nats-server writes it back: the instant, at the offset it was
    sent with (`Z` for none), its fraction without trailing zeros. ValueError with Go's words
    where time.Time's decoding refuses it."""
    ns = parse_go_time(text)
    offset = _OFFSET.search(text)
    if offset is None:
        return go_time(ns)
    sign, hours, minutes = offset.groups()
    delta = timedelta(hours=int(hours), minutes=int(minutes))
    try:
        return go_time(ns, timezone(-delta if sign == "-" else delta))
    except (ValueError, OverflowError):  # an offset or a year Python's datetime can not hold
        return go_time(ns)


def utc_time(text: str) -> str:
    """An RFC 3339 timestamp in UTC (the pause API's, as nats-server's); ValueError as
    `canonical_time`."""
    return go_time(parse_go_time(text))


def go_atoi(text: str) -> int:
    """Go's strconv.Atoi: an optionally signed decimal int64, with its error texts."""
    if not _ATOI.fullmatch(text):
        raise ValueError(f"strconv.Atoi: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"strconv.Atoi: parsing {go_quote(text)}: value out of range")
    return value
