"""Consumer configuration: nats-server's defaults, validation and update rules.

The rules and error texts are nats-server's (server/consumer.go setConsumerConfigDefaults,
checkConsumerCfg, checkNewConsumerConfig and addConsumerWithAssignment, and the consumer create
handler in server/jetstream_api.go). The features nats-server has but InfiniStream does not
(replay at the original pace, sourcing and direct consumers, acks by flow control) are
refused with a JetStream error instead of being silently ignored, so that a client never
believes it got something it did not.
"""

from __future__ import annotations

import operator
import secrets
from collections.abc import Callable
from typing import Any, Final

import msgspec

from infinistream.consumer.requests import (
    ACK_POLICIES,
    ACTIONS,
    DELIVER_POLICIES,
    PRIORITY_POLICIES,
    REPLAY_POLICIES,
    ConsumerConfig,
    CreateConsumerRequest,
    NextRequest,
    NextRequestError,
    canonical_time,
    check_next_request,
    decode_create_request,
    go_atoi,
    parse_next_request,
    timestamp_ns,
    valid_group_name,
)
from infinistream.jetstream import errors
from infinistream.jetstream.api import (
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    MAX_NAME_LEN,
    StreamConfig,
)
from infinistream.jetstream.durations import SECOND_NS, go_duration
from infinistream.jetstream.subjects import (
    collide,
    is_literal,
    is_subset,
    is_valid_name,
    is_valid_subject,
)
from infinistream.jetstream.times import ZERO_TIME, parse_go_time
from infinistream.jetstream.versioning import (
    consumer_required_level,
    with_required_level,
    without_versioning,
)

# The request types are defined with their decoding in `requests` and are exported here too, so
# that one module gives the whole consumer configuration API.
__all__ = [
    "ACK_POLICIES",
    "ACTIONS",
    "DEFAULT_ACK_WAIT_NS",
    "DEFAULT_EPHEMERAL_INACTIVE_NS",
    "DEFAULT_MAX_ACK_PENDING",
    "DEFAULT_MAX_WAITING",
    "DELIVER_POLICIES",
    "MIN_MAX_EXPIRES_NS",
    "PRIORITY_POLICIES",
    "REPLAY_POLICIES",
    "ConsumerConfig",
    "CreateConsumerRequest",
    "NextRequest",
    "NextRequestError",
    "check_next_request",
    "check_update",
    "check_workqueue_overlap",
    "consumer_config_to_wire",
    "consumer_name",
    "decode_create_request",
    "new_consumer_name",
    "normalize",
    "parse_next_request",
    "same_config",
    "stamp_required_level",
    "subject_filters",
    "timestamp_ns",
]

DEFAULT_ACK_WAIT_NS: Final = 30 * SECOND_NS  # consumer.go JsAckWaitDefault
DEFAULT_MAX_ACK_PENDING: Final = 1000  # consumer.go JsDefaultMaxAckPending
DEFAULT_MAX_WAITING: Final = 512  # jetstream_api.go JSWaitQueueDefaultMax
DEFAULT_EPHEMERAL_INACTIVE_NS: Final = 5 * SECOND_NS  # consumer.go JsDeleteWaitTimeDefault
MIN_MAX_EXPIRES_NS: Final = 1_000_000  # checkConsumerCfg: max_expires, when set, is >= 1ms
MIN_IDLE_HEARTBEAT_NS: Final = 100_000_000  # checkConsumerCfg: a push heartbeat is >= 100ms

# Deliver policies as nats-server's messages name them.
_DELIVER_LABELS: Final = {
    "all": "all",
    "last": "last",
    "last_per_subject": "last per subject",
    "new": "new",
    "by_start_sequence": "by start sequence",
    "by_start_time": "by start time",
}
_NAME_CHARS_MSG = "can not contain '.', '*', '>', '\\', '/'"
# How long a pinned client may go without a pull request before another is pinned
# (nats-server's JsDefaultPinnedTTL).
DEFAULT_PINNED_TTL_NS: Final = 120 * SECOND_NS
_NAME_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ZERO_TIME_NS: Final = parse_go_time(ZERO_TIME)


