"""CONSUMER.INFO as the numbers the e2e tests compare with nats-server's for the same steps."""

from __future__ import annotations

from typing import Any

from nats.js import JetStreamContext


async def info(js: JetStreamContext, name: str = "d", stream: str = "S") -> dict[str, Any]:
    ci = await js.consumer_info(stream, name)
    return {
        "delivered": (ci.delivered.consumer_seq, ci.delivered.stream_seq),
        "ack_floor": (ci.ack_floor.consumer_seq, ci.ack_floor.stream_seq),
        "ack_pending": ci.num_ack_pending,
        "redelivered": ci.num_redelivered,
        "waiting": ci.num_waiting,
        "pending": ci.num_pending,
    }


def state(
    delivered: tuple[int, int],
    ack_floor: tuple[int, int],
    ack_pending: int = 0,
    pending: int = 0,
    waiting: int = 0,
    redelivered: int = 0,
) -> dict[str, Any]:
    """What `info` should return: (consumer seq, stream seq) pairs and counts."""
    return {
        "delivered": delivered,
        "ack_floor": ack_floor,
        "ack_pending": ack_pending,
        "redelivered": redelivered,
        "waiting": waiting,
        "pending": pending,
    }
