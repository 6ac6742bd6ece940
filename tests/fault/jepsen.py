"""Jepsen-style bookkeeping for the fault suite: what clients sent, what the server acknowledged
or refused, what consumers and a final audit read; and the checker that does the arithmetic.

    acked - stored          = lost          (must be empty: nothing acknowledged may go)
    stored - sent           = unexpected    (must be empty: nothing appears from nowhere)
    stored more than once   = duplicated    (must be empty: publishers never retry)
    a publisher's messages stored out of the order it sent them = reordered
    an ack whose sequence is not where the message is stored    = wrong sequence
    stored - consumed by the live consumer = not consumed (after it has drained)

Publishes answered with an error, or never answered (the agent died, the client timed out),
are "indeterminate": they may or may not be stored, and either is correct. Every message
carries its publisher and its number, so all of this is computed from what came back.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


def message_id(publisher: int, n: int) -> str:
    return f"p{publisher}-{n}"


def parse_id(msg_id: str) -> tuple[int, int]:
    publisher, n = msg_id[1:].split("-")
    return int(publisher), int(n)


@dataclass
class Sent:
    publisher: int
    n: int
    at: float
    # Filled in by the answer, if one comes: the sequence acked, or the error.
    seq: int = 0
    error: str = ""
    answered_at: float = 0.0
    # When the publisher stopped waiting for an answer (0: it did not); a late answer still
    # counts.
    given_up_at: float = 0.0


@dataclass
class History:
    sent: dict[str, Sent] = field(default_factory=dict)
    # msg id -> stream sequences at which the live consumer got it (once per delivery).
    consumed: dict[str, list[int]] = field(default_factory=dict)
    consumer_errors: int = 0

    def send(self, publisher: int, n: int) -> str:
        msg_id = message_id(publisher, n)
        self.sent[msg_id] = Sent(publisher, n, time.monotonic())
        return msg_id

    def answer(self, msg_id: str, reply: bytes) -> None:
        entry = self.sent.get(msg_id)
        if entry is None:
            return
        entry.answered_at = time.monotonic()
        try:
            body: dict[str, Any] = json.loads(reply)
        except ValueError:
            entry.error = f"unreadable answer {reply[:80]!r}"
            return
        if "error" in body:
            entry.error = f"{body['error'].get('code')} {body['error'].get('err_code')}"
        else:
            entry.seq = int(body["seq"])
            entry.error = ""

    def acknowledge(self, msg_id: str, seq: int) -> None:
        """An application's publish call returned this sequence."""
        entry = self.sent[msg_id]
        entry.answered_at = time.monotonic()
        entry.seq, entry.error = seq, ""

    def fail(self, msg_id: str, error: str) -> None:
        """An application's publish call raised (an error answer, or a timeout)."""
        entry = self.sent[msg_id]
        entry.answered_at = time.monotonic()
        entry.error = error or "error"

    def give_up(self, msg_id: str) -> None:
        entry = self.sent.get(msg_id)
        if entry is not None and not entry.seq and not entry.error:
            entry.given_up_at = time.monotonic()

    def consume(self, msg_id: str, seq: int) -> None:
        self.consumed.setdefault(msg_id, []).append(seq)

    @property
    def acked(self) -> dict[str, int]:
        return {k: s.seq for k, s in self.sent.items() if s.seq}

    def acked_between(self, start: float, end: float, *, sent_after: float) -> list[str]:
        """Messages sent after `sent_after` whose ack came in [start, end)."""
        return [
            k
            for k, s in self.sent.items()
            if s.seq and s.at >= sent_after and start <= s.answered_at < end
        ]

    def answered_after(self, at: float) -> list[str]:
        """Messages sent after `at` that were acknowledged."""
        return [k for k, s in self.sent.items() if s.seq and s.at >= at]

    def acked_since(self, at: float) -> int:
        """How many messages sent after `at` were acknowledged."""
        return sum(1 for s in self.sent.values() if s.seq and s.at >= at)

    def refused_since(self, at: float) -> int:
        """How many messages sent after `at` were answered with an error."""
        return sum(1 for s in self.sent.values() if s.error and s.at >= at)

    def unacked_since(self, at: float) -> int:
        """How many messages sent after `at` were answered with an error or given up on."""
        return sum(
            1 for s in self.sent.values() if not s.seq and (s.error or s.given_up_at) and s.at >= at
        )