# Rendered even when empty; ConsumerConfig's fields are declared in nats-server's order and every
# other one is `omitempty` there.
_WIRE_ALWAYS: Final = frozenset({"deliver_policy", "ack_policy", "replay_policy", "num_replicas"})


def consumer_config_to_wire(cfg: ConsumerConfig) -> dict[str, Any]:
    """The config as nats-server renders it in CONSUMER.INFO and create responses."""
    out: dict[str, Any] = {}
    for field in cfg.__struct_fields__:
        value = getattr(cfg, field)
        if field in ("opt_start_time", "pause_until"):
            # Pointers in nats-server: omitted only when nil, even a zero time is written.
            empty = value is None
        elif field == "priority_policy":
            # An int enum whose zero value is "none", so omitempty drops "none".
            empty = value == "none"
        else:
            empty = value is None or value in ("", 0) or value == [] or value == {}
        if not empty or field in _WIRE_ALWAYS:
            out[field] = list(value) if isinstance(value, list) else value
    if "metadata" in out:
        out["metadata"] = dict(out["metadata"])
    return out


def consumer_name(cfg: ConsumerConfig) -> str:
    """The name the consumer is known by: its durable name, else its name."""
    return cfg.durable_name or cfg.name


def pause_ns(cfg: ConsumerConfig) -> int:
    """When a paused consumer resumes, in nanoseconds since the epoch (0: not paused)."""
    return timestamp_ns(cfg.pause_until)


def subject_filters(cfg: ConsumerConfig) -> list[str]:
    """filter_subjects plus filter_subject (nats-server's gatherSubjectFilters)."""
    filters = list(cfg.filter_subjects or [])
    if cfg.filter_subject:
        filters.append(cfg.filter_subject)
    return filters


def new_consumer_name() -> str:
    """A random 8-character name, like nats-server's createConsumerName (base62)."""
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(8))


def normalize(
    config: ConsumerConfig,
    *,
    stream_config: StreamConfig,
    durable_in_subject: str | None = None,
    name_in_subject: str | None = None,
    filter_in_subject: str | None = None,
    action: str = "",
    pedantic: bool = False,
    account_max_ack_pending: int = -1,
    refuse: bool = True,
) -> ConsumerConfig:
    """Check a requested config and fill its defaults, as nats-server's consumer create does.

    The subject arguments say which create API was used: `durable_in_subject` for the
    legacy $JS.API.CONSUMER.DURABLE.CREATE.<stream>.<durable>, `name_in_subject` (and an
    optional `filter_in_subject`) for $JS.API.CONSUMER.CREATE.<stream>.<name>[.<filter>], neither
    for the legacy ephemeral $JS.API.CONSUMER.CREATE.<stream>. `action` is only checked here: what
    it means for an existing consumer is `check_update`'s. The caller checks the stream name,
    existence (action "update" needs one) and, on workqueue streams, `check_workqueue_overlap`.
    An ephemeral without a name is given a random one. `account_max_ack_pending` is the
    account's limit (-1 for none): it lowers the default and refuses a larger request.
    `refuse` False leaves `refuse_unsupported` to the caller, for an update to check first
    what may change, as nats-server does.
    """
    if action not in ACTIONS:
        raise errors.invalid_json(
            f"unknown consumer action: {msgspec.json.encode(action).decode()}"
        )
    cfg = stamp_required_level(_copy(config))
    _canonical_times(cfg)
    _apply_subject(cfg, durable_in_subject, name_in_subject, filter_in_subject)
    _set_defaults(cfg, stream_config, pedantic, account_max_ack_pending)
    if 0 < account_max_ack_pending < cfg.max_ack_pending:
        raise errors.consumer_max_pending_ack_excess(account_max_ack_pending)
    _check(cfg, stream_config)
    _check_filters(cfg)
    _check_deliver_policy(cfg)
    _check_rest(cfg)
    if stream_config.retention == "workqueue" and not cfg.direct and not cfg.sourcing:
        # addConsumerWithAssignment: a workqueue hands each message to one consumer, once.
        if cfg.ack_policy not in ("explicit", "flow_control"):
            raise errors.consumer_wq_requires_explicit_ack()
        if cfg.deliver_policy != "all":
            raise errors.consumer_wq_consumer_not_deliver_all()
    # nats-server checks only the durable name's length (an over-long ephemeral name fails when
    # its store is created); either becomes a key and a subject token here, so both are checked.
    if len(cfg.durable_name.encode()) > MAX_NAME_LEN or len(cfg.name.encode()) > MAX_NAME_LEN:
        raise errors.consumer_name_too_long(MAX_NAME_LEN)
    if not cfg.durable_name and not cfg.name:
        cfg.name = new_consumer_name()
    if not cfg.durable_name and cfg.inactive_threshold <= 0:
        # updateInactiveThreshold: ephemerals always go away once unused.
        cfg.inactive_threshold = DEFAULT_EPHEMERAL_INACTIVE_NS
    # Last: a config nats-server refuses gets its error, not ours.
    if refuse:
        refuse_unsupported(cfg)
    return cfg


