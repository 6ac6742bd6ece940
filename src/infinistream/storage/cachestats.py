"""The zone cache's counters, one object shared by its parts and read by the agent's reports.

Counts only go up (since the agent started), except the two gauges of what is held now.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["ZoneCacheStats"]


@dataclass
class ZoneCacheStats:
    # The reader's side: ranges this agent's reads asked of the zone cache.
    reads: int = 0
    owned_reads: int = 0  # answered by this agent's own blocks (it owns them)
    peer_reads: int = 0  # answered by the owner, another agent of the zone
    peer_bytes: int = 0
    peer_failures: int = 0  # the owner refused, failed, was slow or gone
    fallbacks: int = 0  # reads that went to object storage directly instead
    # The owner's side: the blocks it holds and the ranges it serves.
    block_gets: int = 0  # one GET per block read from object storage
    block_bytes_got: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    served: int = 0  # ranges served to other agents
    bytes_served: int = 0
    refused: int = 0  # requests without a valid signature
    memory_bytes: int = 0  # gauge
    disk_bytes: int = 0  # gauge

    def report(self) -> dict[str, int]:
        return asdict(self)