@dataclass
class Verdict:
    name: str
    sent: int
    acked: int
    errors: int
    unanswered: int
    stored: int
    lost: list[str]
    unexpected: list[str]
    duplicated: list[str]
    reordered: list[str]
    wrong_seq: list[str]
    # The live consumer: deliveries, of which redeliveries, and stored messages it never got.
    delivered: int = 0
    redelivered: int = 0
    not_consumed: list[str] = field(default_factory=list)
    consumed_unstored: list[str] = field(default_factory=list)
    # Messages whose loss the fault explains (their records were destroyed, and reported).
    lost_to_damage: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.duplicated
            or self.reordered
            or self.wrong_seq
            or self.not_consumed
            or self.consumed_unstored
        )

    def line(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.notes.items())
        damage = f" lost-to-damage={len(self.lost_to_damage)}" if self.lost_to_damage else ""
        return (
            f"{self.name}: sent={self.sent} acked={self.acked} errors={self.errors}"
            f" unanswered={self.unanswered} stored={self.stored} lost={len(self.lost)}"
            f"{damage} unexpected={len(self.unexpected)} duplicated={len(self.duplicated)}"
            f" reordered={len(self.reordered)} wrong-seq={len(self.wrong_seq)};"
            f" consumer delivered={self.delivered} redelivered={self.redelivered}"
            f" not-consumed={len(self.not_consumed)}{extra}"
        )

    def problems(self) -> str:
        parts = []
        for label in (
            "lost",
            "unexpected",
            "duplicated",
            "reordered",
            "wrong_seq",
            "not_consumed",
            "consumed_unstored",
        ):
            items = getattr(self, label)
            if items:
                parts.append(f"{label}: {sorted(items)[:10]}")
        return "; ".join(parts)


def check(
    name: str,
    history: History,
    stored: dict[int, str],
    *,
    damaged: set[str] | None = None,
    with_consumer: bool = True,
) -> Verdict:
    """The verdict on a run: `stored` is the audit of the stream, sequence -> message id.

    `damaged` are the messages whose records the fault destroyed (and the agent reported): their
    loss is counted apart, and they are not expected from the consumer.
    """
    damaged = damaged or set()
    acked = history.acked
    counts = Counter(stored.values())
    where = {msg_id: seq for seq, msg_id in stored.items()}
    lost_all = sorted(k for k in acked if k not in counts)
    lost = [k for k in lost_all if k not in damaged]
    unexpected = sorted(k for k in counts if k not in history.sent)
    duplicated = sorted(k for k, c in counts.items() if c > 1)
    wrong_seq = sorted(k for k, seq in acked.items() if k in where and where[k] != seq)
    # Per publisher: stored sequences in the order the messages were sent.
    by_publisher: dict[int, list[tuple[int, int, str]]] = {}
    for seq, msg_id in stored.items():
        if msg_id in history.sent:
            publisher, n = parse_id(msg_id)
            by_publisher.setdefault(publisher, []).append((n, seq, msg_id))
    reordered = []
    for runs in by_publisher.values():
        runs.sort()
        highest = 0
        for _, seq, msg_id in runs:
            if seq < highest:
                reordered.append(msg_id)
            highest = max(highest, seq)
    deliveries = sum(len(v) for v in history.consumed.values())
    verdict = Verdict(
        name=name,
        sent=len(history.sent),
        acked=len(acked),
        errors=sum(1 for s in history.sent.values() if s.error),
        unanswered=sum(1 for s in history.sent.values() if not s.seq and not s.error),
        stored=len(stored),
        lost=lost,
        unexpected=unexpected,
        duplicated=duplicated,
        reordered=reordered,
        wrong_seq=wrong_seq,
        lost_to_damage=[k for k in lost_all if k in damaged],
        delivered=deliveries,
        redelivered=deliveries - len(history.consumed),
    )
    if with_consumer:
        verdict.not_consumed = sorted(
            k for k in counts if k not in history.consumed and k not in damaged
        )
        verdict.consumed_unstored = sorted(k for k in history.consumed if k not in counts)
    return verdict
