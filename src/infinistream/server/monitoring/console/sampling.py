"""What the console's history samples: figures read from the monitoring endpoints' own
answers (/varz and /jsz, as nats-server shapes them), so the plots show what they show."""

from __future__ import annotations

from typing import Any

from infinistream.server.monitoring.console.history import Sampler
from infinistream.server.monitoring.jsz import Jsz, JszOptions
from infinistream.server.monitoring.varz import Varz

# Every stream and consumer, as `/jsz?accounts=true&streams=true&consumers=true` asks.
_DETAILS = JszOptions(accounts=True, streams=True, consumer=True)


def consumers_of(jsz: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        consumer
        for account in jsz.get("account_details") or []
        for stream in account.get("stream_detail") or []
        for consumer in stream.get("consumer_detail") or []
    ]


def sampler(varz_endpoint: Varz, jsz_endpoint: Jsz) -> Sampler:
    async def sample() -> tuple[dict[str, float], dict[str, float]]:
        varz = await varz_endpoint.answer()
        jsz = await jsz_endpoint.answer(_DETAILS)
        ours = varz.get("infinistream") or {}
        requests = ours.get("object_requests") or {}
        consumers = consumers_of(jsz)
        gauges = {
            "connections": varz.get("connections", 0),
            "cpu": varz.get("cpu", 0),
            "mem": varz.get("mem", 0),
            "streams": jsz.get("streams", 0),
            "consumers": jsz.get("consumers", 0),
            "messages": jsz.get("messages", 0),
            "bytes": jsz.get("bytes", 0),
            # A consumer's lag: stream messages it has yet to be delivered (num_pending).
            "lag": sum(c.get("num_pending", 0) for c in consumers),
            "ack_pending": sum(c.get("num_ack_pending", 0) for c in consumers),
        }
        counters = {
            "in_msgs": varz.get("in_msgs", 0),
            "out_msgs": varz.get("out_msgs", 0),
            "publishes": ours.get("messages_written", 0),
            "bytes_written": ours.get("bytes_written", 0),
            "flushes": ours.get("flushes", 0),
            "commit_conflicts": ours.get("commit_conflicts", 0),
            **{k: requests.get(k, 0) for k in ("puts", "gets", "heads", "lists", "deletes")},
            "bytes_put": requests.get("bytes_put", 0),
            "bytes_got": requests.get("bytes_got", 0),
        }
        return (
            {k: float(v) for k, v in gauges.items()},
            {k: float(v) for k, v in counters.items()},
        )

    return sample
