"""The clients of a fault run: publishers, a live consumer, and the audit that reads the stream.

Each publisher is its own nats-py connection (reconnecting, to any agent of the list), sends
numbered messages with a reply subject of its own and a window of publishes in flight, and
records every answer in the `History`; it never retries. The live consumer is a durable pull
consumer with explicit acks. The audit, once the faults are over, reads every stored message
with a fresh consumer (ack policy none) and returns sequence -> message id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from fault.jepsen import History, message_id, parse_id

STREAM = "FAULT"
SUBJECT = "fault.msgs"
PAYLOAD_PAD = b"." * 48
# A run waits for events (publishes acknowledged, refused; agents ready again), never for a
# number of seconds: a slow or busy machine takes longer and passes. The time limit of a wait
# is only a safety net, far beyond what any machine needs, so that a run that cannot make
# progress fails saying what it waited for instead of running into the test's timeout.
SAFETY_NET = 120.0


async def connect(servers: Sequence[str], **options: Any) -> Client:
    return await nats.connect(
        servers=list(servers),
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.1,
        connect_timeout=2,
        **options,
    )


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else b""
    reply = await nc.request("$JS.API." + subject, data, timeout=10)
    return json.loads(reply.data)  # type: ignore[no-any-return]


async def create_stream(nc: Client) -> None:
    for _ in range(50):
        try:
            resp = await api(
                nc, f"STREAM.CREATE.{STREAM}", {"name": STREAM, "subjects": ["fault.>"]}
            )
            if "error" not in resp:
                return
        except Exception:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("could not create the stream")


async def until(condition: Callable[[], bool], what: str, *, within: float = SAFETY_NET) -> None:
    """Wait until `condition()` holds; AssertionError naming `what` past the safety net."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within:.0f} s (the safety net)")
        await asyncio.sleep(0.1)


async def acked(history: History, count: int, *, sent_after: float, what: str = "") -> float:
    """Wait until `count` publishes sent after `sent_after` are acknowledged; returns when."""
    await until(
        lambda: history.acked_since(sent_after) >= count,
        f"{count} publishes acknowledged {what}".rstrip(),
    )
    return time.monotonic()


async def refused(history: History, count: int, *, sent_after: float, what: str = "") -> float:
    """Wait until `count` publishes sent after `sent_after` are refused; returns when."""
    await until(
        lambda: history.refused_since(sent_after) >= count,
        f"{count} publishes refused {what}".rstrip(),
    )
    return time.monotonic()


async def not_acked(history: History, count: int, *, sent_after: float, what: str = "") -> float:
    """Wait until `count` publishes sent after `sent_after` are refused or given up on."""
    await until(
        lambda: history.unacked_since(sent_after) >= count,
        f"{count} publishes refused or unanswered {what}".rstrip(),
    )
    return time.monotonic()


class Publisher:
    def __init__(
        self,
        number: int,
        servers: Sequence[str],
        history: History,
        *,
        window: int = 16,
        ack_timeout: float = 8.0,
        pace: float = 0.0,
        pad: bytes = PAYLOAD_PAD,
    ) -> None:
        self.number = number
        # What follows the message id in each payload (dots: the id ends at the first).
        self.pad = pad
        self.servers = servers
        self.history = history
        self.window = asyncio.Semaphore(window)
        self.ack_timeout = ack_timeout
        self.pace = pace
        self._outstanding: dict[int, asyncio.TimerHandle] = {}
        self._nc: Client | None = None

    async def run(self, stop: asyncio.Event) -> None:
        nc = self._nc = await connect(self.servers)
        inbox = nc.new_inbox()
        await nc.subscribe(inbox + ".*", cb=self._answer)
        n = 0
        loop = asyncio.get_running_loop()
        try:
            while not stop.is_set():
                await self.window.acquire()
                if stop.is_set():
                    self.window.release()
                    break
                n += 1
                msg_id = self.history.send(self.number, n)
                self._outstanding[n] = loop.call_later(self.ack_timeout, self._unanswered, n)
                try:
                    await nc.publish(SUBJECT, msg_id.encode() + self.pad, reply=f"{inbox}.{n}")
                except Exception:
                    # Not sent (the client gave up on it): indeterminate, like an unanswered one.
                    self._unanswered(n)
                if self.pace:
                    await asyncio.sleep(self.pace)
            # Late answers still count: wait for the ones in flight, up to their timeout.
            deadline = time.monotonic() + self.ack_timeout + 1
            while self._outstanding and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    def _unanswered(self, n: int) -> None:
        """No answer in time, or not sent: indeterminate; the window moves on."""
        self.history.give_up(message_id(self.number, n))
        self._give_up(n)

    def _give_up(self, n: int) -> None:
        timer = self._outstanding.pop(n, None)
        if timer is not None:
            timer.cancel()
            self.window.release()

    async def _answer(self, msg: Msg) -> None:
        n = int(msg.subject.rsplit(".", 1)[1])
        # The client may have moved to another agent it learnt of (INFO's connect_urls).
        url = self._nc.connected_url if self._nc is not None else None
        via = url.netloc if url is not None else ""
        self.history.answer(f"p{self.number}-{n}", msg.data, via)
        self._give_up(n)


