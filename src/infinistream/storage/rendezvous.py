"""Which cache agent of a zone owns a block of an object: rendezvous (highest random weight)
hashing over the zone's live cache agents.

Every agent computes the same owner from the same membership, with no coordination. When an
agent joins, only the blocks it now wins move to it; when one leaves, only the blocks it owned
move, each to the agent that scored second for it. Nothing else changes hands, so a change of
membership costs the zone a GET per moved block, not a GET per block.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Peer", "owner", "score"]


@dataclass(frozen=True, slots=True)
class Peer:
    """A cache agent as its zone's members see it: who, where its cache channel listens
    (``http://host:port``), and its zone."""

    id: str
    url: str
    zone: str = ""


def score(peer_id: str, block: str) -> int:
    """The peer's weight for the block: a hash of both, the same on every agent and every run
    (not Python's ``hash``, which is salted per process)."""
    # The id goes first, with its length, so no two (id, block) pairs hash the same bytes.
    pid = peer_id.encode()
    data = b"%d:%s\0%s" % (len(pid), pid, block.encode())
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def owner(block: str, peers: Iterable[Peer]) -> Peer | None:
    """The peer with the highest score for ``block`` (a tie, which needs two equal 64-bit
    hashes, goes to the greater id); None when there are no peers."""
    return max(peers, key=lambda p: (score(p.id, block), p.id), default=None)
