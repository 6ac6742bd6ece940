"""Consumer reset (`$JS.API.CONSUMER.RESET.<stream>.<consumer>`): start a consumer again from
a stream sequence, forgetting what it delivered and what awaited an ack.

nats-server's rules (server/consumer.go resetStartingSeq, resetLocalStartingSeq): no sequence
means just past the ack floor, for any deliver policy; a sequence of one's own is allowed for
deliver policy all, and for by_start_sequence and by_start_time when it is not below where the
consumer was configured to start. The reset state is what a consumer just created at that
sequence has: nothing delivered, nothing pending, the floors just below it.
"""

from __future__ import annotations

from infinistream.consumer.config import ConsumerConfig
from infinistream.consumer.records import ConsumerState
from infinistream.consumer.requests import ConsumerResetRequest, read_lenient
from infinistream.jetstream import errors


def decode_reset_request(body: bytes) -> int:
    """The sequence of a JSApiConsumerResetRequest (0: just past the ack floor), read as
    Go's encoding/json reads it (jetstream/gojson: unknown fields ignored, null a no-op), or
    JSInvalidJSONErr."""
    if not body.strip():
        return 0
    return read_lenient(body, ConsumerResetRequest).seq


def reset_sequence(cfg: ConsumerConfig, asked: int, ack_floor: int, seq_for_time: int) -> int:
    """The stream sequence the consumer starts again from; JSConsumerInvalidResetErr when
    the deliver policy does not allow `asked`. `seq_for_time` is the stream's first sequence
    at or after opt_start_time (for by_start_time)."""
    if asked == 0:
        seq = ack_floor + 1
    elif cfg.deliver_policy == "all":
        seq = asked
    elif cfg.deliver_policy == "by_start_sequence":
        if asked < cfg.opt_start_seq:
            raise errors.consumer_invalid_reset("below start seq")
        seq = asked
    elif cfg.deliver_policy == "by_start_time":
        if asked < seq_for_time:
            raise errors.consumer_invalid_reset("below start time")
        seq = asked
    else:
        raise errors.consumer_invalid_reset("not allowed")
    return max(seq, 1)


def reset_state(state: ConsumerState, seq: int) -> None:
    """Start `state` again at stream sequence `seq`: the next message handed out is the first
    at or after it, with consumer sequence 1."""
    state.stream_seq = seq - 1
    state.consumer_seq = 0
    state.ack_floor_stream = seq - 1
    state.ack_floor_consumer = 0
    state.pending = {}
    state.start_seqs = []
    state.last_delivered_ns = 0
    state.last_ack_ns = 0