def stamp_required_level(cfg: ConsumerConfig) -> ConsumerConfig:
    """`cfg` with the API level it needs in its metadata (nats-server's
    setStaticConsumerMetadata, on every create, update and pause)."""
    paused = cfg.pause_until is not None and timestamp_ns(cfg.pause_until) != _ZERO_TIME_NS
    priority = (
        cfg.priority_policy != "none" or cfg.priority_timeout != 0 or bool(cfg.priority_groups)
    )
    level = consumer_required_level(
        paused=paused, priority=priority, ack_flow_control=cfg.ack_policy == "flow_control"
    )
    return msgspec.structs.replace(cfg, metadata=with_required_level(cfg.metadata, level))


def same_config(a: ConsumerConfig, b: ConsumerConfig) -> bool:
    """Whether two configs are equal but for their versioning metadata."""
    return msgspec.structs.replace(
        a, metadata=without_versioning(a.metadata)
    ) == msgspec.structs.replace(b, metadata=without_versioning(b.metadata))


def _copy(cfg: ConsumerConfig) -> ConsumerConfig:
    # Empty lists and maps become None: nats-server writes neither, so one form is stored.
    return msgspec.structs.replace(
        cfg,
        backoff=list(cfg.backoff) if cfg.backoff else None,
        filter_subjects=list(cfg.filter_subjects) if cfg.filter_subjects else None,
        metadata=dict(cfg.metadata) if cfg.metadata else None,
        priority_groups=list(cfg.priority_groups) if cfg.priority_groups else None,
    )


def _canonical_times(cfg: ConsumerConfig) -> None:
    # A bad time is a JSON error in nats-server (time.Time decoding); decode_create_request
    # reports it the same way, this covers configs built in code.
    try:
        if cfg.opt_start_time is not None:
            cfg.opt_start_time = canonical_time(cfg.opt_start_time)
        if cfg.pause_until is not None:
            cfg.pause_until = canonical_time(cfg.pause_until)
    except ValueError as exc:
        raise errors.invalid_json(exc) from None


def _apply_subject(
    cfg: ConsumerConfig, durable: str | None, name: str | None, filter_subject: str | None
) -> None:
    """The create handler's checks of the request against its subject (jsConsumerCreateRequest)."""
    if durable is not None:
        if not durable:
            raise errors.consumer_durable_name_not_in_subject()
        _check_path_separators(durable)
        if not cfg.durable_name:
            raise errors.consumer_durable_name_not_set()
        if cfg.durable_name != durable:
            raise errors.consumer_durable_name_not_match_subject()
        cfg.name = durable
    elif name is not None:
        _check_path_separators(name)
        if cfg.durable_name and cfg.durable_name != name:
            raise errors.consumer_durable_name_not_match_subject()
        # The subject names the consumer, whatever name the body has.
        cfg.name = name
    else:
        _check_path_separators(cfg.name)
        if cfg.durable_name:
            raise errors.consumer_ephemeral_with_durable_name()
    if filter_subject:
        if cfg.filter_subjects:
            raise errors.consumer_multiple_filters_not_allowed()
        if cfg.filter_subject != filter_subject:
            raise errors.consumer_create_filter_subject_mismatch()


