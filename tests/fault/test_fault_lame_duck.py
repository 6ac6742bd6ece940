"""Scale-in and scale-out under load: three agents on one store, ten times a fresh agent joins
and the oldest is put in lame duck mode (`infinistream serve --signal ldm=PID`), while nats-py
and nats.js applications publish (`js.publish`, awaited, never retried) and fetch with acks the
server confirms.

No application may see a publish fail, nothing acknowledged may be lost, nothing stored twice
or out of order, and no message may come again to a consumer once its ack was confirmed.

The run counts events, not seconds: each cycle starts once publishes were acknowledged since
the previous one, and ends when the agent in lame duck mode has exited.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fault.jepsen import History, check
from fault.workload import (
    SAFETY_NET,
    STREAM,
    SUBJECT,
    AppConsumer,
    AppPublisher,
    acked,
    audit,
    connect,
    create_consumer,
    create_stream,
    drained,
)
from support.agentproc import AgentProcess
from support.etcdserver import free_port
from support.jsclient import JS_DIR, node

pytestmark = pytest.mark.fault

CYCLES = 10
PY_PUBLISHERS = 3
JS_PUBLISHERS = 2
JS_FIRST = 100
# Publishes acknowledged between two cycles (and after the last), from the moment the
# previous agent in lame duck mode has exited.
ACKS_BETWEEN = 100
# Long enough that a message is redelivered only when its delivery was lost (its connection
# handed over), not because a busy machine answered the ack late.
ACK_WAIT = 15.0
# How long the applications wait for a PubAck. An agent that has just joined reads the
# stream's index before its first publish to it, which on this busy machine takes seconds once
# the stream holds thousands of messages (the latency is reported: `max-ack-latency-s`).
PUBLISH_TIMEOUT = 30.0
CONFIG = """
lame_duck_duration: "3s"
lame_duck_grace_period: "1s"
"""


@dataclass
class JsApplication:
    """tests/js/load_client.mjs: nats.js publishers and a consumer, their events in `history`."""

    process: asyncio.subprocess.Process
    history: History
    consumer: AppConsumer
    fetch_errors: int = 0
    done: bool = False

    @classmethod
    async def start(
        cls, servers: list[str], history: History, consumer: AppConsumer
    ) -> JsApplication:
        process = await asyncio.create_subprocess_exec(
            node(),
            str(JS_DIR / "load_client.mjs"),
            ",".join(servers),
            STREAM,
            SUBJECT,
            str(JS_PUBLISHERS),
            str(JS_FIRST),
            consumer.durable,
            str(int(PUBLISH_TIMEOUT * 1000)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        return cls(process, history, consumer)

    async def read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            word, _, rest = raw.decode().strip().partition(" ")
            msg_id, _, detail = rest.partition(" ")
            if word == "sent":
                publisher, n = msg_id[1:].split("-")
                self.history.send(int(publisher), int(n))
            elif word == "ack":
                self.history.acknowledge(msg_id, int(detail))
            elif word == "err":
                self.history.fail(msg_id, detail)
            elif word == "got":
                self.consumer.record(msg_id, int(detail), got=True)
            elif word == "acked":
                self.consumer.record(msg_id, int(detail), got=False)
            elif word == "fetch-error":
                self.fetch_errors += 1
            elif word == "done":
                self.done = True
            elif word not in ("published",):
                print("nats.js:", raw.decode().rstrip())

    async def tell(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()


class Pool:
    """The agents, oldest first; each started on a port of its own."""

    def __init__(self, store: Path, config: Path) -> None:
        self.store = store
        self.config = config
        self.agents: list[AgentProcess] = []
        # The nats.js application, killed with the agents whatever happens.
        self.apps: list[asyncio.subprocess.Process] = []

    def start_one(self) -> AgentProcess:
        port = free_port()
        agent = AgentProcess(
            ["-p", str(port), "-sd", str(self.store), "-c", str(self.config), "--linger", "20ms"]
        )
        # A busy machine may take long to start a Python process: the safety net, not 30 s.
        agent.start(timeout=SAFETY_NET)
        self.agents.append(agent)
        return agent

    def urls(self) -> list[str]:
        return [agent.url for agent in self.agents]

    def kill_all(self) -> None:
        for app in self.apps:
            if app.returncode is None:
                app.kill()
        for agent in self.agents:
            agent.kill()


async def signal_lame_duck(agent: AgentProcess) -> None:
    """What an operator types: `infinistream serve --signal ldm=PID` (run beside the event
    loop: the applications in this process must not stall while it starts)."""
    assert agent.process is not None
    sender = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "infinistream", "serve", "--signal", f"ldm={agent.process.pid}"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(sender.communicate(), SAFETY_NET)
    assert sender.returncode == 0, output.decode()


@contextlib.contextmanager
def pool_of(tmp_path: Path) -> Iterator[Pool]:
    config = tmp_path / "agent.conf"
    config.write_text(CONFIG)
    pool = Pool(tmp_path / "store", config)
    try:
        yield pool
    finally:
        pool.kill_all()


async def connect_urls(agent: AgentProcess) -> list[str]:
    """The `connect_urls` of the INFO an agent greets a new connection with."""
    reader, writer = await asyncio.open_connection("127.0.0.1", agent.port)
    try:
        line = await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()
    urls: list[str] = json.loads(line[5:]).get("connect_urls") or []
    return urls


async def in_pool(pool: Pool, agent: AgentProcess) -> None:
    """Until every other agent's INFO lists `agent` (their clients can go there)."""
    deadline = time.monotonic() + SAFETY_NET
    for other in pool.agents:
        while f"127.0.0.1:{agent.port}" not in await connect_urls(other):
            assert time.monotonic() < deadline, "the fresh agent not in the pool's connect_urls"
            await asyncio.sleep(0.1)


