"""What clients send about consumers, read the way nats-server's Go decoder reads it.

The consumer config and the create request (server/consumer.go ConsumerConfig,
CreateConsumerRequest), and pull requests for $JS.API.CONSUMER.MSG.NEXT (nextReqFromMsg). As in
Go's encoding/json: unknown fields are ignored, a JSON null leaves a plain field at its zero
value, numbers must fit Go's integer types, and the enum fields accept only their names, with
nats-server's error texts. The rules about what a config may say are in `consumer.config`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

import msgspec

from infinistream.jetstream import errors
from infinistream.jetstream.api import go_json_error, go_quote
from infinistream.jetstream.durations import go_duration
from infinistream.jetstream.times import go_time, parse_go_time

# Go's int and uint64: a number out of range is a JSON error in nats-server, not a huge limit.
# (msgspec can not bound an int above int64, so uint64's upper end is not checked.)
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
UInt64 = Annotated[int, msgspec.Meta(ge=0)]

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


class ConsumerConfig(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A consumer's configuration as nats-server's JSON has it; `config.normalize` fills it in.

    Defaults are Go's zero values, so an omitted ack_policy is "none", as in nats-server (clients
    such as nats.go send "explicit" themselves). Durations are integer nanoseconds; times are
    RFC 3339 strings, None when unset (nats-server's nil pointers). Fields are declared in
    nats-server's order, which `consumer_config_to_wire` keeps.
    """

    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: str = "all"
    opt_start_seq: UInt64 = 0
    opt_start_time: str | None = None
    ack_policy: str = "none"
    ack_wait: Int64 = 0
    max_deliver: Int64 = 0
    backoff: list[Int64] | None = None
    filter_subject: str = ""
    filter_subjects: list[str] | None = None
    replay_policy: str = "instant"
    rate_limit_bps: UInt64 = 0
    sample_freq: str = ""
    max_waiting: Int64 = 0
    max_ack_pending: Int64 = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: Int64 = 0
    max_expires: Int64 = 0
    max_bytes: Int64 = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: Int64 = 0
    inactive_threshold: Int64 = 0
    num_replicas: Int64 = 0
    mem_storage: bool = False
    direct: bool = False
    sourcing: bool = False
    metadata: dict[str, str] | None = None
    pause_until: str | None = None
    priority_groups: list[str] | None = None
    priority_policy: str = "none"
    priority_timeout: Int64 = 0


class CreateConsumerRequest(
    msgspec.Struct, omit_defaults=True, kw_only=True, forbid_unknown_fields=True
):
    """The body of $JS.API.CONSUMER.CREATE and $JS.API.CONSUMER.DURABLE.CREATE.

    Strict, as nats-server's CreateConsumerRequest (these are all its fields); the config inside
    is not yet checked field by field against ConsumerConfig, so it ignores unknown fields.
    """

    stream_name: str = ""
    config: ConsumerConfig = msgspec.field(default_factory=ConsumerConfig)
    action: str = ""  # "" creates or updates, "create" only creates, "update" only updates
    pedantic: bool = False


# Enum fields and their names (nats-server's UnmarshalJSON); "undefined" is read as "all".
_CONFIG_ENUMS: Final[dict[str, tuple[str, ...]]] = {
    "deliver_policy": (*DELIVER_POLICIES, "undefined"),
    "ack_policy": ACK_POLICIES,
    "replay_policy": REPLAY_POLICIES,
}


def decode_create_request(body: bytes) -> CreateConsumerRequest:
    """Decode a create request, raising JSInvalidJSONErr as nats-server does.

    An empty body is an all-default request, as nats-server's decoder reads it. Timestamps come
    back in UTC (see `canonical_time`).
    """
    try:
        raw = msgspec.json.decode(body) if body.strip() else {}
    except msgspec.DecodeError as exc:
        raise errors.invalid_json(exc) from None
    if isinstance(raw, dict):
        raw = _fold_keys(raw)
        action = raw.get("action", "")
        if action not in ACTIONS:
            raise errors.invalid_json(f"unknown consumer action: {_json_text(action)}")
        if isinstance(raw.get("config"), dict):
            raw["config"] = _prepare_config(raw["config"])
        raw = _without_nulls(raw)
    try:
        return msgspec.convert(raw, CreateConsumerRequest)
    except msgspec.ValidationError as exc:
        raise errors.invalid_json(go_json_error(exc)) from None