def _check_path_separators(name: str) -> None:
    if "/" in name or "\\" in name:
        raise errors.consumer_name_contains_path_separators()


def _unsupported(message: str) -> errors.ApiError:
    # JSConsumerCreateErrF is what nats-server answers for a consumer it will not create when no
    # specific error applies; the text says what InfiniStream does not do.
    return errors.consumer_create(message)


def refuse_unsupported(cfg: ConsumerConfig) -> None:
    """Refuse what nats-server would accept but InfiniStream does not implement, once every
    check nats-server makes has passed."""
    if cfg.replay_policy == "original":
        raise _unsupported('replay policy "original" is not supported by InfiniStream')
    if cfg.sourcing:
        raise _unsupported("sourcing consumers are not supported by InfiniStream")
    if cfg.ack_policy == "flow_control":
        # Acks by flow control are for the consumers that source one stream into another.
        raise _unsupported("flow control ack policy is not supported by InfiniStream")
    if cfg.direct:
        raise _unsupported("direct consumers are not supported by InfiniStream")


def _set_defaults(
    cfg: ConsumerConfig, stream: StreamConfig, pedantic: bool, account_max_ack_pending: int
) -> None:
    """setConsumerConfigDefaults: out-of-range values are clamped, or refused when pedantic."""
    if cfg.max_deliver == 0 or cfg.max_deliver < -1:
        if pedantic and cfg.max_deliver < -1:
            raise errors.pedantic("max_deliver must be set to -1")
        cfg.max_deliver = -1
    if cfg.max_waiting < 0:
        if pedantic:
            raise errors.pedantic("max_waiting must not be negative")
        cfg.max_waiting = 0
    if cfg.max_ack_pending < -1:
        if pedantic:
            raise errors.pedantic("max_ack_pending must be set to -1")
        cfg.max_ack_pending = -1
    for field in (
        "max_batch",
        "max_expires",
        "max_bytes",
        "idle_heartbeat",
        "inactive_threshold",
        "priority_timeout",
    ):
        if getattr(cfg, field) < 0:
            if pedantic:
                raise errors.pedantic(f"{field} must not be negative")
            setattr(cfg, field, 0)
    if not cfg.deliver_subject and cfg.max_waiting == 0:
        cfg.max_waiting = DEFAULT_MAX_WAITING
    if cfg.priority_policy == "pinned_client" and cfg.priority_timeout == 0:
        cfg.priority_timeout = DEFAULT_PINNED_TTL_NS
    if cfg.ack_wait == 0 and cfg.ack_policy in ("explicit", "all"):
        cfg.ack_wait = DEFAULT_ACK_WAIT_NS
    if cfg.backoff:
        # The first backoff step is the first ack wait.
        if pedantic and cfg.ack_wait != cfg.backoff[0]:
            raise errors.pedantic("first backoff value has to equal batch AckWait")
        cfg.ack_wait = cfg.backoff[0]
    limits = stream.consumer_limits
    if cfg.max_ack_pending == 0:
        if pedantic and limits.max_ack_pending > 0:
            raise errors.pedantic("max_ack_pending must be set if it's configured in stream limits")
        cfg.max_ack_pending = limits.max_ack_pending
    if cfg.inactive_threshold == 0:
        if pedantic and limits.inactive_threshold > 0:
            raise errors.pedantic(
                "inactive_threshold must be set if it's configured in stream limits"
            )
        cfg.inactive_threshold = limits.inactive_threshold
    if cfg.max_ack_pending == 0 and cfg.ack_policy != "none":
        # The account's limit lowers the default (InfiniStream has no server-wide one).
        cfg.max_ack_pending = DEFAULT_MAX_ACK_PENDING
        if 0 < account_max_ack_pending < DEFAULT_MAX_ACK_PENDING:
            cfg.max_ack_pending = account_max_ack_pending
    # Object storage keeps every consumer's state the same way, whatever was asked; the config
    # says what was asked, as nats-server's does (a client checks its ordered consumer's
    # mem_storage), and replicas as a cluster of nats-servers keeps them.


