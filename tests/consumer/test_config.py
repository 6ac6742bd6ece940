"""Consumer configuration and requests: nats-server's defaults, refusals, rendering and bodies.

Expected (code, err_code, description) triples are copied from nats-server's server/errors.json
and the texts built in server/consumer.go / server/jetstream_api.go.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from infinistream.consumer.config import (
    DEFAULT_ACK_WAIT_NS,
    ConsumerConfig,
    CreateConsumerRequest,
    NextRequest,
    NextRequestError,
    check_next_request,
    check_update,
    check_workqueue_overlap,
    consumer_config_to_wire,
    decode_create_request,
    normalize,
    parse_next_request,
    subject_filters,
)
from infinistream.consumer.requests import go_atoi, go_quote
from infinistream.jetstream.api import ConsumerLimits, StreamConfig
from infinistream.jetstream.durations import go_duration
from infinistream.jetstream.errors import ApiError
from infinistream.stream.config import normalize as normalize_stream

S = 1_000_000_000
MS = 1_000_000


def stream(**kw: Any) -> StreamConfig:
    return normalize_stream(StreamConfig(name="S", subjects=["s.>", "t.*"], **kw))


LIMITS = stream()
WORKQUEUE = stream(retention="workqueue")


def norm(
    stream_config: StreamConfig = LIMITS, *, subject: dict[str, Any] | None = None, **kw: Any
) -> ConsumerConfig:
    return normalize(ConsumerConfig(**kw), stream_config=stream_config, **(subject or {}))


def durable(name: str = "D", stream_config: StreamConfig = LIMITS, **kw: Any) -> ConsumerConfig:
    """A durable created through $JS.API.CONSUMER.CREATE.S.<name>."""
    return norm(stream_config, subject={"name_in_subject": name}, durable_name=name, **kw)


def check_error(exc: BaseException, code: int, err_code: int, description: str) -> None:
    assert isinstance(exc, ApiError), exc
    assert (exc.code, exc.err_code, exc.description) == (code, err_code, description)


PULL_ONLY = (500, 10012)  # JSConsumerCreateErrF


# -- defaults (setConsumerConfigDefaults, updateInactiveThreshold) -------------------------------


def test_ephemeral_defaults() -> None:
    cfg = norm()
    assert cfg.deliver_policy == "all"
    assert cfg.ack_policy == "none"  # Go's zero value: nats-server does not default to explicit
    assert cfg.ack_wait == 0  # only explicit/all acks get the 30s default
    assert cfg.max_deliver == -1
    assert cfg.max_waiting == 512
    assert cfg.max_ack_pending == 0  # no acks, no pending limit
    assert cfg.replay_policy == "instant"
    assert cfg.inactive_threshold == 5 * S
    assert cfg.num_replicas == 0
    assert len(cfg.name) == 8 and cfg.name.isalnum()
    assert cfg.durable_name == ""


@pytest.mark.parametrize("ack", ["explicit", "all"])
def test_acked_defaults(ack: str) -> None:
    cfg = durable(ack_policy=ack)
    assert (cfg.ack_wait, cfg.max_ack_pending) == (DEFAULT_ACK_WAIT_NS, 1000)
    assert cfg.ack_wait == 30 * S


def test_durable_defaults() -> None:
    cfg = durable("D", ack_policy="explicit")
    assert (cfg.name, cfg.durable_name) == ("D", "D")
    assert cfg.inactive_threshold == 0  # durables stay until deleted


def test_explicit_values_are_kept() -> None:
    cfg = durable(
        ack_policy="explicit", ack_wait=5 * S, max_deliver=3, max_waiting=7, max_ack_pending=9
    )
    assert (cfg.ack_wait, cfg.max_deliver, cfg.max_waiting, cfg.max_ack_pending) == (5 * S, 3, 7, 9)
    assert norm(inactive_threshold=S).inactive_threshold == S


def test_stream_consumer_limits_are_the_defaults() -> None:
    limited = stream(consumer_limits=ConsumerLimits(inactive_threshold=2 * S, max_ack_pending=50))
    cfg = norm(limited, ack_policy="explicit")
    assert (cfg.max_ack_pending, cfg.inactive_threshold) == (50, 2 * S)
    # The stream limit applies to durables and to consumers without acks too.
    cfg = durable(stream_config=limited)
    assert (cfg.max_ack_pending, cfg.inactive_threshold) == (50, 2 * S)


def test_backoff_sets_the_first_ack_wait() -> None:
    cfg = durable(ack_policy="explicit", backoff=[S, 2 * S], max_deliver=3)
    assert cfg.ack_wait == S
    assert cfg.backoff == [S, 2 * S]


def test_out_of_range_values_are_clamped() -> None:
    cfg = norm(
        ack_policy="explicit",
        max_deliver=-5,
        max_waiting=-1,
        max_ack_pending=-7,
        max_batch=-1,
        max_expires=-1,
        max_bytes=-1,
        idle_heartbeat=-1,
        inactive_threshold=-1,
        priority_timeout=-1,
    )
    assert (cfg.max_deliver, cfg.max_waiting, cfg.max_ack_pending) == (-1, 512, -1)
    assert (cfg.max_batch, cfg.max_expires, cfg.max_bytes, cfg.idle_heartbeat) == (0, 0, 0, 0)
    assert (cfg.inactive_threshold, cfg.priority_timeout) == (5 * S, 0)


def test_replicas_and_storage_say_what_was_asked() -> None:
    # Object storage keeps every consumer the same way; the config says what was asked, as
    # nats-server's does (a client checks its ordered consumer's mem_storage).
    three = msgspec.structs.replace(LIMITS, num_replicas=3)
    cfg = durable(stream_config=three, num_replicas=3, mem_storage=True)
    assert (cfg.num_replicas, cfg.mem_storage) == (3, True)
    assert durable(num_replicas=1).num_replicas == 1


def test_empty_lists_are_stored_as_none() -> None:
    cfg = durable(filter_subjects=[], backoff=[], metadata={}, priority_groups=[])
    assert (cfg.filter_subjects, cfg.backoff, cfg.priority_groups) == (None,) * 3
    # The metadata holds what nats-server stores in every config: the API level it needs.
    assert cfg.metadata == {"_nats.req.level": "0"}


def test_the_required_api_level_is_stored() -> None:
    assert durable(metadata={"k": "v"}).metadata == {"k": "v", "_nats.req.level": "0"}
    # Paused: 2.11's API; the server's own keys sent back by a client are not stored.
    cfg = durable(pause_until="2030-01-01T00:00:00Z", metadata={"_nats.ver": "2.12.0"})
    assert cfg.metadata == {"_nats.req.level": "1"}
    assert durable(pause_until="0001-01-01T00:00:00Z").metadata == {"_nats.req.level": "0"}


def test_normalize_does_not_change_its_argument() -> None:
    original = ConsumerConfig(durable_name="D", filter_subjects=["s.a"], metadata={"k": "v"})
    snapshot = msgspec.structs.replace(original)
    normalize(original, stream_config=LIMITS, name_in_subject="D")
    assert original == snapshot


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_deliver", -2, "max_deliver must be set to -1"),
        ("max_waiting", -1, "max_waiting must not be negative"),
        ("max_ack_pending", -2, "max_ack_pending must be set to -1"),
        ("max_batch", -1, "max_batch must not be negative"),
        ("max_expires", -1, "max_expires must not be negative"),
        ("max_bytes", -1, "max_bytes must not be negative"),
        ("idle_heartbeat", -1, "idle_heartbeat must not be negative"),
        ("inactive_threshold", -1, "inactive_threshold must not be negative"),
        ("priority_timeout", -1, "priority_timeout must not be negative"),
    ],
)
def test_pedantic_refuses_what_would_be_clamped(field: str, value: int, message: str) -> None:
    with pytest.raises(ApiError) as info:
        normalize(ConsumerConfig(**{field: value}), stream_config=LIMITS, pedantic=True)
    check_error(info.value, 400, 10157, f"pedantic mode: {message}")


def test_pedantic_refuses_implicit_values() -> None:
    with pytest.raises(ApiError) as info:
        normalize(
            ConsumerConfig(ack_policy="explicit", backoff=[S], max_deliver=2),
            stream_config=LIMITS,
            pedantic=True,
        )
    check_error(
        info.value, 400, 10157, "pedantic mode: first backoff value has to equal batch AckWait"
    )
    limited = stream(consumer_limits=ConsumerLimits(max_ack_pending=5, inactive_threshold=S))
    with pytest.raises(ApiError) as info:
        normalize(ConsumerConfig(), stream_config=limited, pedantic=True)
    check_error(
        info.value,
        400,
        10157,
        "pedantic mode: max_ack_pending must be set if it's configured in stream limits",
    )
    with pytest.raises(ApiError) as info:
        normalize(ConsumerConfig(max_ack_pending=5), stream_config=limited, pedantic=True)
    check_error(
        info.value,
        400,
        10157,
        "pedantic mode: inactive_threshold must be set if it's configured in stream limits",
    )


# -- the create subject (jsConsumerCreateRequest) --------------------------------------------


def test_legacy_durable_subject() -> None:
    cfg = norm(subject={"durable_in_subject": "D"}, durable_name="D", name="ignored")
    assert (cfg.durable_name, cfg.name) == ("D", "D")


@pytest.mark.parametrize(
    ("subject", "body", "err_code", "description"),
    [
        (
            {"durable_in_subject": ""},
            {"durable_name": "D"},
            10016,
            "consumer expected to be durable but no durable name set in subject",
        ),
        (
            {"durable_in_subject": "D"},
            {},
            10018,
            "consumer expected to be durable but a durable name was not set",
        ),
        (
            {"durable_in_subject": "D"},
            {"durable_name": "E"},
            10017,
            "consumer name in subject does not match durable name in request",
        ),
        (
            {"name_in_subject": "D"},
            {"durable_name": "E"},
            10017,
            "consumer name in subject does not match durable name in request",
        ),
        (
            {},
            {"durable_name": "D"},
            10020,
            "consumer expected to be ephemeral but a durable name was set in request",
        ),
        ({"name_in_subject": "a/b"}, {}, 10127, "Consumer name can not contain path separators"),
        (
            {"durable_in_subject": "a\\b"},
            {},
            10127,
            "Consumer name can not contain path separators",
        ),
        ({}, {"name": "a/b"}, 10127, "Consumer name can not contain path separators"),
        (
            {"name_in_subject": "C", "filter_in_subject": "s.a"},
            {"filter_subjects": ["s.a"]},
            10137,
            "consumer with multiple subject filters cannot use subject based API",
        ),
        (
            {"name_in_subject": "C", "filter_in_subject": "s.a"},
            {"filter_subject": "s.b"},
            10131,
            "Consumer create request did not match filtered subject from create subject",
        ),
    ],
)
def test_subject_refusals(
    subject: dict[str, Any], body: dict[str, Any], err_code: int, description: str
) -> None:
    with pytest.raises(ApiError) as info:
        norm(subject=subject, **body)
    check_error(info.value, 400, err_code, description)


def test_name_in_subject_names_the_consumer() -> None:
    cfg = norm(subject={"name_in_subject": "C"}, name="other")
    assert (cfg.name, cfg.durable_name) == ("C", "")
    assert cfg.inactive_threshold == 5 * S  # a named ephemeral
    cfg = norm(subject={"name_in_subject": "C", "filter_in_subject": "s.a"}, filter_subject="s.a")
    assert cfg.filter_subject == "s.a"


def test_unknown_action() -> None:
    with pytest.raises(ApiError) as info:
        norm(subject={"action": "upsert"})
    check_error(info.value, 400, 10025, 'invalid JSON: unknown consumer action: "upsert"')


# -- pull only ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"replay_policy": "original"}, ['replay policy "original" is not supported']),
        ({"sourcing": True}, ["sourcing consumers are not supported"]),
        (
            {
                "deliver_subject": "in",
                "ack_policy": "flow_control",
                "flow_control": True,
                "idle_heartbeat": S,
            },
            ["flow control ack policy is not supported"],
        ),
        ({"deliver_subject": "in", "direct": True}, ["direct consumers are not supported"]),
    ],
)
def test_unsupported_features_are_refused(body: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ApiError) as info:
        norm(**body)
    assert (info.value.code, info.value.err_code) == PULL_ONLY
    for word in words:
        assert word in info.value.description


@pytest.mark.parametrize(
    ("body", "code", "err_code"),
    [
        # What nats-server refuses gets its error, before InfiniStream refuses the feature.
        ({"priority_policy": "pinned_client"}, 400, 10159),
        (
            {"priority_policy": "overflow", "priority_groups": ["g"], "deliver_subject": "in"},
            400,
            10178,
        ),
        ({"priority_policy": "overflow", "priority_groups": ["a b"]}, 400, 10162),
        ({"replay_policy": "original", "rate_limit_bps": 5}, 400, 10086),
        ({"ack_policy": "flow_control"}, 400, 10218),
        ({"deliver_subject": "in", "ack_policy": "flow_control", "max_deliver": 5}, 400, 10222),
        ({"direct": True}, 400, 10090),
    ],
)
def test_what_nats_server_refuses_is_refused_first(
    body: dict[str, Any], code: int, err_code: int
) -> None:
    with pytest.raises(ApiError) as info:
        norm(**body)
    assert (info.value.code, info.value.err_code) == (code, err_code)


def test_push_consumers_are_accepted() -> None:
    cfg = durable(deliver_subject="in", deliver_group="q", flow_control=True, idle_heartbeat=S)
    assert (cfg.deliver_subject, cfg.deliver_group, cfg.flow_control) == ("in", "q", True)
    # Pull request settings do not apply to pushing: no default max_waiting.
    assert cfg.max_waiting == 0
    assert norm(deliver_subject="in", ack_policy="none", rate_limit_bps=8000).rate_limit_bps == 8000
    # nats-server has no rule against a deliver group on a pull consumer.
    assert durable(deliver_group="q").deliver_group == "q"


@pytest.mark.parametrize(
    ("body", "err_code", "description"),
    [
        ({"deliver_subject": "in.*"}, 10079, "consumer deliver subject has wildcards"),
        ({"deliver_subject": "in..x"}, 10112, "invalid push consumer deliver subject"),
        ({"deliver_subject": "s.x"}, 10081, "consumer deliver subject forms a cycle"),
        (
            {"deliver_subject": "in", "max_waiting": 5},
            10080,
            "consumer in push mode can not set max waiting",
        ),
        (
            {"deliver_subject": "in", "ack_policy": "none", "max_ack_pending": 5},
            10082,
            "consumer requires ack policy for max ack pending",
        ),
        (
            {"deliver_subject": "in", "idle_heartbeat": 99 * MS},
            10083,
            "consumer idle heartbeat needs to be >= 100ms",
        ),
        (
            {"deliver_subject": "in", "flow_control": True},
            10108,
            "consumer with flow control also needs heartbeats",
        ),
        # The push checks come in nats-server's order: max waiting before the heartbeat.
        (
            {"deliver_subject": "in", "max_waiting": 5, "idle_heartbeat": MS},
            10080,
            "consumer in push mode can not set max waiting",
        ),
    ],
)
def test_push_configs_get_nats_server_errors(
    body: dict[str, Any], err_code: int, description: str
) -> None:
    with pytest.raises(ApiError) as info:
        norm(**body)
    check_error(info.value, 400, err_code, description)


@pytest.mark.parametrize(
    ("body", "err_code", "description"),
    [
        ({"flow_control": True}, 10089, "consumer flow control requires a push based consumer"),
        ({"idle_heartbeat": S}, 10088, "consumer idle heartbeat requires a push based consumer"),
        ({"rate_limit_bps": 1000}, 10086, "consumer in pull mode can not have rate limit set"),
        ({"direct": True}, 10090, "consumer direct requires a push based consumer"),
        (
            {"ack_policy": "flow_control"},
            10218,
            "flow control ack policy requires a push based consumer",
        ),
    ],
)
def test_push_only_fields_get_nats_server_errors(
    body: dict[str, Any], err_code: int, description: str
) -> None:
    with pytest.raises(ApiError) as info:
        norm(**body)
    check_error(info.value, 400, err_code, description)


# -- checkConsumerCfg --------------------------------------------------------------------------

NAME_CHARS = "can not contain '.', '*', '>', '\\', '/'"


@pytest.mark.parametrize(
    ("body", "code", "err_code", "description"),
    [
        ({"name": "a.b"}, 500, 10052, f"consumer name {NAME_CHARS}"),
        ({"name": "a b"}, 500, 10052, f"consumer name {NAME_CHARS}"),
        ({"num_replicas": -1}, 400, 10133, "replicas count cannot be negative"),
        ({"ack_policy": "sometimes"}, 400, 10181, "consumer ack policy invalid"),
        ({"replay_policy": "slow"}, 400, 10182, "consumer replay policy invalid"),
        (
            {"backoff": [S, -1], "max_deliver": 5},
            400,
            10184,
            "consumer backoff needs to be positive",
        ),
        ({"ack_wait": -1}, 400, 10183, "consumer ack wait needs to be positive"),
        (
            {"ack_policy": "explicit", "backoff": [S, S, S], "max_deliver": 2},
            400,
            10116,
            "max deliver is required to be > length of backoff values",
        ),
        (
            {"description": "x" * 4097},
            400,
            10107,
            "consumer description is too long, maximum allowed is 4096",
        ),
        (
            {"description": "é" * 2049},  # bytes, as Go's len()
            400,
            10107,
            "consumer description is too long, maximum allowed is 4096",
        ),
        (
            {"max_expires": MS - 1},
            400,
            10115,
            "consumer max request expires needs to be >= 1ms",
        ),
        (
            {"filter_subject": "s.a", "filter_subjects": ["s.b"]},
            400,
            10136,
            "consumer cannot have both FilterSubject and FilterSubjects specified",
        ),
        ({"filter_subject": "s..a"}, 500, 10052, "invalid subject"),
        (
            {"filter_subjects": ["s.a", ""]},
            400,
            10139,
            "consumer filter in FilterSubjects cannot be empty",
        ),
        ({"filter_subjects": ["s.>.b", "s.a"]}, 500, 10052, "invalid subject"),
        (
            {"filter_subjects": ["s.*", "s.a"]},
            400,
            10138,
            "consumer subject filters cannot overlap",
        ),
        (
            {"filter_subjects": ["s.a", "s.a"]},
            400,
            10138,
            "consumer subject filters cannot overlap",
        ),
        ({"filter_subjects": [">", "s.a"]}, 400, 10138, "consumer subject filters cannot overlap"),
        (
            {"sample_freq": "abc"},
            400,
            10095,
            'failed to parse consumer sampling configuration: strconv.Atoi: parsing "abc": '
            "invalid syntax",
        ),
        (
            {"sample_freq": "%"},
            400,
            10095,
            'failed to parse consumer sampling configuration: strconv.Atoi: parsing "": '
            "invalid syntax",
        ),
        (
            {"sample_freq": "-5%"},
            400,
            10095,
            "failed to parse consumer sampling configuration: <nil>",
        ),
        (
            {"metadata": {"k": "v" * (128 * 1024)}},
            400,
            10135,
            "consumer metadata exceeds maximum size of 128KB",
        ),
        (
            {"priority_groups": ["g"]},
            400,
            10196,
            "consumer can not have priority groups when policy is none",
        ),
        (
            {"priority_timeout": S},
            400,
            10197,
            "PinnedTTL cannot be set when PriorityPolicy is none",
        ),
        (
            {"priority_policy": "overflow"},
            400,
            10159,
            "Setting PriorityPolicy requires at least one PriorityGroup to be set",
        ),
        (
            {"priority_policy": "overflow", "priority_groups": [""]},
            400,
            10161,
            "Group name cannot be an empty string",
        ),
        (
            {"priority_policy": "prioritized", "priority_groups": ["g" * 17]},
            400,
            10162,
            "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed"
            " 16 characters",
        ),
        (
            {"priority_policy": "pinned_client", "priority_groups": ["g"], "deliver_subject": "in"},
            400,
            10178,
            "priority groups can not be used with push consumers",
        ),
    ],
)
def test_config_refusals(body: dict[str, Any], code: int, err_code: int, description: str) -> None:
    with pytest.raises(ApiError) as info:
        norm(**body)
    check_error(info.value, code, err_code, description)


def test_durable_name_characters() -> None:
    # The create handler copies the durable name into name, which nats-server checks first.
    with pytest.raises(ApiError) as info:
        norm(subject={"durable_in_subject": "a b"}, durable_name="a b")
    check_error(info.value, 500, 10052, f"consumer name {NAME_CHARS}")


def test_name_lengths() -> None:
    assert durable("d" * 255).durable_name == "d" * 255
    for subject in ({"durable_in_subject": "d" * 256}, {"name_in_subject": "d" * 256}):
        with pytest.raises(ApiError) as info:
            norm(subject=subject, durable_name="d" * 256)
        check_error(info.value, 400, 10102, "consumer name is too long, maximum allowed is 255")
    with pytest.raises(ApiError) as info:
        norm(subject={"name_in_subject": "é" * 128})  # 256 bytes
    check_error(info.value, 400, 10102, "consumer name is too long, maximum allowed is 255")


def test_accepted_edge_values() -> None:
    assert durable(description="x" * 4096).description == "x" * 4096
    assert durable(max_expires=MS).max_expires == MS
    assert durable(sample_freq="50%").sample_freq == "50%"
    assert durable(sample_freq="+7").sample_freq == "+7"
    # The stored required level counts (nats-server adds it before it checks the size).
    room = 128 * 1024 - 1 - len("_nats.req.level") - 1
    assert durable(metadata={"k": "v" * room}).metadata is not None
    # nats-server only checks max_ack_pending against the ack policy for push consumers.
    assert durable(max_ack_pending=5).max_ack_pending == 5
    # headers_only and pause_until are plain settings.
    cfg = durable(headers_only=True, pause_until="2030-01-01T00:00:00Z")
    assert cfg.headers_only and cfg.pause_until == "2030-01-01T00:00:00Z"


def test_filters_need_not_be_in_the_stream() -> None:
    # nats-server 2.10 dropped JSConsumerFilterNotSubsetErr: a stream's subjects may change.
    assert durable(filter_subject="elsewhere.>").filter_subject == "elsewhere.>"


def test_colliding_filters_that_are_not_subsets_are_accepted() -> None:
    # subjectIsSubsetMatch, not SubjectsCollide: "s.*" and "*.a" both match "s.a", and pass.
    assert durable(filter_subjects=["s.*", "*.a"]).filter_subjects == ["s.*", "*.a"]
    assert subject_filters(durable(filter_subject="s.a")) == ["s.a"]
    # The overlap test runs before the later filters are validated, as in nats-server.
    with pytest.raises(ApiError) as info:
        durable(filter_subjects=["s.a", "s.>.b"])
    assert info.value.err_code == 10138


def test_stream_consumer_limits_are_maxima() -> None:
    limited = stream(consumer_limits=ConsumerLimits(inactive_threshold=2 * S, max_ack_pending=100))
    with pytest.raises(ApiError) as info:
        durable(stream_config=limited, ack_policy="explicit", max_ack_pending=101)
    check_error(info.value, 400, 10121, "consumer max ack pending exceeds system limit of 100")
    with pytest.raises(ApiError) as info:
        norm(limited, inactive_threshold=2 * S + 1)
    check_error(info.value, 400, 10153, "consumer inactive threshold exceeds system limit of 2s")
    # -1 (no limit) is not compared, as in nats-server.
    assert durable(stream_config=limited, max_ack_pending=-1).max_ack_pending == -1


def test_replicas_against_the_stream() -> None:
    # Stream configs are always stored with one replica; these rules matter for others only.
    three = msgspec.structs.replace(stream(retention="interest"), num_replicas=3)
    with pytest.raises(ApiError) as info:
        durable(stream_config=three, num_replicas=1)
    check_error(
        info.value,
        400,
        10134,
        "consumer config replicas must match interest retention stream's replicas",
    )
    none = msgspec.structs.replace(LIMITS, num_replicas=0)
    with pytest.raises(ApiError) as info:
        durable(stream_config=none, num_replicas=1)
    check_error(info.value, 400, 10126, "consumer config replica count exceeds parent stream")


# -- deliver policies ----------------------------------------------------------------------------

T0 = "2024-05-01T12:00:00Z"


@pytest.mark.parametrize(
    ("body", "description"),
    [
        (
            {"deliver_policy": "all", "opt_start_seq": 5},
            "deliver all, but optional start sequence is also set",
        ),
        (
            {"deliver_policy": "all", "opt_start_time": T0},
            "deliver all, but optional start time is also set",
        ),
        (
            {"deliver_policy": "last", "opt_start_seq": 5},
            "deliver last, but optional start sequence is also set",
        ),
        (
            {"deliver_policy": "last", "opt_start_time": T0},
            "deliver last, but optional start time is also set",
        ),
        (
            {"deliver_policy": "last_per_subject", "filter_subject": "s.a", "opt_start_seq": 5},
            "deliver last per subject, but optional start sequence is also set",
        ),
        (
            {"deliver_policy": "last_per_subject", "filter_subject": "s.a", "opt_start_time": T0},
            "deliver last per subject, but optional start time is also set",
        ),
        (
            {"deliver_policy": "last_per_subject"},
            "deliver last per subject, but optional filter subject is not set",
        ),
        (
            {"deliver_policy": "new", "opt_start_seq": 5},
            "deliver new, but optional start sequence is also set",
        ),
        (
            {"deliver_policy": "new", "opt_start_time": T0},
            "deliver new, but optional start time is also set",
        ),
        (
            {"deliver_policy": "by_start_sequence"},
            "deliver by start sequence, but optional start sequence is not set",
        ),
        (
            {"deliver_policy": "by_start_sequence", "opt_start_seq": 5, "opt_start_time": T0},
            "deliver by start sequence, but optional start time is also set",
        ),
        (
            {"deliver_policy": "by_start_time"},
            "deliver by start time, but optional start time is not set",
        ),
        (
            {"deliver_policy": "by_start_time", "opt_start_time": T0, "opt_start_seq": 5},
            "deliver by start time, but optional start start sequence is also set",
        ),
    ],
)
def test_deliver_policy_options(body: dict[str, Any], description: str) -> None:
    with pytest.raises(ApiError) as info:
        durable(**body)
    check_error(info.value, 400, 10094, f"consumer delivery policy is {description}")


def test_deliver_policy_options_accepted() -> None:
    assert durable(deliver_policy="by_start_sequence", opt_start_seq=5).opt_start_seq == 5
    cfg = durable(deliver_policy="by_start_time", opt_start_time="2024-05-01T14:00:00.500+02:00")
    assert cfg.opt_start_time == "2024-05-01T14:00:00.5+02:00"  # as nats-server writes it back
    assert durable(deliver_policy="last_per_subject", filter_subjects=["s.a"]).deliver_policy == (
        "last_per_subject"
    )
    with pytest.raises(ApiError) as info:
        durable(deliver_policy="by_start_time", opt_start_time="yesterday")
    assert info.value.err_code == 10025


# -- workqueue streams -------------------------------------------------------------------------


def test_workqueue_rules() -> None:
    with pytest.raises(ApiError) as info:
        durable(stream_config=WORKQUEUE)  # ack none
    check_error(
        info.value,
        400,
        10084,
        "consumer in pull mode requires explicit ack policy on workqueue stream",
    )
    with pytest.raises(ApiError) as info:
        durable(stream_config=WORKQUEUE, ack_policy="all")
    check_error(info.value, 400, 10098, "workqueue stream requires explicit ack")
    with pytest.raises(ApiError) as info:
        durable(stream_config=WORKQUEUE, ack_policy="explicit", deliver_policy="new")
    check_error(info.value, 400, 10101, "consumer must be deliver all on workqueue stream")
    assert durable(stream_config=WORKQUEUE, ack_policy="explicit").ack_policy == "explicit"


def wq(name: str, *filters: str) -> ConsumerConfig:
    return durable(
        name, stream_config=WORKQUEUE, ack_policy="explicit", filter_subjects=list(filters)
    )


def test_workqueue_overlap() -> None:
    check_workqueue_overlap(wq("A"), [])
    check_workqueue_overlap(wq("A", "s.a"), [wq("B", "s.b"), wq("C", "t.*")])
    check_workqueue_overlap(wq("A"), [wq("A", "s.a")])  # itself, being updated
    with pytest.raises(ApiError) as info:
        check_workqueue_overlap(wq("A"), [wq("B", "s.b")])
    check_error(
        info.value, 400, 10099, "multiple non-filtered consumers not allowed on workqueue stream"
    )
    for others in ([wq("B")], [wq("B", "s.*")], [wq("B", "x"), wq("C", "*.a")]):
        with pytest.raises(ApiError) as info:
            check_workqueue_overlap(wq("A", "s.a"), others)
        check_error(info.value, 400, 10100, "filtered consumer not unique on workqueue stream")


# -- updates (checkNewConsumerConfig) ------------------------------------------------------------


def base(**kw: Any) -> ConsumerConfig:
    return durable(ack_policy="explicit", **kw)


def test_allowed_updates() -> None:
    old = base(filter_subject="s.a")
    new = base(
        description="d",
        ack_wait=S,
        max_deliver=5,
        backoff=[S, 2 * S],
        filter_subjects=["s.b", "t.c"],
        sample_freq="10",
        max_ack_pending=5,
        headers_only=True,
        max_batch=10,
        max_expires=S,
        max_bytes=1024,
        inactive_threshold=60 * S,
        metadata={"k": "v"},
    )
    assert check_update(old, new) == new
    assert check_update(old, old) == old


def test_update_keeps_pause_until() -> None:
    old = base(pause_until="2030-01-01T00:00:00Z")
    assert check_update(old, base()).pause_until == old.pause_until
    assert check_update(base(), old).pause_until is None
    # So a create of the same config, paused or not, is no change.
    assert check_update(old, base(), action="create") == old


def test_create_action_needs_an_identical_config() -> None:
    old = base()
    assert check_update(old, base(), action="create") == old
    with pytest.raises(ApiError) as info:
        check_update(old, base(description="changed"), action="create")
    check_error(info.value, 400, 10148, "consumer already exists")


def test_start_time_compares_instants() -> None:
    old = base(deliver_policy="by_start_time", opt_start_time="2024-05-01T12:00:00Z")
    new = base(deliver_policy="by_start_time", opt_start_time="2024-05-01T14:00:00+02:00")
    # The same instant is no change of start time; the new config is kept as it was written.
    assert check_update(old, new).opt_start_time == "2024-05-01T14:00:00+02:00"


@pytest.mark.parametrize(
    ("old", "new", "description"),
    [
        ({}, {"deliver_policy": "new"}, "deliver policy can not be updated"),
        (
            {"deliver_policy": "by_start_sequence", "opt_start_seq": 1},
            {"deliver_policy": "by_start_sequence", "opt_start_seq": 2},
            "start sequence can not be updated",
        ),
        (
            {"deliver_policy": "by_start_time", "opt_start_time": T0},
            {"deliver_policy": "by_start_time", "opt_start_time": "2024-05-01T12:00:01Z"},
            "start time can not be updated",
        ),
        ({}, {"ack_policy": "all"}, "ack policy can not be updated"),
        ({}, {"max_waiting": 10}, "max waiting can not be updated"),
    ],
)
def test_refused_updates(old: dict[str, Any], new: dict[str, Any], description: str) -> None:
    old_cfg = base(**old)
    new_kw = {"ack_policy": "explicit", **new}
    new_cfg = durable(**new_kw)
    with pytest.raises(ApiError) as info:
        check_update(old_cfg, new_cfg)
    check_error(info.value, *PULL_ONLY, description)


def test_refused_updates_of_fields_normalize_never_sets() -> None:
    # Configs stored by other means (or by nats-server) are still held to its rules.
    old = base()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"replay_policy": "original"}, "replay policy can not be updated"),
        ({"idle_heartbeat": S}, "heart beats can not be updated"),
        ({"flow_control": True}, "flow control can not be updated"),
        ({"deliver_subject": "in"}, "can not update pull consumer to push based"),
        ({"mem_storage": True}, "storage type can not be updated"),
        ({"direct": True}, "direct can not be updated"),
        ({"sourcing": True}, "sourcing can not be updated"),
    ]
    for change, description in cases:
        with pytest.raises(ApiError) as info:
            check_update(old, msgspec.structs.replace(old, **change))
        check_error(info.value, *PULL_ONLY, description)
    with pytest.raises(ApiError) as info:
        check_update(msgspec.structs.replace(old, deliver_subject="in"), old)
    check_error(info.value, *PULL_ONLY, "can not update push consumer to pull based")
    # A push consumer's deliver subject moves, unless a client subscribes to the old one.
    pushed = msgspec.structs.replace(old, deliver_subject="in")
    moved = msgspec.structs.replace(old, deliver_subject="elsewhere")
    assert check_update(pushed, moved).deliver_subject == "elsewhere"
    with pytest.raises(ApiError) as info:
        check_update(pushed, moved, bound=True)
    check_error(info.value, 400, 10013, "consumer name already in use")
    with pytest.raises(ApiError) as info:
        check_update(old, msgspec.structs.replace(old, backoff=[S, S], max_deliver=1))
    check_error(info.value, 400, 10116, "max deliver is required to be > length of backoff values")


# -- rendering -----------------------------------------------------------------------------------


def test_wire_of_a_durable_pull_consumer() -> None:
    # What nats-server sends for `nats consumer add --pull --defaults D` (less the server's own
    # metadata, which the API adds).
    assert consumer_config_to_wire(base()) == {
        "durable_name": "D",
        "name": "D",
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "ack_wait": 30 * S,
        "max_deliver": -1,
        "replay_policy": "instant",
        "max_waiting": 512,
        "max_ack_pending": 1000,
        "num_replicas": 0,
        "metadata": {"_nats.req.level": "0"},
    }


def test_wire_of_an_ephemeral() -> None:
    cfg = norm(subject={"name_in_subject": "E"})
    assert consumer_config_to_wire(cfg) == {
        "name": "E",
        "deliver_policy": "all",
        "ack_policy": "none",
        "max_deliver": -1,
        "replay_policy": "instant",
        "max_waiting": 512,
        "inactive_threshold": 5 * S,
        "num_replicas": 0,
        "metadata": {"_nats.req.level": "0"},
    }


def test_wire_keys_and_order() -> None:
    cfg = base(
        description="d",
        deliver_policy="by_start_time",
        opt_start_time=T0,
        backoff=[S, 2 * S],
        max_deliver=4,
        filter_subjects=["s.a", "s.b"],
        sample_freq="5%",
        headers_only=True,
        max_batch=1,
        max_expires=S,
        max_bytes=2,
        metadata={"k": "v"},
        pause_until=T0,
    )
    wire = consumer_config_to_wire(cfg)
    assert list(wire) == [
        "durable_name",
        "name",
        "description",
        "deliver_policy",
        "opt_start_time",
        "ack_policy",
        "ack_wait",
        "max_deliver",
        "backoff",
        "filter_subjects",
        "replay_policy",
        "sample_freq",
        "max_waiting",
        "max_ack_pending",
        "headers_only",
        "max_batch",
        "max_expires",
        "max_bytes",
        "num_replicas",
        "metadata",
        "pause_until",
    ]
    assert wire["opt_start_time"] == T0 and wire["backoff"] == [S, 2 * S]
    wire["backoff"].append(0)  # a copy, not the config's own list
    assert cfg.backoff == [S, 2 * S]
    # A zero time is still a time: nats-server writes non-nil pointers.
    zero = msgspec.structs.replace(cfg, pause_until="0001-01-01T00:00:00Z")
    assert consumer_config_to_wire(zero)["pause_until"] == "0001-01-01T00:00:00Z"


def roundtrip(cfg: ConsumerConfig) -> ConsumerConfig:
    body = json.dumps({"stream_name": "S", "config": consumer_config_to_wire(cfg)}).encode()
    return decode_create_request(body).config


_filters = st.lists(st.sampled_from(["s.a", "s.b", "t.x", "t.y"]), unique=True, max_size=3)


@st.composite
def configs(draw: st.DrawFn) -> tuple[ConsumerConfig, dict[str, str]]:
    is_durable = draw(st.booleans())
    name = draw(st.text("abcXYZ019_-", min_size=1, max_size=12))
    ack = draw(st.sampled_from(["none", "all", "explicit"]))
    backoff = draw(st.lists(st.integers(1, 10**12), max_size=3))
    cfg = ConsumerConfig(
        durable_name=name if is_durable else "",
        description=draw(st.text(max_size=20)),
        deliver_policy=draw(st.sampled_from(["all", "last", "new"])),
        ack_policy=ack,
        ack_wait=draw(st.integers(0, 10**12)),
        max_deliver=len(backoff) + draw(st.integers(0, 5)) if backoff else draw(st.integers(-3, 9)),
        backoff=backoff or None,
        filter_subjects=draw(_filters) or None,
        max_waiting=draw(st.integers(-2, 10_000)),
        max_ack_pending=draw(st.integers(-3, 10_000)),
        headers_only=draw(st.booleans()),
        max_batch=draw(st.integers(-1, 1000)),
        max_expires=draw(st.sampled_from([0, MS, 5 * S])),
        max_bytes=draw(st.integers(-1, 10**9)),
        inactive_threshold=draw(st.integers(-1, 10**12)),
        num_replicas=draw(st.integers(0, 1)),
        metadata=draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
        or None,
        pause_until=draw(st.sampled_from([None, T0, "2024-05-01T12:00:00.123456789Z"])),
    )
    return cfg, {"name_in_subject": name}


@given(configs())
def test_normalized_configs_roundtrip_and_are_stable(
    case: tuple[ConsumerConfig, dict[str, str]],
) -> None:
    requested, subject = case
    cfg = normalize(requested, stream_config=LIMITS, **subject)
    assert roundtrip(cfg) == cfg
    assert normalize(cfg, stream_config=LIMITS, **subject) == cfg
    assert check_update(cfg, cfg) == cfg


# -- create request bodies ---------------------------------------------------------------------


def test_decode_create_request() -> None:
    req = decode_create_request(
        b'{"stream_name":"S","action":"create","pedantic":true,'
        b'"config":{"durable_name":"D","ack_policy":"explicit",'
        b'"deliver_policy":"undefined","opt_start_time":null,"filter_subjects":null,'
        b'"description":null,"pause_until":"2024-05-01T14:00:00+02:00"}}'
    )
    assert req == CreateConsumerRequest(
        stream_name="S",
        action="create",
        pedantic=True,
        config=ConsumerConfig(
            durable_name="D", ack_policy="explicit", pause_until="2024-05-01T14:00:00+02:00"
        ),
    )
    assert decode_create_request(b"") == CreateConsumerRequest()
    # Strict at every depth (nats-server's CreateConsumerRequest and ConsumerConfig have no
    # other field), a key in other case naming a field as encoding/json matches it.
    with pytest.raises(ApiError, match='invalid JSON: json: unknown field "unknown"'):
        decode_create_request(b'{"stream_name":"S","unknown":1,"bogus":2}')
    with pytest.raises(ApiError, match='invalid JSON: json: unknown field "whatever"'):
        decode_create_request(b'{"config":{"durable_name":"D","whatever":[1]}}')
    assert decode_create_request(b'{"Stream_Name":"S"}') == CreateConsumerRequest(stream_name="S")
    assert decode_create_request(b"  \n") == CreateConsumerRequest()
    assert decode_create_request(b'{"config":null,"action":""}') == CreateConsumerRequest()


@pytest.mark.parametrize(
    ("body", "description"),
    [
        (b'{"config":{"deliver_policy":"bogus"}}', 'can not unmarshal "\\"bogus\\""'),
        (b'{"config":{"ack_policy":"maybe"}}', 'can not unmarshal "\\"maybe\\""'),
        (b'{"config":{"replay_policy":5}}', 'can not unmarshal "5"'),
        (b'{"config":{"ack_policy":null}}', 'can not unmarshal "null"'),
        (b'{"config":{"priority_policy":"first"}}', 'unknown priority policy: "first"'),
        (b'{"action":"upsert"}', 'unknown consumer action: "upsert"'),
        (b'{"action":null}', "unknown consumer action: null"),
    ],
)
def test_decode_enum_errors(body: bytes, description: str) -> None:
    with pytest.raises(ApiError) as info:
        decode_create_request(body)
    check_error(info.value, 400, 10025, f"invalid JSON: {description}")


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"[]",
        b'{"config":[]}',
        b'{"config":{"opt_start_seq":-1}}',
        b'{"config":{"max_deliver":1.5}}',
        b'{"config":{"ack_wait":"30s"}}',
        b'{"config":{"max_waiting":9223372036854775808}}',
        b'{"config":{"opt_start_time":"2024-05-01"}}',
        b'{"config":{"pause_until":"2024-13-01T00:00:00Z"}}',
        b'{"config":{"headers_only":"yes"}}',
    ],
)
def test_decode_invalid_json(body: bytes) -> None:
    with pytest.raises(ApiError) as info:
        decode_create_request(body)
    assert (info.value.code, info.value.err_code) == (400, 10025)
    assert info.value.description.startswith("invalid JSON: ")


# -- pull requests -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "batch"),
    [
        (b"", 1),
        (b"  \r\n", 1),
        (b"5", 5),
        (b" 7\n", 7),
        (b"+3", 3),
        (b"-2", -2),
        (b"007", 7),
        (b"abc", 1),
        (b"1_000", 1),
        (b"1.5", 1),
        (b"99999999999999999999", 1),  # out of Atoi's range
        (b"\xff\xfe", 1),
        (b"[1]", 1),
    ],
)
def test_next_request_plain_bodies(body: bytes, batch: int) -> None:
    assert parse_next_request(body) == NextRequest(batch=batch)


@given(st.integers(-(2**63), 2**63 - 1))
def test_next_request_any_integer(n: int) -> None:
    assert parse_next_request(str(n).encode()).batch == n


def test_next_request_json() -> None:
    req = parse_next_request(
        b'{"batch":10,"expires":5000000000,"max_bytes":1024,"no_wait":true,'
        b'"idle_heartbeat":1000000000,"group":"g","other":1}'
    )
    assert req == NextRequest(
        batch=10, expires=5 * S, max_bytes=1024, no_wait=True, idle_heartbeat=S, group="g"
    )
    # Without "batch" the JSON form means 0 (nats-server still hands out one message).
    assert parse_next_request(b'{"expires":1000}') == NextRequest(expires=1000)
    assert parse_next_request(b'{"batch":null,"expires":1000}') == NextRequest(expires=1000)
    assert parse_next_request(b'{"idle_heartbeat":1,"expires":2}').idle_heartbeat == 1


@pytest.mark.parametrize(
    "body",
    [
        b'{"idle_heartbeat":1000000000}',
        b'{"idle_heartbeat":1000000000,"expires":1999999999}',
    ],
)
def test_next_request_heartbeat_too_large(body: bytes) -> None:
    with pytest.raises(NextRequestError) as info:
        parse_next_request(body)
    assert (info.value.status, info.value.description) == (
        400,
        "Bad Request - heartbeat value too large",
    )
    assert str(info.value) == "heartbeat value too large"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("body", [b"{", b'{"batch":"5"}', b'{"batch":1.5}', b'{"batch":1} x'])
def test_next_request_bad_json(body: bytes) -> None:
    with pytest.raises(NextRequestError) as info:
        parse_next_request(body)
    assert info.value.status == 400
    assert info.value.description.startswith("Bad Request - ")


def limited_consumer() -> ConsumerConfig:
    return base(max_batch=10, max_expires=90 * S, max_bytes=1000)


@pytest.mark.parametrize(
    ("req", "status", "description"),
    [
        (NextRequest(batch=11), 409, "Exceeded MaxRequestBatch of 10"),
        (NextRequest(batch=1, expires=90 * S + 1), 409, "Exceeded MaxRequestExpires of 1m30s"),
        (NextRequest(batch=1, max_bytes=1001), 409, "Exceeded MaxRequestMaxBytes of 1000"),
        (
            NextRequest(batch=1, min_pending=1),
            400,
            "Bad Request - Not a Overflow Priority consumer",
        ),
        (
            NextRequest(batch=1, min_ack_pending=1),
            400,
            "Bad Request - Not a Overflow Priority consumer",
        ),
        (
            NextRequest(batch=1, id="pin"),
            400,
            "Bad Request - Not a Pinned Client Priority consumer",
        ),
        (NextRequest(batch=1, priority=10), 400, "Bad Request - Priority must be between 0 and 9"),
        (NextRequest(batch=1, priority=-1), 400, "Bad Request - Priority must be between 0 and 9"),
    ],
)
def test_next_request_limits(req: NextRequest, status: int, description: str) -> None:
    with pytest.raises(NextRequestError) as info:
        check_next_request(req, limited_consumer())
    assert (info.value.status, info.value.description) == (status, description)


def test_pinned_clients_wait_two_minutes_by_default() -> None:
    cfg = norm(priority_policy="pinned_client", priority_groups=["g"])
    assert cfg.priority_timeout == 120 * S
    assert norm(priority_policy="overflow", priority_groups=["g"]).priority_timeout == 0


def test_next_request_of_a_priority_consumer() -> None:
    cfg = norm(priority_policy="overflow", priority_groups=["g"])
    check_next_request(NextRequest(batch=1, group="g", min_pending=3), cfg)
    for req, description in [
        (NextRequest(batch=1), "Bad Request - Priority Group missing"),
        (NextRequest(batch=1, group="h"), "Bad Request - Invalid Priority Group"),
        (
            NextRequest(batch=1, group="g", id="p"),
            "Bad Request - Not a Pinned Client Priority consumer",
        ),
    ]:
        with pytest.raises(NextRequestError) as info:
            check_next_request(req, cfg)
        assert (info.value.status, info.value.description) == (400, description)


def test_next_request_within_limits() -> None:
    cfg = limited_consumer()
    check_next_request(NextRequest(batch=10, expires=90 * S, max_bytes=1000, group="g"), cfg)
    check_next_request(NextRequest(batch=10**6, expires=10**15, max_bytes=10**9), base())
    check_next_request(NextRequest(batch=1, expires=-1, priority=9), cfg)


# -- Go formatting -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (999, "999ns"),
        (1_500, "1.5µs"),
        (MS, "1ms"),
        (1_234_567, "1.234567ms"),
        (S, "1s"),
        (1_500_000_000, "1.5s"),
        (30 * S, "30s"),
        (60 * S, "1m0s"),
        (90 * S, "1m30s"),
        (3600 * S, "1h0m0s"),
        (5430 * S + 500 * MS, "1h30m30.5s"),
        (-2 * S, "-2s"),
        (-1_500, "-1.5µs"),
    ],
)
def test_go_duration(ns: int, text: str) -> None:
    assert go_duration(ns) == text


def test_go_atoi_and_quote() -> None:
    assert go_atoi("-12") == -12
    with pytest.raises(ValueError, match=r'^strconv.Atoi: parsing "1 ": invalid syntax$'):
        go_atoi("1 ")
    with pytest.raises(ValueError, match="value out of range"):
        go_atoi("9223372036854775808")
    assert go_atoi("-9223372036854775808") == -(2**63)
    assert go_quote('a"b\\c\n\x01é') == '"a\\"b\\\\c\\n\\x01é"'
