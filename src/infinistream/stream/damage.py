"""Stored messages whose bytes are damaged: what a read found, counted and told once.

Every record carries its own checksum, and a reader checks each record it hands out on its own
(`storage.record_damage`), so damage stays with the records it hit: a flipped byte, a record
cut off by a truncated object, or an object that is gone. Such a message is not served: a
single read of it answers an error, a run of messages leaves it out, and consumers move past it
as they would past a deleted message.

The log says it once per record and agent (a consumer walking past the same record again
should not flood it); /varz shows the counts and the latest records found.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

# Distinct records remembered so that each is logged once; past this the oldest are forgotten
# (and would be logged again), which bounds memory whatever the damage.
SEEN_MAX = 10_000
RECENT_MAX = 20


@dataclass(frozen=True, slots=True)
class Damage:
    """One damaged stored message."""

    stream: str
    seq: int
    obj: str
    # Where the record starts in its object.
    offset: int
    reason: str

    def describe(self) -> str:
        return f"message {self.seq} of stream {self.stream} is damaged in object storage"


class DamagedMessage(Exception):
    """A read of one message whose record is damaged."""

    def __init__(self, damage: Damage) -> None:
        super().__init__(f"{damage.describe()} ({damage.reason})")
        self.damage = damage


class DamageLog:
    """What this agent's reads found damaged."""

    def __init__(self, *, announce: bool = True) -> None:
        # Whether each damaged record is logged (a job that lists them all says it itself).
        self.announce = announce
        # Reads that met a damaged record (the same record read twice counts twice).
        self.reads = 0
        # Deliveries consumers moved past because their message was damaged.
        self.consumer_skips = 0
        # Reads of sealed sections refused for want of their key (encryption at rest): not
        # damage, the bytes may be fine, but never served either.
        self.key_refusals = 0
        self._seen: OrderedDict[tuple[str, int, int], None] = OrderedDict()
        self.recent: deque[Damage] = deque(maxlen=RECENT_MAX)

    @property
    def records(self) -> int:
        """Distinct damaged records found (of the last SEEN_MAX)."""
        return len(self._seen)

    def found(self, damage: Damage) -> None:
        self.reads += 1
        # The sequence too: the records of a section whose directory is lost are known by
        # their sequence alone (their offsets are not).
        where = (damage.obj, damage.offset, damage.seq)
        if where in self._seen:
            return
        if len(self._seen) >= SEEN_MAX:
            self._seen.popitem(last=False)
        self._seen[where] = None
        self.recent.append(damage)
        if not self.announce:
            return
        log.error(
            "%s: %s (object %s, record at offset %d); intact messages are still served",
            damage.describe(),
            damage.reason,
            damage.obj,
            damage.offset,
        )

    def skipped_by_consumer(self, count: int) -> None:
        self.consumer_skips += count

    def report(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "reads": self.reads,
            "consumer_skips": self.consumer_skips,
            "key_refusals": self.key_refusals,
            "recent": [asdict(d) for d in self.recent],
        }