def _check(cfg: ConsumerConfig, stream: StreamConfig) -> None:
    """checkConsumerCfg up to the subject filters, in nats-server's order."""
    if cfg.name and not is_valid_name(cfg.name):
        raise errors.stream_invalid_config(f"consumer name {_NAME_CHARS_MSG}")
    if cfg.durable_name and not is_valid_name(cfg.durable_name):
        raise errors.stream_invalid_config(f"consumer durable name {_NAME_CHARS_MSG}")
    if cfg.num_replicas > 0 and cfg.num_replicas > stream.num_replicas:
        raise errors.consumer_replicas_exceeds_stream()
    if cfg.num_replicas < 0:
        raise errors.replicas_count_cannot_be_negative()
    if (
        stream.retention in ("interest", "workqueue")
        and cfg.num_replicas != 0
        and cfg.num_replicas != stream.num_replicas
    ):
        raise errors.consumer_replicas_should_match_stream()
    if cfg.ack_policy not in ACK_POLICIES:
        raise errors.consumer_ack_policy_invalid()
    if cfg.replay_policy not in REPLAY_POLICIES:
        raise errors.consumer_replay_policy_invalid()
    if any(step < 0 for step in cfg.backoff or ()):
        raise errors.consumer_back_off_negative()
    if cfg.ack_wait < 0:
        raise errors.consumer_ack_wait_negative()
    if cfg.ack_policy == "flow_control":
        _check_ack_flow_control(cfg)
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise errors.consumer_max_deliver_backoff()
    if len(cfg.description.encode()) > MAX_DESCRIPTION_LEN:
        raise errors.consumer_description_too_long(MAX_DESCRIPTION_LEN)
    if cfg.deliver_subject:
        _check_push(cfg, stream)
    else:
        _check_pull(cfg, stream)
    limits = stream.consumer_limits
    if limits.max_ack_pending > 0 and cfg.max_ack_pending > limits.max_ack_pending:
        raise errors.consumer_max_pending_ack_excess(limits.max_ack_pending)
    if limits.inactive_threshold > 0 and cfg.inactive_threshold > limits.inactive_threshold:
        # nats-server formats the limit as a Go duration ("2s").
        raise errors.consumer_inactive_threshold_excess(go_duration(limits.inactive_threshold))
    if cfg.direct:
        # Direct consumers are ephemeral push consumers (nats-server's own, for mirrors).
        if not cfg.deliver_subject:
            raise errors.consumer_direct_requires_push()
        if cfg.durable_name:
            raise errors.consumer_direct_requires_ephemeral()


def _check_ack_flow_control(cfg: ConsumerConfig) -> None:
    """Acks by flow control: a push consumer's, as nats-server 2.15 sources streams with."""
    if not cfg.deliver_subject:
        raise errors.consumer_ack_fc_requires_push()
    if cfg.max_ack_pending <= 0:
        raise errors.consumer_ack_fc_requires_max_ack_pending()
    if cfg.ack_wait != 0 or cfg.backoff:
        raise errors.consumer_ack_fc_requires_no_ack_wait()
    if cfg.max_deliver > 0:
        raise errors.consumer_ack_fc_requires_no_max_deliver()


def _check_pull(cfg: ConsumerConfig, stream: StreamConfig) -> None:
    """checkConsumerCfg's pull branch."""
    if cfg.ack_policy == "none" and stream.retention == "workqueue":
        raise errors.consumer_pull_requires_ack()
    if cfg.rate_limit_bps > 0:
        raise errors.consumer_pull_with_rate_limit()
    if cfg.max_waiting < 0:
        raise errors.consumer_max_waiting_negative()
    if cfg.idle_heartbeat > 0:
        raise errors.consumer_hb_requires_push()
    if cfg.flow_control:
        raise errors.consumer_fc_requires_push()
    if cfg.max_batch < 0:
        raise errors.consumer_max_request_batch_negative()
    if cfg.max_expires != 0 and cfg.max_expires < MIN_MAX_EXPIRES_NS:
        raise errors.consumer_max_request_expires_too_small()


