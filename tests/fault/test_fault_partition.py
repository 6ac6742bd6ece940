"""Network partitions between an agent and etcd: symmetric, one-way each way, flapping, and
with the agent killed (kill -9) while it is cut off.

Agent A runs in a network namespace the test makes (tests/fault/netns.py), agent B on the
host; both on one etcd member (on the host, reached over the namespace's veth link) and one
object directory. Publishers publish to A, the live consumer reads through B. A cut drops the
packets between A and etcd's port silently, so A's requests wait for their timeout
(`etcd://...?timeout=2`) and publishes to A are refused or unanswered meanwhile; no publish may
be acknowledged while A cannot commit. After each heal, service must come back: the time from
the heal to A's first acknowledgement is measured.

Each phase lasts until its events have happened (publishes refused or unanswered during a cut,
acknowledged after a heal), never a number of seconds.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

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
)
from support.agentproc import AgentProcess
from support.etcdserver import EtcdServer, free_port

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

    def __init__(self, history: History, ns: Namespace, port: int) -> None:
        self.history = history
        self.ns = ns
        self.port = port
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
        await asyncio.to_thread(self.ns.heal)
        healed = time.monotonic()
        if after_heal is not None:
            await asyncio.to_thread(after_heal)
        self.spells.append((fault, start, healed))
        await acked(self.history, acks, sent_after=healed, what=f"after {fault} healed")

    def acked_while_cut(self) -> int:
        return sum(
            len(self.history.acked_between(start, healed, sent_after=start + MARGIN))
            for _, start, healed in self.spells
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


@pytest.mark.timeout(900)
async def test_partitions_between_an_agent_and_etcd(
    tmp_path: Path, fault_report: list[str]
) -> None:
    with Namespace.make("isfault0", subnet=213) as ns:
        etcd = EtcdServer(tmp_path / "etcd", host=ns.host_ip)
        etcd.start()
        port_a, port_b = free_port(), free_port()
        metadata = etcd.url + "?timeout=2"
        common = ["-sd", str(tmp_path / "store"), "--metadata", metadata, "--linger", "20ms"]
        agent_a = AgentProcess(
            ["-p", str(port_a), *common],
            command=ns.command(sys.executable, "-m", "infinistream", "serve", "-a", "0.0.0.0"),
        )
        agent_b = AgentProcess(["-p", str(port_b), *common])
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
            faults = Faults(history, ns, etcd.members[0].client_port)
            port = faults.port
            await faults.spell("symmetric", lambda: ns.cut(port))
            await faults.spell("agent-to-etcd", lambda: ns.cut(port, inbound=False))
            await faults.spell("etcd-to-agent", lambda: ns.cut(port, outbound=False))
            for _ in range(FLAPS):
                await faults.spell(
                    "flapping",
                    lambda: ns.cut(port),
                    not_acked_count=FLAP_NOT_ACKED,
                    acks=FLAP_ACKS,
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
            etcd.close()
    verdict = check("partitions between an agent and etcd", history, stored)
    verdict.notes["cuts"] = ns.cuts
    verdict.notes["acked-while-cut"] = faults.acked_while_cut()
    for fault, seconds in faults.heal_to_first_ack().items():
        verdict.notes[f"heal-to-first-ack-s.{fault}"] = seconds
    fault_report.append(verdict.line())
    print(verdict.line())
    assert verdict.ok, verdict.problems()
    assert verdict.notes["acked-while-cut"] == 0
    assert len(faults.heal_to_first_ack()) == 5
