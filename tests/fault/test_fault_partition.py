"""Network partitions between an agent and etcd, between an agent and object storage, and
between two agents of a zone (the zone cache's channel): symmetric, one-way each way, flapping,
and with the agent killed (kill -9) while it is cut off.

Agent A runs in a network namespace the test makes (tests/fault/netns.py), agent B on the
host. In the etcd run both use one etcd member and one object directory; in the object storage
run both use one S3-compatible server (moto) and one SQLite file; the server is on the host,
reached from A over the namespace's veth link. Publishers publish to A, the live consumer
reads through B. A cut drops the packets between A and the server's port silently, so A's
requests wait for their timeout (`etcd://...?timeout=2`, `--s3-timeout 1s`) and publishes to
A are refused or unanswered meanwhile; no publish may be acknowledged while A cannot store it.
After each heal, service must come back: the time from the heal to A's first acknowledgement
is measured. Cut off from the other agent of its zone, an agent reads what the other owns from
object storage instead: consumption goes on during the cut, and reads go through the other
agent again after the heal (the time to the first such read is measured).

Each phase lasts until its events have happened (publishes refused or unanswered during a cut,
acknowledged after a heal), never a number of seconds.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fault.jepsen import History, check
from fault.netns import Namespace
from fault.workload import (
    LiveConsumer,
    Publisher,
    acked,
    audit,
    connect,
    create_stream,
    not_acked,
    until,
)
from support.agentproc import AgentProcess
from support.etcdserver import EtcdServer, free_port
from support.s3server import start_s3_server

pytestmark = pytest.mark.fault

PUBLISHERS = 3
# Publishes each phase waits for: refused or unanswered while cut, acknowledged after a heal.
NOT_ACKED = 10
ACKS = 50
FLAPS = 5
FLAP_NOT_ACKED = 3
FLAP_ACKS = 10
# Publishes sent this soon after a cut may have been acknowledged before it took effect.
MARGIN = 0.1


class Faults:
    """The cuts and heals of a run, and what they did to the history."""

    def __init__(self, history: History, ns: Namespace, port: int, agent: str) -> None:
        self.history = history
        self.ns = ns
        self.port = port
        # The cut agent (host:port): a client that moved to the other agent is served there.
        self.agent = agent
        # (fault, cut at, healed at)
        self.spells: list[tuple[str, float, float]] = []

    async def spell(
        self,
        fault: str,
        cut: Callable[[], None],
        *,
        not_acked_count: int = NOT_ACKED,
        acks: int = ACKS,
        while_cut: Callable[[], None] | None = None,
        after_heal: Callable[[], None] | None = None,
    ) -> None:
        # Timed once the rules are in: what is sent from then on cannot be committed by A.
        await asyncio.to_thread(cut)
        start = time.monotonic()
        await not_acked(
            self.history, not_acked_count, sent_after=start + MARGIN, what=f"while {fault}"
        )
        if while_cut is not None:
            await asyncio.to_thread(while_cut)
        # Timed before the rules go: an ack that arrives while they are being removed (or while
        # this task waits for the loop on a busy machine) is not one given while cut.
        healed = time.monotonic()
        await asyncio.to_thread(self.ns.heal)
        if after_heal is not None:
            await asyncio.to_thread(after_heal)
        self.spells.append((fault, start, healed))
        await acked(self.history, acks, sent_after=healed, what=f"after {fault} healed")

    def acked_while_cut(self) -> int:
        """Acks the cut agent gave while cut (for what was sent after the cut began)."""
        return sum(
            self.history.sent[k].via == self.agent
            for _, start, healed in self.spells
            for k in self.history.acked_between(start, healed, sent_after=start + MARGIN)
        )

    def heal_to_first_ack(self) -> dict[str, float]:
        """Per fault, the longest time from a heal to the first acknowledgement after it."""
        worst: dict[str, float] = {}
        for fault, _, healed in self.spells:
            after = [
                s.answered_at - healed
                for s in self.history.sent.values()
                if s.seq and s.answered_at >= healed
            ]
            if after:
                worst[fault] = max(worst.get(fault, 0.0), round(min(after), 2))
        return worst


async def partitioned(
    ns: Namespace,
    store: Path,
    server_port: int,
    flags: list[str],
    env: dict[str, str] | None = None,
) -> tuple[History, dict[int, str], Faults]:
    """Agents A (in `ns`) and B with `flags`, publishers on A and a consumer on B, through every
    kind of cut of A's link to the host's `server_port`; the history, the stream, the faults."""
    port_a, port_b = free_port(), free_port()
    common = ["-sd", str(store), *flags, "--linger", "20ms"]
    agent_a = AgentProcess(
        ["-p", str(port_a), *common],
        env=env,
        command=ns.command(sys.executable, "-m", "infinistream", "serve", "-a", "0.0.0.0"),
    )
    agent_b = AgentProcess(["-p", str(port_b), *common], env=env)
    try:
        agent_a.start(timeout=120)
        agent_b.start(timeout=120)
        url_a = f"nats://{ns.agent_ip}:{port_a}"
        url_b = f"nats://127.0.0.1:{port_b}"
        nc = await connect([url_b])
        await create_stream(nc)
        await nc.close()
        history = History()
        stop = asyncio.Event()
        consumer = LiveConsumer([url_b], history)
        tasks = [
            asyncio.create_task(Publisher(i, [url_a], history, pace=0.01).run(stop))
            for i in range(PUBLISHERS)
        ]
        tasks.append(asyncio.create_task(consumer.run(stop)))
        await acked(history, ACKS, sent_after=0.0, what="before any cut")
        faults = Faults(history, ns, server_port, f"{ns.agent_ip}:{port_a}")
        port = server_port
        await faults.spell("symmetric", lambda: ns.cut(port))
        await faults.spell("agent-to-server", lambda: ns.cut(port, inbound=False))
        await faults.spell("server-to-agent", lambda: ns.cut(port, outbound=False))
        for _ in range(FLAPS):
            await faults.spell(
                "flapping", lambda: ns.cut(port), not_acked_count=FLAP_NOT_ACKED, acks=FLAP_ACKS
            )
        await faults.spell(
            "cut+kill-9",
            lambda: ns.cut(port),
            while_cut=agent_a.kill,
            after_heal=lambda: agent_a.start(timeout=120),
        )
        stop.set()
        await asyncio.gather(*tasks)
        await consumer.drain([url_b])
        stored = await audit([url_b])
    finally:
        agent_a.kill()
        agent_b.kill()
    return history, stored, faults


def judge(name: str, history: History, stored: dict[int, str], faults: Faults) -> list[str]:
    """The verdict's line; asserts what must hold."""
    verdict = check(name, history, stored)
    verdict.notes["cuts"] = faults.ns.cuts
    verdict.notes["acked-while-cut"] = faults.acked_while_cut()
    for fault, seconds in faults.heal_to_first_ack().items():
        verdict.notes[f"heal-to-first-ack-s.{fault}"] = seconds
    print(verdict.line())
    assert verdict.ok, verdict.problems()
    assert verdict.notes["acked-while-cut"] == 0
    assert len(faults.heal_to_first_ack()) == 5
    return [verdict.line()]