# Ten cycles of a fresh agent and a lame duck (each some seconds), then the consumers drain:
# a quarter of an hour on a busy machine.
@pytest.mark.timeout(1800)
async def test_scale_in_and_out_fails_no_publish(tmp_path: Path, fault_report: list[str]) -> None:
    with pool_of(tmp_path) as pool:
        for _ in range(3):
            pool.start_one()
        servers = pool.urls()
        nc = await connect(servers)
        await create_stream(nc)
        await nc.close()
        for durable in ("PY", "JS"):
            await create_consumer(servers, durable, ack_wait=ACK_WAIT)
        history, js_history = History(), History()
        py_consumer = AppConsumer(servers, history, "PY", ACK_WAIT)
        js_consumer = AppConsumer(servers, js_history, "JS", ACK_WAIT)
        stop, stop_consumers = asyncio.Event(), asyncio.Event()
        tasks = [
            asyncio.create_task(
                AppPublisher(i, servers, history, timeout=PUBLISH_TIMEOUT).run(stop)
            )
            for i in range(PY_PUBLISHERS)
        ]
        consuming = asyncio.create_task(py_consumer.run(stop_consumers))
        js_app = await JsApplication.start(servers, history, js_consumer)
        pool.apps.append(js_app.process)
        js_reader = asyncio.create_task(js_app.read())
        cycles = 0
        since = time.monotonic()
        while cycles < CYCLES:
            await acked(history, ACKS_BETWEEN, sent_after=since, what=f"before cycle {cycles + 1}")
            fresh = await asyncio.to_thread(pool.start_one)
            await in_pool(pool, fresh)
            leaving = pool.agents.pop(0)
            await signal_lame_duck(leaving)
            assert leaving.process is not None
            code = await asyncio.to_thread(leaving.process.wait, 120)
            assert code == 0, leaving.log()[-3000:]
            assert "Entering lame duck mode" in leaving.log()
            for line in leaving.log().splitlines():
                if any(w in line for w in ("WARNING", "ERROR", "Handed", "Delivered", "did not")):
                    print(f"agent {leaving.port}: {line}")
            cycles += 1
            since = time.monotonic()
            print(
                f"cycle {cycles}: acked {len(history.acked)}, sent {len(history.sent)},"
                f" consumed {len(history.consumed)} (nats-py), {len(js_history.consumed)}"
                f" (nats.js); fetch errors {history.consumer_errors}, {js_app.fetch_errors}"
            )
        await acked(history, ACKS_BETWEEN, sent_after=since, what="after the last cycle")
        stop.set()
        await js_app.tell("stop")
        await asyncio.gather(*tasks)
        servers = pool.urls()
        await drained(servers, ["PY", "JS"])
        stop_consumers.set()
        await js_app.tell("drained")
        await asyncio.wait_for(js_app.process.wait(), 60)
        await js_reader
        await consuming
        stored = await audit(servers, through=max(s.seq for s in history.sent.values()))
        for agent in pool.agents:
            for line in agent.log().splitlines():
                if any(w in line for w in ("WARNING", "ERROR", "Delivered", "expired")):
                    print(f"agent {agent.port}: {line}")
    # One verdict per consumer: the publishes are the same, each consumer is checked for all.
    js_history.sent = history.sent
    verdict = check("lame duck scale-in and out (nats-py consumer)", history, stored)
    js_verdict = check("lame duck scale-in and out (nats.js consumer)", js_history, stored)
    verdict.notes["cycles"] = cycles
    verdict.notes["max-ack-latency-s"] = round(
        max(s.answered_at - s.at for s in history.sent.values() if s.seq), 1
    )
    verdict.notes["js-acked"] = sum(
        1 for s in history.sent.values() if s.seq and s.publisher >= JS_FIRST
    )
    for v, consumer in ((verdict, py_consumer), (js_verdict, js_consumer)):
        v.notes["redelivered-after-confirmed-ack"] = len(consumer.after_confirmed)
        v.notes["acks-confirmed-after-ack-wait"] = consumer.late_confirmations
    for v in (verdict, js_verdict):
        fault_report.append(v.line())
        print(v.line())
    failed = {k: s.error or "unanswered" for k, s in history.sent.items() if not s.seq}
    assert not failed, f"publishes the applications saw fail: {dict(list(failed.items())[:10])}"
    assert verdict.ok, verdict.problems()
    assert js_verdict.ok, js_verdict.problems()
    assert not py_consumer.after_confirmed and not js_consumer.after_confirmed
    assert cycles == CYCLES and js_app.done
    assert verdict.notes["js-acked"] > 0
