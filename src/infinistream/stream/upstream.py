"""Origins on a running NATS server (an upstream, security.upstreams): read as nats-server's
own mirrors and sources read theirs, through an ordered push consumer (flow control, idle
heartbeats, recreated from the last sequence received when a gap shows), over one outbound
connection per upstream.

A feed is the consumer of one mirror or source; the copier asks it for what arrived since
the last pass (`read`), at the sequence it expects next: when that is not where the feed is
(the first pass, a restart, another agent copied meanwhile), the feed starts over from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from infinistream.jetstream.api import StreamSource
from infinistream.jetstream.times import parse_go_time
from infinistream.protocol import encode_headers
from infinistream.security.upstreams import Upstream, upstream_named
from infinistream.stream.reader import StoredMessage

log = logging.getLogger(__name__)

# Messages a feed holds before the copier takes them (nats-server's flow control then pauses
# the origin's deliveries).
FEED_LIMIT = 20_000


def _ignore() -> None:
    return None


@dataclass(eq=False)
class _Feed:
    sub: Any
    queue: asyncio.Queue[StoredMessage]
    # The origin sequence the copier expects next from this feed.
    next_seq: int
    lag: int = 0


def stored(msg: Msg) -> StoredMessage | None:
    """An origin message as delivered by its consumer: its sequence, timestamp and pending
    count are in its reply subject ($JS.ACK.<stream>.<consumer>.<delivered>.<seq>.<cseq>.
    <ts>.<pending>, with a domain and an account hash before the stream in its newer form)."""
    tokens = (msg.reply or "").split(".")
    if len(tokens) == 9:
        seq, ts = tokens[5], tokens[7]
    elif len(tokens) >= 11:
        seq, ts = tokens[7], tokens[9]
    else:
        return None
    if not (seq.isdigit() and ts.isdigit()):
        return None
    headers = b""
    if msg.headers:
        headers = encode_headers(list(msg.headers.items()))
    return StoredMessage(msg.subject, int(seq), headers, msg.data, int(ts))


def _pending(msg: Msg) -> int:
    tokens = (msg.reply or "").split(".")
    last = tokens[-1] if len(tokens) == 9 else tokens[10] if len(tokens) >= 11 else ""
    return int(last) if last.isdigit() else 0


@dataclass(eq=False)
class UpstreamFeeds:
    upstreams: dict[str, Upstream]
    # Called when a message arrives: the copier has work.
    wake: Callable[[], None] = _ignore
    _connections: dict[str, Client] = field(default_factory=dict, init=False)
    _feeds: dict[tuple[str, str], _Feed] = field(default_factory=dict, init=False)

    async def read(
        self, key: tuple[str, str], upstream: Upstream, origin: StreamSource, start: int, limit: int
    ) -> tuple[list[StoredMessage], int]:
        """What arrived for the mirror or source `key` (stream, source identity) from origin
        sequence `start` (0: where its config starts), up to `limit`, and its lag."""
        feed = self._feeds.get(key)
        if feed is None or (start and feed.next_seq != start):
            await self.stop(key)
            feed = await self._subscribe(upstream, origin, start)
            self._feeds[key] = feed
        found: list[StoredMessage] = []
        while len(found) < limit and not feed.queue.empty():
            msg = feed.queue.get_nowait()
            if start and msg.seq < start:
                continue  # a redelivery from before where the copier is
            found.append(msg)
        if found:
            feed.next_seq = found[-1].seq + 1
        return found, feed.lag

    def upstream_of(self, origin: StreamSource) -> Upstream | None:
        """The upstream an origin lives on; None for one in this agent group."""
        if origin.external is None:
            return None
        return upstream_named(origin.external.api, self.upstreams)

    async def stop(self, key: tuple[str, str]) -> None:
        feed = self._feeds.pop(key, None)
        if feed is not None:
            with contextlib.suppress(Exception):
                await feed.sub.unsubscribe()

    async def stop_stream(self, stream: str) -> None:
        """Stop every feed of a stream (another agent copies it now)."""
        for key in [k for k in self._feeds if k[0] == stream]:
            await self.stop(key)

    async def close(self) -> None:
        for key in list(self._feeds):
            await self.stop(key)
        for nc in self._connections.values():
            with contextlib.suppress(Exception):
                await nc.close()
        self._connections.clear()

    async def _connection(self, upstream: Upstream) -> Client:
        nc = self._connections.get(upstream.name)
        if nc is not None and not nc.is_closed:
            return nc
        options: dict[str, Any] = {"name": "infinistream", "max_reconnect_attempts": -1}
        if upstream.user:
            options.update(user=upstream.user, password=upstream.password)
        if upstream.token:
            options["token"] = upstream.token
        if upstream.creds:
            options["user_credentials"] = upstream.creds
        if upstream.ca_file or upstream.cert_file or upstream.url.startswith("tls://"):
            context = ssl.create_default_context(cafile=upstream.ca_file or None)
            if upstream.cert_file:
                context.load_cert_chain(upstream.cert_file, upstream.key_file or None)
            options["tls"] = context
        nc = await nats.connect(upstream.url, **options)
        self._connections[upstream.name] = nc
        return nc

    async def _subscribe(self, upstream: Upstream, origin: StreamSource, start: int) -> _Feed:
        nc = await self._connection(upstream)
        js = nc.jetstream(prefix=upstream.api, timeout=10)
        config = ConsumerConfig()
        if start:
            config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = start
        elif origin.opt_start_seq:
            config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = origin.opt_start_seq
        elif origin.opt_start_time:
            config.deliver_policy = DeliverPolicy.BY_START_TIME
            ns = parse_go_time(origin.opt_start_time)
            config.opt_start_time = datetime.fromtimestamp(ns / 1e9, UTC)
        queue: asyncio.Queue[StoredMessage] = asyncio.Queue()
        feed = _Feed(None, queue, start)

        async def received(msg: Msg) -> None:
            copy = stored(msg)
            if copy is None:
                return
            feed.lag = _pending(msg)
            queue.put_nowait(copy)
            self.wake()

        feed.sub = await js.subscribe(
            origin.filter_subject,
            stream=origin.name,
            cb=received,
            ordered_consumer=True,
            config=config,
            idle_heartbeat=5.0,
            pending_msgs_limit=FEED_LIMIT,
        )
        log.info("following stream %s on upstream %s from %s", origin.name, upstream.name, start)
        return feed