def _fold_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """encoding/json matches a key to a field case-insensitively: "Stream_Name" is stream_name."""
    fields = {name.lower(): name for name in CreateConsumerRequest.__struct_fields__}
    folded: dict[str, Any] = {}
    for key, value in raw.items():
        name = fields.get(key.lower(), key)
        folded.pop(name, None)  # the last key naming a field gives its value
        folded[name] = value
    return folded


def _prepare_config(config: dict[str, Any]) -> dict[str, Any]:
    for field, allowed in _CONFIG_ENUMS.items():
        # A null is no exception: nats-server's UnmarshalJSON is called with it and refuses it.
        if field in config and config[field] not in allowed:
            raise errors.invalid_json(f"can not unmarshal {go_quote(_json_text(config[field]))}")
    if config.get("deliver_policy") == "undefined":
        config["deliver_policy"] = "all"
    if "priority_policy" in config and config["priority_policy"] not in PRIORITY_POLICIES:
        raise errors.invalid_json(
            f"unknown priority policy: {_json_text(config['priority_policy'])}"
        )
    for field in ("opt_start_time", "pause_until"):
        value = config.get(field)
        if isinstance(value, str):
            try:
                config[field] = canonical_time(value)
            except ValueError as exc:
                raise errors.invalid_json(exc) from None
    return _without_nulls(config)


def _without_nulls(obj: dict[str, Any]) -> dict[str, Any]:
    # Go leaves a field untouched for a JSON null; nil pointers, slices and maps are our None.
    return {k: v for k, v in obj.items() if v is not None}


def _json_text(value: object) -> str:
    return msgspec.json.encode(value).decode()


class NextRequest(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A pull request (nats-server's JSApiConsumerGetNextRequest); durations in nanoseconds.

    `batch` is kept as sent: in nats-server a batch of 0 or less (a JSON body without "batch")
    still hands out one message. The priority-group fields (ADR-42) are read by consumers with a
    priority policy; for the others, `group` alone is ignored, and the rest refused.
    """

    expires: Int64 = 0
    batch: Int64 = 0
    max_bytes: Int64 = 0
    no_wait: bool = False
    idle_heartbeat: Int64 = 0
    group: str = ""
    min_pending: Int64 = 0
    min_ack_pending: Int64 = 0
    id: str = ""
    priority: Int64 = 0


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

    Empty: one message. A JSON object: the request (a bad one is a 400 NextRequestError).
    Anything else: a batch size if it is an integer, and one message if it is not.
    """
    req = body.strip()
    if not req:
        return NextRequest(batch=1)
    if req.startswith(b"{"):
        try:
            parsed = msgspec.json.decode(req, type=NextRequest)
        except msgspec.ValidationError:
            parsed = _decode_next_with_nulls(req)
        except msgspec.DecodeError as exc:
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


def _decode_next_with_nulls(req: bytes) -> NextRequest:
    # Only after the direct decode failed, as nulls are rare: they are Go's no-ops.
    try:
        raw = msgspec.json.decode(req)
        return msgspec.convert(_without_nulls(raw), NextRequest)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise NextRequestError(400, str(exc)) from None


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
    """Check an RFC 3339 timestamp (as Go's time.Time decoding does, ValueError with its words)
    and return it in UTC.

    nats-server keeps the offset the client sent; InfiniStream stores the same instant in UTC
    so that equal instants compare equal in update and create-if-equal checks.
    """
    return go_time(parse_go_time(text))


def go_atoi(text: str) -> int:
    """Go's strconv.Atoi: an optionally signed decimal int64, with its error texts."""
    if not _ATOI.fullmatch(text):
        raise ValueError(f"strconv.Atoi: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"strconv.Atoi: parsing {go_quote(text)}: value out of range")
    return value