@pytest.mark.timeout(900)
async def test_partitions_between_an_agent_and_etcd(
    tmp_path: Path, fault_report: list[str]
) -> None:
    with Namespace.make("isfault0", subnet=213) as ns:
        etcd = EtcdServer(tmp_path / "etcd", host=ns.host_ip)
        etcd.start()
        try:
            flags = ["--metadata", etcd.url + "?timeout=2"]
            port = etcd.members[0].client_port
            run = await partitioned(ns, tmp_path / "store", port, flags)
        finally:
            etcd.close()
    fault_report.extend(judge("partitions between an agent and etcd", *run))


@pytest.mark.timeout(900)
async def test_partitions_between_an_agent_and_object_storage(
    tmp_path: Path, fault_report: list[str]
) -> None:
    with Namespace.make("isfault1", subnet=214) as ns:
        s3 = await asyncio.to_thread(start_s3_server, "partitions", host=ns.host_ip)
        try:
            flags = [
                "--objects", "s3://partitions", "--s3-endpoint", s3.endpoint,
                # A request is given up after 1 s and tried twice: a publish learns of a cut in
                # seconds, not in the default minutes.
                "--s3-timeout", "1s", "--s3-retries", "1",
            ]  # fmt: skip
            port = int(s3.endpoint.rsplit(":", 1)[1])
            run = await partitioned(ns, tmp_path / "store", port, flags, env=s3.env())
        finally:
            s3.stop()
    fault_report.extend(judge("partitions between an agent and object storage", *run))