def _check_push(cfg: ConsumerConfig, stream: StreamConfig) -> None:
    """checkConsumerCfg's push branch: where and how messages are pushed."""
    deliver = cfg.deliver_subject
    if not is_literal(deliver):
        raise errors.consumer_deliver_to_wildcards()
    if not is_valid_subject(deliver):
        raise errors.consumer_invalid_deliver_subject()
    # deliveryFormsCycle: what is pushed would be stored again, and pushed again.
    if any(is_subset(deliver, subject) for subject in stream.subjects):
        raise errors.consumer_deliver_cycle()
    if cfg.max_waiting != 0:
        raise errors.consumer_push_max_waiting()
    if cfg.max_ack_pending > 0 and cfg.ack_policy == "none":
        raise errors.consumer_max_pending_ack_policy_required()
    if 0 < cfg.idle_heartbeat < MIN_IDLE_HEARTBEAT_NS:
        raise errors.consumer_small_heartbeat()


def _check_filters(cfg: ConsumerConfig) -> None:
    # Filters need not be within the stream's subjects: nats-server dropped that rule (and its
    # JSConsumerFilterNotSubsetErr) in 2.10 so that a stream's subjects can change under them.
    if cfg.filter_subject and cfg.filter_subjects:
        raise errors.consumer_duplicate_filter_subjects()
    if cfg.filter_subject and not is_valid_subject(cfg.filter_subject):
        raise errors.stream_invalid_config("invalid subject")
    if any(not f for f in cfg.filter_subjects or ()):
        raise errors.consumer_empty_filter()
    filters = subject_filters(cfg)
    for i, subject in enumerate(filters):
        if not is_valid_subject(subject):
            raise errors.stream_invalid_config("invalid subject")
        # nats-server refuses a filter within another (so duplicates too), not any collision:
        # "foo.*" and "*.bar" are accepted together.
        for j, other in enumerate(filters):
            if i != j and is_subset(subject, other):
                raise errors.consumer_overlapping_subject_filters()


def _check_deliver_policy(cfg: ConsumerConfig) -> None:
    policy = cfg.deliver_policy
    label = _DELIVER_LABELS.get(policy)
    if label is None:
        # nats-server can not decode another value; this covers configs built in code.
        raise errors.consumer_invalid_policy(f"unknown deliver policy {policy!r}")

    def bad_start(start: str) -> errors.ApiError:
        return errors.consumer_invalid_policy(
            f"consumer delivery policy is deliver {label}, but optional start {start} is also set"
        )

    def not_set(what: str) -> errors.ApiError:
        return errors.consumer_invalid_policy(
            f"consumer delivery policy is deliver {label}, but optional {what} is not set"
        )

    seq_set = cfg.opt_start_seq > 0
    time_set = cfg.opt_start_time is not None
    if policy == "by_start_sequence":
        if not seq_set:
            raise not_set("start sequence")
        if time_set:
            raise bad_start("time")
    elif policy == "by_start_time":
        if not time_set:
            raise not_set("start time")
        if seq_set:
            raise bad_start("start sequence")
    else:
        if seq_set:
            raise bad_start("sequence")
        if time_set:
            raise bad_start("time")
        if policy == "last_per_subject" and not subject_filters(cfg):
            raise not_set("filter subject")


def _check_rest(cfg: ConsumerConfig) -> None:
    """checkConsumerCfg after the deliver policy."""
    if cfg.sample_freq:
        text = cfg.sample_freq.removesuffix("%")
        try:
            freq = go_atoi(text)
        except ValueError as exc:
            raise errors.consumer_invalid_sampling(exc) from None
        if freq < 0:
            # nats-server formats its nil error here.
            raise errors.consumer_invalid_sampling("<nil>")
    if cfg.flow_control and cfg.idle_heartbeat == 0:
        raise errors.consumer_with_flow_control_needs_heartbeats()
    if cfg.durable_name and cfg.name and cfg.name != cfg.durable_name:
        raise errors.consumer_create_durable_and_name_mismatch()
    metadata = cfg.metadata or {}
    if sum(len(k.encode()) + len(v.encode()) for k, v in metadata.items()) > MAX_METADATA_LEN:
        raise errors.consumer_metadata_length(f"{MAX_METADATA_LEN // 1024}KB")
    if cfg.priority_policy != "none":
        if cfg.deliver_subject:
            raise errors.consumer_push_with_priority_group()
        if not cfg.priority_groups:
            raise errors.consumer_priority_policy_without_group()
        for group in cfg.priority_groups:
            if not group:
                raise errors.consumer_empty_group_name()
            if not valid_group_name(group):
                raise errors.consumer_invalid_group_name()
    elif cfg.priority_groups:
        raise errors.consumer_priority_group_with_policy_none()
    elif cfg.priority_timeout > 0:
        raise errors.consumer_pinned_ttl_without_priority_policy_none()


