"""Reading a fast batch's reply subject as nats-server's getFastBatch does (stream/fastbatches.py);
tests/e2e/test_fast_batch.py runs whole batches against the agent and nats-server."""

from __future__ import annotations

import pytest

from infinistream.stream.fastbatches import FastRequest, is_fast_batch, parse_reply


def test_a_reply_says_the_batch_its_pace_gap_mode_sequence_and_operation() -> None:
    assert parse_reply("_INBOX.abc.b1.10.ok.1.0.$FI") == FastRequest("b1", 10, True, 1, 0)
    assert parse_reply("_INBOX.b1.25.fail.7.2.$FI") == FastRequest("b1", 25, False, 7, 2)
    # A pace of 0 (or none a number) is 10; one over 65535 is 65535.
    assert parse_reply("i.b.0.ok.1.0.$FI") == FastRequest("b", 10, True, 1, 0)
    assert parse_reply("i.b.99999.ok.3.1.$FI") == FastRequest("b", 65535, True, 3, 1)
    assert is_fast_batch("x.$FI") and not is_fast_batch("x.FI")


@pytest.mark.parametrize(
    "reply",
    [
        "b.10.ok.1.0.$FI",  # no inbox before the id
        "i.b.10.maybe.1.0.$FI",  # gap mode
        "i.b.10.ok.1.5.$FI",  # operation
        "i.b.10.ok.0.1.$FI",  # sequence 0
        "i.b.10.ok.2.0.$FI",  # a start that is not 1
        "i.b.10.ok.1.1.$FI",  # an append at 1
        "i.b.10.ok.1.3.$FI",  # an end of batch at 1
        "i.b.10.ok.x.1.$FI",
    ],
)
def test_patterns_nats_server_rejects(reply: str) -> None:
    assert parse_reply(reply) is None
