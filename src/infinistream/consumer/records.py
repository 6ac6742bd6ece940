"""What a consumer keeps in the metadata store.

Under the stream's prefix, so deleting the stream deletes its consumers:

    {group}/sd/{stream}/c/{name}    ConsumerRecord: config, creation time, incarnation id
    {group}/sd/{stream}/cs/{name}   ConsumerState: delivered and ack floor pointers, pending acks

All of a consumer's progress is in one value, changed only by compare-and-set, so any agent can
serve any fetch or ack of any consumer and a killed agent loses no acknowledged ack.

Push consumers are also listed in the push directory, so that an agent whose client subscribes
to a deliver subject finds the consumers to serve there without reading every stream's:

    {group}/push/{stream}/{name}    PushTarget: the deliver subject, the consumer's uid
    {group}/pushes                  changed with every entry, so agents know when to reread
"""

from __future__ import annotations

import msgspec

from infinistream.consumer.config import ConsumerConfig
from infinistream.stream.records import StreamKeys


class ConsumerRecord(msgspec.Struct, kw_only=True):
    config: ConsumerConfig
    created_ns: int
    uid: str
    # Created with no name anywhere (a legacy ephemeral create): the agent chose its name, and
    # its config is shown without one, as nats-server keeps the name out of such a config.
    unnamed: bool = False

    def target(self) -> PushTarget | None:
        """Its entry in the push directory; None for a pull consumer."""
        deliver = self.config.deliver_subject
        return PushTarget(deliver, self.uid) if deliver else None


class Pending(msgspec.Struct, array_like=True, gc=False):
    """A delivered, unacknowledged message."""

    consumer_seq: int
    deliveries: int
    # Wall-clock nanoseconds after which the message is due for redelivery; 0 = due now;
    # -1 (progress.EXCEEDED) = past max_deliver, never redelivered.
    deadline: int
    # When it was last delivered.
    ts: int
    # The consumer sequence of its first delivery: the ack floor is reported against it, as
    # nats-server does, so redeliveries do not move the floor's consumer sequence.
    first_consumer_seq: int = 0


class ConsumerState(msgspec.Struct, kw_only=True):
    uid: str
    # The last stream sequence handed out (the next one to look at is this + 1).
    stream_seq: int = 0
    # The last consumer sequence handed out; every delivery, redeliveries too, gets a new one.
    consumer_seq: int = 0
    ack_floor_stream: int = 0
    ack_floor_consumer: int = 0
    pending: dict[int, Pending] = msgspec.field(default_factory=dict)
    # last_per_subject: the last message of each subject, handed out before anything newer.
    start_seqs: list[int] = msgspec.field(default_factory=list)
    last_delivered_ns: int = 0
    last_ack_ns: int = 0
    # The last pull request or ack seen, for inactive_threshold.
    last_active_ns: int = 0
    # Priority policy pinned_client (consumer/priority.py): the pinned client's id, when it
    # was pinned, and when its last pull request arrived (wall ns).
    pin_id: str = ""
    pinned_ns: int = 0
    pin_seen_ns: int = 0


class PushTarget(msgspec.Struct, array_like=True, frozen=True):
    """Where a push consumer delivers: one entry of the push directory."""

    deliver_subject: str
    uid: str


class ConsumerKeys:
    __slots__ = ("config", "push", "state")

    def __init__(self, stream_keys: StreamKeys, name: str) -> None:
        self.config = f"{stream_keys.prefix}c/{name}"
        self.state = f"{stream_keys.prefix}cs/{name}"
        self.push = push_key(stream_keys.group, stream_keys.stream, name)


def push_prefix(group: str, stream: str = "") -> str:
    """The push directory, or one stream's part of it."""
    return f"{group}/push/{stream}/" if stream else f"{group}/push/"


def push_key(group: str, stream: str, name: str) -> str:
    return f"{push_prefix(group, stream)}{name}"


def push_marker(group: str) -> str:
    return f"{group}/pushes"


def consumers_prefix(stream_keys: StreamKeys) -> str:
    return f"{stream_keys.prefix}c/"


encode = msgspec.msgpack.Encoder().encode
decode_consumer = msgspec.msgpack.Decoder(ConsumerRecord).decode
decode_consumer_state = msgspec.msgpack.Decoder(ConsumerState).decode
decode_push_target = msgspec.msgpack.Decoder(PushTarget).decode
