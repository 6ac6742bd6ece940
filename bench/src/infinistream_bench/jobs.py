"""What the load generator is asked to do (jobs) and what it reports (results).

Jobs and results are plain dataclasses: they travel between processes by pickle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Expect = Literal["puback", "no_responders"]
# "per_publish": a reply subject per publish under one `_INBOX.<id>.*` subscription, as every
# client library sends; "literal": every publish replies to one subject (no client does this).
ReplyShape = Literal["per_publish", "literal"]


@dataclass(frozen=True)
class PublishJob:
    """Pipelined publishes on `connections` connections of this worker.

    Connection i (counting from `first_connection` across all workers of the run) goes to
    `ports[i % len(ports)]` and keeps at most `window` publishes unanswered. Acks are counted
    in [start + warmup, start + warmup + duration]; sending stops at the end of that window,
    then every outstanding ack is awaited. With `messages` set, each connection sends exactly
    that many instead (a preload).
    """

    ports: tuple[int, ...]
    connections: int
    first_connection: int
    subject: str
    payload_size: int
    window: int
    warmup: float
    duration: float
    messages: int = 0
    expect: Expect = "puback"
    reply: ReplyShape = "per_publish"


@dataclass
class PublishResult:
    rate: float = 0.0  # acks per second in the window, all connections
    rate_from: str = "window"
    acked_in_window: int = 0
    window_seconds: float = 0.0
    sent: int = 0
    acked: int = 0
    errors: int = 0
    first_error: str = ""
    elapsed: float = 0.0


@dataclass(frozen=True)
class PacedJob:
    """Open loop: message i is sent at start + i / rate on one connection, acks or not.

    Subjects are used in turn. Latencies (seconds, send to ack) are kept for messages sent
    after `warmup`. A server that falls more than `max_outstanding` answers behind is
    overloaded: sending stops there (the rest of the schedule is never offered). What is
    still unanswered `drain` seconds after the last send counts as having waited until then.
    """

    port: int
    subjects: tuple[str, ...]
    rate: float
    duration: float
    payload_size: int
    warmup: float = 0.0
    drain: float = 30.0
    max_outstanding: int = 0  # 0: no limit


@dataclass
class PacedResult:
    latencies: list[float] = field(default_factory=list)
    scheduled: int = 0
    sent: int = 0
    acked: int = 0  # answers, errors included
    errors: int = 0
    overloaded_at: float = 0.0  # seconds into the run when sending stopped; 0: never
    unanswered: int = 0  # no answer when the drain ended
    first_error: str = ""
    elapsed: float = 0.0
    # How far behind schedule the sender fell at worst: the load generator's own lag.
    max_send_lag: float = 0.0


@dataclass(frozen=True)
class FetchJob:
    """Read `count` messages from each (stream, durable consumer) in turn, acking each one.

    `outstanding` pull requests of `batch` messages are kept open per consumer.
    """

    port: int
    consumers: tuple[tuple[str, str, int], ...]
    batch: int
    expires: float
    outstanding: int = 2


@dataclass
class FetchResult:
    messages: int = 0
    payload_bytes: int = 0
    seconds: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # consumers that stopped delivering


@dataclass(frozen=True)
class TailJob:
    """A waiting pull request on `durable`; publishes to `subject` at `rate` on another
    connection; each delivery timed against the send time carried in its payload."""

    port: int
    stream: str
    durable: str
    subject: str
    rate: float
    duration: float
    payload_size: int
    warmup: float = 0.0


@dataclass
class TailResult:
    latencies: list[float] = field(default_factory=list)
    published: int = 0
    delivered: int = 0
    publish_errors: int = 0
    first_error: str = ""


ClientPublishMode = Literal["sequential", "async"]


@dataclass(frozen=True)
class NatsPyPublishJob:
    """nats-py publishing for `warmup + duration` seconds, as an application would.

    "sequential": `await js.publish()` in a loop, each publish timed from call to PubAck.
    "async": `await js.publish_async()` in a loop with the JetStream context's default limit of
    publishes in flight (nats-py waits for one to be acked when the limit is reached).
    PubAcks are counted when they arrive in the window after the warm-up.
    """

    port: int
    subject: str
    payload_size: int
    mode: ClientPublishMode
    warmup: float
    duration: float


@dataclass
class ClientPublishResult:
    rate: float = 0.0  # PubAcks per second in the window
    rate_from: str = "window"
    acked: int = 0  # over the whole run
    errors: int = 0
    first_error: str = ""
    latencies: list[float] = field(default_factory=list)  # sequential: after the warm-up
    in_flight_limit: int = 0  # async: the client's default limit


@dataclass(frozen=True)
class NatsPyFetchJob:
    """nats-py reading `messages` from a durable pull consumer with `fetch(batch)`, acking each
    message with `await msg.ack()`."""

    port: int
    stream: str
    durable: str
    messages: int
    batch: int


@dataclass
class ClientFetchResult:
    messages: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class NatsPyKvPutJob:
    """nats-py putting into a new bucket (`js.create_key_value`, history 1) for `warmup +
    duration` seconds, keys `k.0` .. `k.<keys - 1>` in turn.

    `tasks` coroutines each loop on `await kv.put()`: 1 is one put at a time (each timed from
    call to PubAck); more keep that many in flight (nats-py's KV API has no `put_async`).
    Puts are counted when they complete in the window after the warm-up.
    """

    port: int
    bucket: str
    payload_size: int
    keys: int
    tasks: int
    warmup: float
    duration: float


@dataclass(frozen=True)
class NatsPyKvGetJob:
    """nats-py reading existing keys with `await kv.get()`, one at a time, each timed.

    Set-up creates the bucket (allow_direct when `direct`: nats-py then reads with
    `$JS.API.DIRECT.GET`, otherwise with `$JS.API.STREAM.MSG.GET`) and puts every key once.
    """

    port: int
    bucket: str
    direct: bool
    payload_size: int
    keys: int
    warmup: float
    duration: float


@dataclass
class KvOpsResult:
    rate: float = 0.0  # operations per second in the window
    rate_from: str = "window"
    ops: int = 0  # over the whole run
    errors: int = 0
    first_error: str = ""
    latencies: list[float] = field(default_factory=list)  # one at a time: after the warm-up


@dataclass(frozen=True)
class NatsPyKvWatchJob:
    """A `kv.watch()` on one connection while another puts at `rate`, paced (put n is due at
    n / rate, each an `await kv.put()`, so a slow ack delays the next: not open loop): keys
    `w.0` .. `w.<keys - 1>` in turn, all under the watched `w.>`.

    Each update is timed from the call of its put to the watcher yielding it; the value
    carries the put's number. Keys rotate so that no update is replaced (history 1) before
    the watcher can have seen it.
    """

    port: int
    bucket: str
    payload_size: int
    keys: int
    rate: float
    warmup: float
    duration: float


@dataclass
class KvWatchResult:
    latencies: list[float] = field(default_factory=list)  # after the warm-up
    put: int = 0  # puts acked
    seen: int = 0  # updates the watcher yielded for them
    errors: int = 0
    first_error: str = ""
    max_send_lag: float = 0.0  # how far behind schedule the putter fell at worst


Job = (
    PublishJob
    | PacedJob
    | FetchJob
    | TailJob
    | NatsPyPublishJob
    | NatsPyFetchJob
    | NatsPyKvPutJob
    | NatsPyKvGetJob
    | NatsPyKvWatchJob
)
Result = (
    PublishResult
    | PacedResult
    | FetchResult
    | TailResult
    | ClientPublishResult
    | ClientFetchResult
    | KvOpsResult
    | KvWatchResult
)


class JobError(Exception):
    """The server under test misbehaved (stalled, closed, sent garbage)."""
