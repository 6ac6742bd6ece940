"""A network namespace a test makes for one agent, linked to the host by a veth pair, whose
links to the host's services can be cut and healed, each direction on its own.

    with Namespace.make("isp0", subnet=213) as ns:   # the host at 10.213.0.1, the agent .2
        AgentProcess(args, command=ns.command(...))
        ns.cut(etcd_port, inbound=False)   # the agent's packets to etcd vanish
        ns.cut(etcd_port, outbound=False)  # etcd's packets to the agent vanish
        ns.heal()

Cuts are nftables rules inside the namespace that drop packets silently (a blackhole, not a
refusal: TCP waits and retransmits, as over a broken network), selected by the host's port,
so the agent's other links (its clients, object storage, other agents) are untouched unless
cut too. Needs root, `ip` (iproute2) and `nft` (nftables): scripts/lib.sh installs them.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

TABLE = "partition"


class NetnsMissing(RuntimeError):
    pass


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


@dataclass
class Namespace:
    name: str
    host_ip: str
    agent_ip: str
    cuts: int = 0

    @classmethod
    @contextlib.contextmanager
    def make(cls, name: str, *, subnet: int) -> Iterator[Namespace]:
        for tool in ("ip", "nft"):
            if shutil.which(tool) is None:
                raise NetnsMissing(f"`{tool}` is missing: run scripts/test (it installs it)")
        ns = cls(name, f"10.{subnet}.0.1", f"10.{subnet}.0.2")
        host_end, ns_end = f"{name}-h", f"{name}-n"
        _run("ip", "netns", "add", name)
        try:
            _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _run("ip", "link", "set", ns_end, "netns", name)
            _run("ip", "addr", "add", f"{ns.host_ip}/30", "dev", host_end)
            _run("ip", "link", "set", host_end, "up")
            ns.inside("ip", "addr", "add", f"{ns.agent_ip}/30", "dev", ns_end)
            ns.inside("ip", "link", "set", ns_end, "up")
            ns.inside("ip", "link", "set", "lo", "up")
            ns.inside("nft", "add", "table", "inet", TABLE)
            for chain, hook in (("out", "output"), ("in", "input")):
                spec = f"{{ type filter hook {hook} priority 0 ; }}"
                ns.inside("nft", "add", "chain", "inet", TABLE, chain, spec)
            yield ns
        finally:
            with contextlib.suppress(RuntimeError):
                _run("ip", "link", "del", host_end)
            with contextlib.suppress(RuntimeError):
                _run("ip", "netns", "del", name)

    def inside(self, *argv: str) -> None:
        _run("ip", "netns", "exec", self.name, *argv)

    def command(self, *argv: str) -> list[str]:
        """`argv` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self, port: int, *, outbound: bool = True, inbound: bool = True) -> None:
        """Drop the packets to the host's `port` (outbound) and from it (inbound)."""
        if outbound:
            self.inside(
                "nft", "add", "rule", "inet", TABLE, "out",
                "ip", "daddr", self.host_ip, "tcp", "dport", str(port), "drop",
            )  # fmt: skip
        if inbound:
            self.inside(
                "nft", "add", "rule", "inet", TABLE, "in",
                "ip", "saddr", self.host_ip, "tcp", "sport", str(port), "drop",
            )  # fmt: skip
        self.cuts += 1

    def cut_own(self, port: int, *, outbound: bool = True, inbound: bool = True) -> None:
        """Drop the packets of the host's connections to the agent's own `port`: the answers
        going out (outbound) and the requests coming in (inbound)."""
        if outbound:
            self.inside(
                "nft", "add", "rule", "inet", TABLE, "out",
                "ip", "daddr", self.host_ip, "tcp", "sport", str(port), "drop",
            )  # fmt: skip
        if inbound:
            self.inside(
                "nft", "add", "rule", "inet", TABLE, "in",
                "ip", "saddr", self.host_ip, "tcp", "dport", str(port), "drop",
            )  # fmt: skip

    def heal(self) -> None:
        for chain in ("out", "in"):
            self.inside("nft", "flush", "chain", "inet", TABLE, chain)