class LiveConsumer:
    """A durable pull consumer with explicit acks, fetching all along."""

    def __init__(self, servers: Sequence[str], history: History, *, ack_wait: float = 2.0) -> None:
        self.servers = servers
        self.history = history
        self.ack_wait = ack_wait

    async def run(self, stop: asyncio.Event) -> None:
        nc = await connect(self.servers)
        js = nc.jetstream(timeout=10)
        try:
            for _ in range(50):
                try:
                    await js.add_consumer(
                        STREAM,
                        ConsumerConfig(
                            durable_name="LIVE",
                            ack_policy=AckPolicy.EXPLICIT,
                            ack_wait=self.ack_wait,
                            max_deliver=-1,
                        ),
                    )
                    break
                except Exception:
                    await asyncio.sleep(0.2)
            sub = await js.pull_subscribe_bind("LIVE", STREAM)
            while not stop.is_set():
                try:
                    msgs = await sub.fetch(100, timeout=1)
                except (nats.errors.TimeoutError, TimeoutError):
                    continue
                except Exception:
                    self.history.consumer_errors += 1
                    await asyncio.sleep(0.1)
                    continue
                for m in msgs:
                    self.history.consume(
                        m.data[: m.data.index(b".")].decode(), m.metadata.sequence.stream
                    )
                    with contextlib.suppress(Exception):
                        await m.ack()
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    async def drain(self, servers: Sequence[str], *, within: float = SAFETY_NET) -> None:
        """After the run: fetch until the consumer has nothing pending or unacked.

        The safety net `within` counts from the last fetch that read something, as `audit`'s
        does: a consumer that lagged ten thousand messages behind the publishers on a busy
        machine drains them, each ack confirmed, for minutes, and is not stuck."""
        nc = await connect(servers)
        js = nc.jetstream(timeout=10)
        sub = await js.pull_subscribe_bind("LIVE", STREAM)
        deadline = time.monotonic() + within
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    for m in await sub.fetch(200, timeout=1):
                        msg_id = m.data[: m.data.index(b".")].decode()
                        self.history.consume(msg_id, m.metadata.sequence.stream)
                        await m.ack_sync()
                        deadline = time.monotonic() + within
                with contextlib.suppress(Exception):
                    info = await js.consumer_info(STREAM, "LIVE")
                    if info.num_pending == 0 and info.num_ack_pending == 0:
                        return
        finally:
            await nc.close()


async def audit(
    servers: Sequence[str], *, within: float = SAFETY_NET, through: int = 0
) -> dict[int, str]:
    """Every message the stream holds, sequence -> message id, read by a fresh consumer: until
    it has nothing pending and has read as far as `through` (the highest sequence acknowledged:
    an agent whose view of the stream lags may say nothing is pending before that).

    The safety net `within` counts from the last fetch that read something: a stream of ten
    thousand messages read by agents that share a busy machine takes minutes, and a run that
    reads on is not stuck (the lame duck run read 11,184 of 12,120 in 120 s under the suite)."""
    nc = await connect(servers)
    js = nc.jetstream(timeout=10)
    name = f"AUDIT{int(time.time() * 1000) % 1_000_000}"
    await js.add_consumer(
        STREAM,
        ConsumerConfig(
            durable_name=name, ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL
        ),
    )
    sub = await js.pull_subscribe_bind(name, STREAM)
    stored: dict[int, str] = {}
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            with contextlib.suppress(nats.errors.TimeoutError, TimeoutError):
                for m in await sub.fetch(500, timeout=1):
                    msg_id = m.data[: m.data.index(b".")].decode()
                    parse_id(msg_id)
                    stored[m.metadata.sequence.stream] = msg_id
                    deadline = time.monotonic() + within
            info = await js.consumer_info(STREAM, name)
            if info.num_pending == 0 and max(stored, default=0) >= through:
                return stored
        raise TimeoutError(
            f"the audit read nothing for {within:.0f} s ({len(stored)} read, through {through})"
        )
    finally:
        await nc.close()