# What each spell between two agents of a zone waits for: reads that went to object storage
# instead and messages consumed while cut, reads through the other agent after the heal.
FALLBACKS = 3
CONSUMED = 50
PEER_READS = 3


def zone_cache(agent: AgentProcess, host: str) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{host}:{agent.http_port}/varz", timeout=30) as r:
        figures: dict[str, Any] = json.load(r)["infinistream"]["zone_cache"]
    return {k: int(v) for k, v in figures.items()}


@pytest.mark.timeout(900)
async def test_partitions_between_agents_of_a_zone(tmp_path: Path, fault_report: list[str]) -> None:
    with Namespace.make("isfault2", subnet=215) as ns:
        port_a, port_b, cache_a, cache_b = (free_port() for _ in range(4))
        common = ["-sd", str(tmp_path / "store"), "--zone", "z", "--linger", "20ms"]
        serve = (sys.executable, "-m", "infinistream", "serve")
        agent_a = AgentProcess(
            ["-p", str(port_a), "--cache-port", str(cache_a), *common],
            command=ns.command(*serve, "-a", ns.agent_ip),
        )
        agent_b = AgentProcess(
            ["-p", str(port_b), "--cache-port", str(cache_b), "-m", str(free_port()), *common],
            command=[*serve, "-a", ns.host_ip],
        )
        try:
            agent_a.start(timeout=120)
            agent_b.start(timeout=120)
            url_a, url_b = f"nats://{ns.agent_ip}:{port_a}", f"nats://{ns.host_ip}:{port_b}"
            nc = await connect([url_b])
            await create_stream(nc)
            await nc.close()
            history = History()
            stop = asyncio.Event()
            consumer = LiveConsumer([url_b], history)
            tasks = [
                asyncio.create_task(Publisher(i, [url_a], history, pace=0.01).run(stop))
                for i in range(PUBLISHERS)
            ]
            tasks.append(asyncio.create_task(consumer.run(stop)))

            def figures() -> dict[str, int]:
                return zone_cache(agent_b, ns.host_ip)

            await acked(history, ACKS, sent_after=0.0, what="before any cut")
            await until(lambda: figures()["peer_reads"] > 0, "B reading through A's cache")
            back: dict[str, float] = {}

            async def spell(fault: str, cut: Callable[[], None]) -> None:
                before, consumed = figures(), len(history.consumed)
                await asyncio.to_thread(cut)
                await until(
                    lambda: (
                        figures()["fallbacks"] >= before["fallbacks"] + FALLBACKS
                        and len(history.consumed) >= consumed + CONSUMED
                    ),
                    f"B reading object storage and consuming while {fault}",
                )
                cut_off = figures()
                await asyncio.to_thread(ns.heal)
                healed = time.monotonic()
                await until(
                    lambda: figures()["peer_reads"] >= cut_off["peer_reads"] + PEER_READS,
                    f"B reading through A again after {fault}",
                )
                back[fault] = max(back.get(fault, 0.0), round(time.monotonic() - healed, 2))

            await spell("symmetric", lambda: (ns.cut(cache_b), ns.cut_own(cache_a)))
            await spell(
                "from-agent",
                lambda: (ns.cut(cache_b, inbound=False), ns.cut_own(cache_a, inbound=False)),
            )
            await spell(
                "to-agent",
                lambda: (ns.cut(cache_b, outbound=False), ns.cut_own(cache_a, outbound=False)),
            )
            for _ in range(FLAPS):
                await spell("flapping", lambda: (ns.cut(cache_b), ns.cut_own(cache_a)))
            stop.set()
            await asyncio.gather(*tasks)
            await consumer.drain([url_b])
            stored = await audit([url_b])
        finally:
            agent_a.kill()
            agent_b.kill()
    verdict = check("partitions between two agents of a zone", history, stored)
    verdict.notes["cuts"] = ns.cuts
    for fault, seconds in back.items():
        verdict.notes[f"heal-to-first-peer-read-s.{fault}"] = seconds
    fault_report.append(verdict.line())
    print(verdict.line())
    assert verdict.ok, verdict.problems()
