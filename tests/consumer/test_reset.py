"""The rules of a consumer reset (consumer/reset.py): where it starts again, what the deliver
policy allows, and what the state forgets. The e2e tests compare the answers with nats-server."""

from __future__ import annotations

import pytest

from infinistream.consumer.config import ConsumerConfig
from infinistream.consumer.records import ConsumerState, Pending
from infinistream.consumer.reset import decode_reset_request, reset_sequence, reset_state
from infinistream.jetstream import errors


def test_the_request_is_read_as_go_reads_it() -> None:
    assert decode_reset_request(b"") == 0
    assert decode_reset_request(b"null") == 0
    assert decode_reset_request(b'{"seq": null}') == 0
    assert decode_reset_request(b'{"SEQ": 7, "other": 1}') == 7
    for body in (b'{"seq": 1.5}', b'{"seq": true}', b"[]", b'"x"', b"{"):
        with pytest.raises(errors.ApiError) as exc:
            decode_reset_request(body)
        assert exc.value.err_code == 10025


@pytest.mark.parametrize(
    ("policy", "asked", "expected"),
    [
        ("all", 0, 4),
        ("all", 9, 9),
        ("new", 0, 4),
        ("by_start_sequence", 5, 5),
        ("by_start_time", 6, 6),
    ],
)
def test_where_it_starts_again(policy: str, asked: int, expected: int) -> None:
    cfg = ConsumerConfig(deliver_policy=policy, opt_start_seq=5 if "sequence" in policy else 0)
    assert reset_sequence(cfg, asked, ack_floor=3, seq_for_time=6) == expected


@pytest.mark.parametrize(
    ("policy", "asked", "reason"),
    [
        ("by_start_sequence", 4, "below start seq"),
        ("by_start_time", 5, "below start time"),
        ("last", 2, "not allowed"),
        ("last_per_subject", 2, "not allowed"),
    ],
)
def test_what_the_policy_refuses(policy: str, asked: int, reason: str) -> None:
    cfg = ConsumerConfig(deliver_policy=policy, opt_start_seq=5 if "sequence" in policy else 0)
    with pytest.raises(errors.ApiError) as exc:
        reset_sequence(cfg, asked, ack_floor=3, seq_for_time=6)
    assert (exc.value.err_code, exc.value.description) == (10204, f"invalid reset: {reason}")


def test_the_state_forgets_what_it_delivered() -> None:
    state = ConsumerState(
        uid="u",
        stream_seq=9,
        consumer_seq=12,
        ack_floor_stream=3,
        ack_floor_consumer=4,
        pending={5: Pending(5, 2, 100, 50, 5)},
        start_seqs=[8],
        last_delivered_ns=7,
        last_ack_ns=6,
    )
    reset_state(state, 4)
    assert state == ConsumerState(uid="u", stream_seq=3, ack_floor_stream=3)