def check_update(
    old: ConsumerConfig, new: ConsumerConfig, *, action: str = "", bound: bool = False
) -> ConsumerConfig:
    """The config to store when `new` (from `normalize`) is asked of existing consumer `old`.

    As nats-server: the create handler keeps the current pause_until; action "create" accepts
    only an identical config; checkNewConsumerConfig says what may change, and its plain errors
    reach the client as JSConsumerCreateErrF. `bound`: some client subscribes to the old
    deliver subject, which then may not change.
    """
    # Pausing has its own API ($JS.API.CONSUMER.PAUSE); create/update never changes it.
    cfg = stamp_required_level(msgspec.structs.replace(_copy(new), pause_until=old.pause_until))
    if same_config(cfg, old):
        return cfg
    if action == "create":
        raise errors.consumer_already_exists()

    def refuse(message: str) -> errors.ApiError:
        return errors.consumer_create(message)

    for field_name, words, same in _FIXED:
        if not same(getattr(cfg, field_name), getattr(old, field_name)):
            raise refuse(f"{words} can not be updated")
    if cfg.deliver_subject != old.deliver_subject:
        if not old.deliver_subject:
            raise refuse("can not update pull consumer to push based")
        if not cfg.deliver_subject:
            raise refuse("can not update push consumer to pull based")
        if bound:
            raise errors.consumer_name_exist()
    if cfg.max_waiting != old.max_waiting:
        raise refuse("max waiting can not be updated")
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise errors.consumer_max_deliver_backoff()
    return cfg


def _same_time(a: str | None, b: str | None) -> bool:
    # time.Time.Equal: the same instant, whatever the offset it was written with.
    if a is None or b is None:
        return a is b
    return timestamp_ns(a) == timestamp_ns(b)


# What an update may not change, in the order nats-server's checkNewConsumerConfig looks, with
# the words of its errors; the deliver subject and max_waiting follow, in `check_update`.
_FIXED: tuple[tuple[str, str, Callable[[Any, Any], bool]], ...] = (
    ("deliver_policy", "deliver policy", operator.eq),
    ("mem_storage", "storage type", operator.eq),
    ("direct", "direct", operator.eq),
    ("sourcing", "sourcing", operator.eq),
    ("opt_start_seq", "start sequence", operator.eq),
    ("opt_start_time", "start time", _same_time),
    ("ack_policy", "ack policy", operator.eq),
    ("replay_policy", "replay policy", operator.eq),
    ("idle_heartbeat", "heart beats", operator.eq),
    ("flow_control", "flow control", operator.eq),
)


def check_workqueue_overlap(new_cfg: ConsumerConfig, existing: list[ConsumerConfig]) -> None:
    """On a workqueue stream, refuse a consumer whose filters could take another's messages.

    `existing` is the stream's consumers; the one named like `new_cfg` (when updating) is
    skipped. nats-server's partitionUnique: every subject must belong to one consumer only.
    Stricter than nats-server in one case: it lets an existing consumer be updated to have no
    filter (its update path checks only the new filters), which would break the workqueue.
    """
    name = consumer_name(new_cfg)
    others = [c for c in existing if consumer_name(c) != name and not c.direct and not c.sourcing]
    if not others:
        return
    mine = subject_filters(new_cfg)
    if not mine:
        raise errors.consumer_wq_multiple_unfiltered()
    for other in others:
        theirs = subject_filters(other)
        if not theirs or any(collide(a, b) for a in mine for b in theirs):
            raise errors.consumer_wq_consumer_not_unique()