class AppPublisher:
    """An application publishing as applications do: `js.publish`, awaited, one after another,
    never retried. Its errors and timeouts are what the application sees fail."""

    def __init__(
        self, number: int, servers: Sequence[str], history: History, *, timeout: float
    ) -> None:
        self.number = number
        self.servers = servers
        self.history = history
        self.timeout = timeout

    async def run(self, stop: asyncio.Event) -> None:
        nc = await connect(self.servers)
        js = nc.jetstream(timeout=self.timeout)
        n = 0
        try:
            while not stop.is_set():
                n += 1
                msg_id = self.history.send(self.number, n)
                try:
                    ack = await js.publish(SUBJECT, msg_id.encode() + PAYLOAD_PAD)
                except Exception as exc:
                    # Where the client was when it gave up: the agent that kept the answer.
                    url = nc.connected_url.netloc if nc.connected_url else "no server"
                    self.history.fail(msg_id, f"{type(exc).__name__}: {exc} (on {url})")
                else:
                    self.history.acknowledge(msg_id, ack.seq)
        finally:
            with contextlib.suppress(Exception):
                await nc.close()


class AppConsumer:
    """A pull consumer that acks each message and waits for the server to confirm the ack
    (`ack_sync`). The ack rules: a message may come again while its ack is not committed, and
    once `ack_wait` has passed since it was delivered; a message whose ack was confirmed within
    `ack_wait` of its delivery must not come again (`after_confirmed`)."""

    # The events of nats.js reach this process through a pipe: they are timed here, late by
    # up to this much.
    CLOCK_MARGIN = 1.0

    def __init__(
        self, servers: Sequence[str], history: History, durable: str, ack_wait: float
    ) -> None:
        self.servers = servers
        self.history = history
        self.durable = durable
        self.ack_wait = ack_wait
        # msg id -> when it was last delivered, and when the ack of that delivery was
        # confirmed (if it was within ack_wait); the redeliveries that broke the rules.
        self.delivered_at: dict[str, float] = {}
        self.confirmed_in_time: dict[str, float] = {}
        self.after_confirmed: list[str] = []
        self.late_confirmations = 0

    async def run(self, stop: asyncio.Event) -> None:
        nc = await connect(self.servers)
        js = nc.jetstream(timeout=10)
        try:
            sub = await js.pull_subscribe_bind(self.durable, STREAM)
            while not stop.is_set():
                try:
                    msgs = await sub.fetch(FETCH_BATCH, timeout=1)
                except (nats.errors.TimeoutError, TimeoutError):
                    continue
                except Exception:
                    self.history.consumer_errors += 1
                    await asyncio.sleep(0.1)
                    continue
                # The batch's acks at once, each confirmed on its own: one commit for most.
                await asyncio.gather(*(self.take(m) for m in msgs))
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    async def take(self, msg: Msg) -> None:
        msg_id = msg.data[: msg.data.index(b".")].decode()
        self.record(msg_id, msg.metadata.sequence.stream, got=True)
        try:
            await msg.ack_sync(timeout=5)
        except Exception:
            return  # unconfirmed: it may come again, within the ack rules
        self.record(msg_id, msg.metadata.sequence.stream, got=False)

    def record(self, msg_id: str, seq: int, *, got: bool) -> None:
        """A delivery (`got`) or a confirmed ack of `msg_id`."""
        now = time.monotonic()
        if got:
            if msg_id in self.confirmed_in_time:
                self.after_confirmed.append(msg_id)
            self.delivered_at[msg_id] = now
            self.history.consume(msg_id, seq)
        elif now - self.delivered_at[msg_id] < self.ack_wait - self.CLOCK_MARGIN:
            self.confirmed_in_time[msg_id] = now
        else:
            self.late_confirmations += 1  # committed after ack_wait: a redelivery is fair


# Messages a consumer fetches at once.
FETCH_BATCH = 250


async def create_consumer(servers: Sequence[str], durable: str, *, ack_wait: float) -> None:
    nc = await connect(servers)
    js = nc.jetstream(timeout=10)
    try:
        await js.add_consumer(
            STREAM,
            ConsumerConfig(
                durable_name=durable,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=ack_wait,
                max_deliver=-1,
            ),
        )
    finally:
        await nc.close()


async def drained(servers: Sequence[str], durables: Sequence[str]) -> None:
    """Until every durable has nothing pending and nothing unacknowledged; the safety net
    fails it once they made no progress for that long."""
    nc = await connect(servers)
    js = nc.jetstream(timeout=10)

    def done() -> bool:
        return all(left.get(d) == 0 for d in durables)

    left: dict[str, int] = {}
    least = -1
    try:
        deadline = time.monotonic() + SAFETY_NET
        while not done():
            total = sum(left.values()) if len(left) == len(durables) else -1
            if total >= 0 and (least < 0 or total < least):
                least, deadline = total, time.monotonic() + SAFETY_NET
            if time.monotonic() > deadline:
                raise AssertionError(f"consumers stopped short of drained: {left}")
            for durable in durables:
                with contextlib.suppress(Exception):
                    info = await js.consumer_info(STREAM, durable)
                    left[durable] = info.num_pending + info.num_ack_pending
            await asyncio.sleep(0.2)
    finally:
        await nc.close()
