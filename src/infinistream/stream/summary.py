"""What subjects a section holds, in a few bytes of its metadata entry.

A filtered consumer, a purge by subject or a last-by-subject search walks sections; most
sections of a stream with many subjects hold none of the one it wants, and it should not read
their record directories to find that out. Each section's metadata entry therefore says what
subjects it holds:

- **exactly**, for a section of a few subjects (`MAX_NAMED` or fewer): their names, and how
  many of its records (those holding a sequence) each has, so that limits and purges that drop
  whole sections need no directory to keep per-subject counts;
- **as a filter**, for more: a Bloom filter over the subjects, sized to at most
  `bits_per_record` bits a record (so metadata per message stays bounded) and kept only when it
  can tell much apart (an estimated false-positive rate under one half);
- **not at all** otherwise: every subject may be there.

The filter hashes a subject's UTF-8 bytes with zlib's crc32 under two seeds (double hashing):
C speed, and the same in every process, unlike Python's `hash`.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence

import msgspec

from infinistream.jetstream.subjects import matches

MAX_NAMED = 16
# The largest filter, in bits, whatever the section's size.
MAX_FILTER_BITS = 1 << 16
_SEED = 0x9E3779B9


def _positions(subject: str, bits: int, k: int) -> Iterable[int]:
    raw = subject.encode()
    h1 = zlib.crc32(raw)
    h2 = zlib.crc32(raw, _SEED) | 1
    return ((h1 + i * h2) % bits for i in range(k))


class SubjectSummary(msgspec.Struct, frozen=True, gc=False):
    """The subjects of one section: `names` with their `counts` (exact), or a filter of
    `bloom` bits tested `k` times (any subject the filter passes may be there), or neither.

    One per section an agent holds in memory, and nothing in it can refer back to it: not
    tracked by the cyclic collector, whose full collections walk what it tracks."""

    names: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()
    bloom: bytes = b""
    k: int = 0

    @property
    def exact(self) -> bool:
        return not self.bloom and bool(self.names)

    @property
    def known(self) -> bool:
        """Whether it says anything: an exact list or a filter."""
        return bool(self.names or self.bloom)

    def may_hold(self, subject: str) -> bool:
        """False only if the section holds no record of `subject`."""
        if self.names:
            return subject in self.names
        if self.bloom:
            bits = len(self.bloom) * 8
            return all(
                self.bloom[p >> 3] & (1 << (p & 7)) for p in _positions(subject, bits, self.k)
            )
        return True

    def may_match(self, filter_subject: str) -> bool:
        """False only if no subject of the section matches `filter_subject` (wildcards too)."""
        if not filter_subject or filter_subject == ">":
            return True
        if not any(c in filter_subject for c in "*>"):
            return self.may_hold(filter_subject)
        if self.names:
            return any(matches(filter_subject, name) for name in self.names)
        return True

    def count_of(self, subject: str) -> int | None:
        """How many records of `subject` the section holds, if it says (exact); else None."""
        if not self.exact:
            return None
        try:
            return self.counts[self.names.index(subject)]
        except ValueError:
            return 0


def summarize(subjects: Sequence[str], bits_per_record: float = 2.0) -> SubjectSummary:
    """The summary of a section whose records holding a sequence have these `subjects`."""
    tally = Counter(subjects)
    if len(tally) <= MAX_NAMED:
        return SubjectSummary(tuple(tally), tuple(tally.values()))
    n = len(tally)
    bits = min(10 * n, int(bits_per_record * len(subjects)), MAX_FILTER_BITS)
    bits = max(64, bits - bits % 8)
    k = max(1, min(8, round(bits / n * math.log(2))))
    if (1 - math.exp(-k * n / bits)) ** k >= 0.5:
        return SubjectSummary()
    bloom = bytearray(bits // 8)
    for subject in tally:
        for p in _positions(subject, bits, k):
            bloom[p >> 3] |= 1 << (p & 7)
    return SubjectSummary(bloom=bytes(bloom), k=k)
