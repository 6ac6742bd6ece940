"""Claimed deliveries as the messages that go on the wire, for pull requests and push alike.

Each message is sent with its own subject and an ack reply that carries, as nats-server's does,
the delivery count, stream and consumer sequences, timestamp and the messages still pending
(`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter

from infinistream.consumer.acks import AckBatcher, AckMessage
from infinistream.consumer.config import ConsumerConfig
from infinistream.consumer.progress import TERM, Delivery, Filter, num_pending
from infinistream.consumer.records import ConsumerState
from infinistream.consumer.store import LoadedConsumer
from infinistream.protocol import Outgoing, append_header
from infinistream.stream.damage import Damage, DamageLog
from infinistream.stream.reader import MessageParts, MessageReader
from infinistream.stream.view import StreamView

# Deliveries this close in sequence are read as one run (decoding what lies between is cheaper
# than another pass over the section); a sparse filter's far-apart ones are read separately.
MAX_RUN_GAP = 64
# What a headers_only consumer sends in place of the payload: its size.
MSG_SIZE = b"Nats-Msg-Size"

_deliveries_of = attrgetter("deliveries")
_stream_seq_of = attrgetter("stream_seq")


@dataclass(frozen=True, slots=True)
class Read:
    """The messages of some deliveries, as `read_deliveries` found them: three columns, one
    entry per message found, in the deliveries' order (a pull batch's messages are then
    formatted from the columns side by side, with no tuple built per message)."""

    # The index of each message's delivery in the deliveries read.
    indices: list[int]
    messages: list[MessageParts]
    deliveries: list[Delivery]
    # Records that failed their checks: left out of the columns.
    damaged: list[Damage]


@dataclass(frozen=True, slots=True)
class Outbound:
    """Claimed deliveries as they go on the wire."""

    messages: list[Outgoing]
    # Records that failed their checks: not sent (see `move_past_damaged`).
    damaged: list[Damage]
    # The delivery of each message, in the same order.
    deliveries: list[Delivery]


async def read_deliveries(
    reader: MessageReader, view: StreamView, deliveries: list[Delivery]
) -> Read:
    """The messages of `deliveries`, read a run of one segment at a time, not one by one. A
    message gone from the stream meanwhile is left out, and so is one whose record is damaged
    (reported apart)."""
    indices: list[int] = []
    messages: list[MessageParts] = []
    found: list[Delivery] = []
    damaged: list[Damage] = []
    seqs = list(map(_stream_seq_of, deliveries))
    i = 0
    while i < len(deliveries):
        seg = view.segment_for(seqs[i])
        if seg is None:
            i += 1
            continue
        # A fetch's deliveries are mostly consecutive sequences: as many as the segment
        # holds from the first are taken at once when they are (the loop below then stops
        # at the next delivery, past the segment), the rest one by one.
        end = min(len(seqs), i + seg.last - seqs[i] + 1)
        consecutive = seqs[i:end] == list(range(seqs[i], seqs[i] + end - i))
        j = end - 1 if consecutive else i
        while (
            j + 1 < len(seqs)
            and 0 < seqs[j + 1] - seqs[j] <= MAX_RUN_GAP
            and seqs[j + 1] <= seg.last
        ):
            j += 1
        first, last = seqs[i], seqs[j]
        msgs = await reader.read_parts(seg, first, last, view.following(seg), damaged)
        if last - first == j - i == len(msgs) - 1:
            # The common case, a run of consecutive sequences: message k is delivery k.
            indices += range(i, j + 1)
            messages += msgs
            found += deliveries[i : j + 1]
        else:
            wanted = {d.stream_seq: k for k, d in enumerate(deliveries[i : j + 1], start=i)}
            for msg in msgs:
                k = wanted.get(msg[0])
                if k is not None:
                    indices.append(k)
                    messages.append(msg)
                    found.append(deliveries[k])
        i = j + 1
    return Read(indices, messages, found, damaged)


async def outgoing(
    reader: MessageReader,
    stream: str,
    name: str,
    cfg: ConsumerConfig,
    state: ConsumerState,
    view: StreamView,
    deliveries: list[Delivery],
) -> Outbound:
    """The messages of `deliveries` (claimed in `state`), each with its ack reply; those whose
    records are damaged are left out (and reported apart)."""
    # The pending count each message carries is what is left after it: the messages not yet
    # handed out, plus the first deliveries later in this batch.
    left = num_pending(state, Filter(cfg), view)
    counts = list(map(_deliveries_of, deliveries))
    # pending[i]: what is left after deliveries[i], the first deliveries later in this batch
    # among it.
    n = len(deliveries)
    if counts.count(1) == n:
        # All first deliveries (a fetch of new messages): one fewer after each.
        pending = list(range(left + n - 1, left - 1, -1))
    else:
        new_from_end = list(accumulate(reversed([c == 1 for c in counts]), initial=0))
        pending = [left + k for k in new_from_end[-2::-1]]
    # The ack reply's prefix is part of the format (a `%` in a name escaped): one argument
    # fewer to copy per message.
    ack_format = f"$JS.ACK.{stream}.{name}.".encode().replace(b"%", b"%%") + b"%d.%d.%d.%d.%d"
    read = await read_deliveries(reader, view, deliveries)
    if len(read.indices) != len(deliveries):
        pending = list(map(pending.__getitem__, read.indices))
    # Each message with its delivery and its pending count, side by side.
    rows = zip(read.messages, read.deliveries, pending, strict=True)
    # The MSG carries the message's own subject, whatever subscription it is routed to, as
    # nats-server delivers it (clients such as nats.js read it).
    if not cfg.headers_only:
        batch: list[Outgoing] = [
            (
                subject,
                ack_format % (d.deliveries, d.stream_seq, d.consumer_seq, ts, after),
                headers or None,
                data,
            )
            for (_, ts, subject, headers, data), d, after in rows
        ]
        return Outbound(batch, read.damaged, read.deliveries)
    batch = [
        (
            subject,
            ack_format % (d.deliveries, d.stream_seq, d.consumer_seq, ts, after),
            append_header(headers, MSG_SIZE, b"%d" % len(data)),
            b"",
        )
        for (_, ts, subject, headers, data), d, after in rows
    ]
    return Outbound(batch, read.damaged, read.deliveries)


def move_past_damaged(
    acks: AckBatcher,
    damage: DamageLog,
    stream: str,
    loaded: LoadedConsumer,
    deliveries: list[Delivery],
    damaged: list[Damage],
) -> None:
    """Damaged messages are not delivered: the consumer moves past them as past deleted ones
    (a pull request waits for others in their place).

    With explicit acks each is terminated (+TERM, as nats-server handles a pending message that
    leaves the stream), so it is neither redelivered nor holding the ack floor back. With ack
    policy all, a later ack covers it (a +TERM would ack what came before it); with none,
    nothing waits for it.
    """
    damage.skipped_by_consumer(len(damaged))
    if loaded.record.config.ack_policy != "explicit":
        return
    by_seq = {d.stream_seq: d for d in deliveries}
    for found in damaged:
        d = by_seq.get(found.seq)
        if d is not None:
            acks.add(
                AckMessage(
                    TERM, d.stream_seq, d.deliveries, None, d.consumer_seq, stream, loaded.name
                )
            )


def wire_size(msg: Outgoing) -> int:
    """What nats-server counts of a delivery against max_bytes and flow control: subject, ack
    reply, headers and data as sent."""
    subject, reply, headers, data = msg
    return len(subject) + len(reply or b"") + len(headers or b"") + len(data)
