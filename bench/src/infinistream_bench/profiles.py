"""How long and how hard every workload runs: the full profile and the quick one (CI)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# (connections, payload bytes) of the throughput rows.
THROUGHPUT_CELLS = ((1, 128), (8, 128), (1, 4096), (8, 4096))
# Publishes in flight over all the connections of a run: a small window, nats-py's and
# nats.go's default async publish limit (4,000), and a large one.
WINDOWS = (512, 4000, 20000)
# A throughput row: (connections, payload bytes, publishes in flight).
Cell = tuple[int, int, int]


def every_window(cells: tuple[tuple[int, int], ...], windows: tuple[int, ...]) -> tuple[Cell, ...]:
    return tuple((c, s, w) for c, s in cells for w in windows)


@dataclass(frozen=True)
class Profile:
    name: str
    # publish throughput, raw protocol, a reply subject per publish
    throughput: tuple[Cell, ...]
    # the row with one literal reply subject for every publish (the old shape)
    literal_cell: Cell
    warmup: float
    duration: float
    # publish latency, open loop
    latency_rates: tuple[int, ...]
    latency_warmup: float
    latency_duration: float
    # fetch and ack, raw protocol
    fetch_messages: int
    fetch_batch: int
    # end to end
    tail_rate: float
    tail_warmup: float
    tail_duration: float
    # real clients (nats-py, nats.js)
    client_warmup: float
    client_duration: float
    client_fetch_messages: int
    client_fetch_batch: int
    # the PUT budget: open-loop publishing at each rate, on the local default and the S3 default
    budget_rates: tuple[int, ...]
    budget_warmup: float
    budget_duration: float
    budget_payload: int
    # spreading publishes over N streams: write requests, then cold reads
    cost_streams: tuple[int, ...]
    cost_rate: float
    cost_duration: float
    cost_payload: int
    cost_read_streams: int
    # Key-Value with nats-py: puts and gets over this many keys (a get reads existing keys),
    # for client_duration after client_warmup; a watch's delivery latency at a put rate
    kv_keys: int
    kv_watch_rate: float
    kv_watch_warmup: float
    kv_watch_duration: float
    # `kv.put()` coroutines kept in flight (nats-py's KV API has no put_async)
    kv_put_tasks: int = 256
    # keys the watched puts rotate over: none is replaced before its watcher can have seen it
    kv_watch_keys: int = 64
    payload: int = 128  # latency, fetch, end-to-end and real-client payloads
    preload_window: int = 4000  # publishes in flight while filling a stream to fetch from
    # nats.js has no async publish limit of its own: the application keeps this many unsettled
    natsjs_window: int = 4000
    # The PUT budget InfiniStream defaults to on S3 (--linger)
    s3_linger_ms: int = 250

    def settings(self) -> dict[str, Any]:
        return asdict(self)


FULL = Profile(
    name="full",
    throughput=every_window(THROUGHPUT_CELLS, WINDOWS),
    literal_cell=(1, 128, 4000),
    warmup=1.0,
    duration=5.0,
    latency_rates=(1000, 10000),
    latency_warmup=1.0,
    latency_duration=10.0,
    fetch_messages=100_000,
    fetch_batch=500,
    tail_rate=200,
    tail_warmup=1.0,
    tail_duration=10.0,
    client_warmup=1.0,
    client_duration=5.0,
    client_fetch_messages=50_000,
    client_fetch_batch=100,
    budget_rates=(10, 1000, 20000),
    budget_warmup=1.0,
    budget_duration=10.0,
    budget_payload=1024,
    cost_streams=(1, 100, 1000),
    cost_rate=2000,
    cost_duration=8.0,
    cost_payload=1024,
    cost_read_streams=50,
    kv_keys=1000,
    kv_watch_rate=200,
    kv_watch_warmup=1.0,
    kv_watch_duration=10.0,
)

QUICK = Profile(
    name="quick",
    # Every window once and both extremes of the cells: every row's pipeline in under a minute
    # (nats-server with sync always takes seconds to answer 20,000 publishes in flight).
    throughput=(*every_window(((1, 128),), WINDOWS), (8, 4096, 4000)),
    literal_cell=(1, 128, 4000),
    warmup=0.1,
    duration=0.25,
    latency_rates=(1000, 10000),
    latency_warmup=0.05,
    latency_duration=0.15,
    fetch_messages=2000,
    fetch_batch=500,
    tail_rate=100,
    tail_warmup=0.05,
    tail_duration=0.25,
    client_warmup=0.05,
    client_duration=0.25,
    client_fetch_messages=1000,
    client_fetch_batch=100,
    budget_rates=(10, 1000, 20000),
    budget_warmup=0.0,
    budget_duration=0.5,
    budget_payload=1024,
    cost_streams=(1, 10, 100),
    cost_rate=1000,
    cost_duration=0.5,
    cost_payload=1024,
    cost_read_streams=5,
    kv_keys=100,
    kv_watch_rate=100,
    kv_watch_warmup=0.05,
    kv_watch_duration=0.5,
)
