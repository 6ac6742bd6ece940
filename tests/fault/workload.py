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
    ) -> None:
        self.number = number
        self.servers = servers
        self.history = history
        self.window = asyncio.Semaphore(window)
        self.ack_timeout = ack_timeout
        self.pace = pace
        self._outstanding: dict[int, asyncio.TimerHandle] = {}

    async def run(self, stop: asyncio.Event) -> None:
        nc = await connect(self.servers)
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
                    await nc.publish(SUBJECT, msg_id.encode() + PAYLOAD_PAD, reply=f"{inbox}.{n}")
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
        self.history.answer(f"p{self.number}-{n}", msg.data)
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
        """After the run: fetch until the consumer has nothing pending or unacked."""
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
                with contextlib.suppress(Exception):
                    info = await js.consumer_info(STREAM, "LIVE")
                    if info.num_pending == 0 and info.num_ack_pending == 0:
                        return
        finally:
            await nc.close()


async def audit(servers: Sequence[str], *, within: float = SAFETY_NET) -> dict[int, str]:
    """Every message the stream holds, sequence -> message id, read by a fresh consumer."""
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
            info = await js.consumer_info(STREAM, name)
            if info.num_pending == 0:
                return stored
        raise TimeoutError(f"the audit did not finish in {within:.0f} s ({len(stored)} read)")
    finally:
        await nc.close()
