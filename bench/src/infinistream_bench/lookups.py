"""`infinistream bench --scale lookups`: what a cold read of the index costs to find the section
holding one sequence, as a stream's index grows, with no agent in the way.

For each section length of `--scale-lookup-sections` and each stream length of
`--scale-messages`, the stream's index entries are written straight into metadata (etcd or
SQLite, `--scale-metadata`), one per section; then 200 lookups of a random sequence, each by a
fresh view (`load_view`, then `fill` for what `section_at(seq, lone=True)` misses: what a
cold get reads of metadata before its GET). A row gives their latency and how many metadata
snapshots each took. The section lengths matter as much as the stream's: agents' flushes
write short sections, the library fill 4,000-odd messages, compaction long ones.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infinistream.metadata import open_metadata
from infinistream.metadata.kv import Item, MetadataStore, Op, Put, Read, Snapshot, StoreWrapper
from infinistream.stream import records
from infinistream.stream.loader import fill, load_view
from infinistream.stream.records import SectionEntry, StreamKeys, StreamState
from infinistream.stream.view import Missing
from infinistream_bench.backends import etcd_cluster
from infinistream_bench.control import BenchError

LOOKUPS = 200
# Index entries a metadata transaction writes at once while the index is built.
WRITE_BATCH = 2000


class _Counting(StoreWrapper):
    """The store, counting its snapshots."""

    def __init__(self, inner: MetadataStore) -> None:
        super().__init__(inner)
        self.snapshots = 0

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        self.snapshots += 1
        return await super().snapshot(reads)


def _entry(first: int, per: int) -> SectionEntry:
    """The index entry of a section of `per` 16 B messages over 16 subjects from `first`."""
    return SectionEntry(
        obj=f"default/objects/l0/{first:020d}-a-00000001-aaaaaa.iso",
        offset=8,
        length=per * 60,
        plain_length=per * 60,
        dir_length=per * 6,
        records=per,
        first_seq=first,
        last_seq=first + per - 1,
        count=per,
        size=per * 60,
        ts=first,
        last_ts=first + per - 1,
        names=tuple(f"big.{i}" for i in range(16)),
        counts=(per // 16,) * 16,
    )


@contextmanager
def _metadata_url(metadata: str, work: Path) -> Iterator[str]:
    if metadata == "sqlite":
        work.mkdir(parents=True, exist_ok=True)
        yield f"sqlite://{work / 'lookups.db'}"
        return
    with etcd_cluster(work, 1) as url:
        yield url


async def run_lookups(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    steps = [int(x) for x in args.scale_messages.split(",")]
    pers = [int(x) for x in args.scale_lookup_sections.split(",")]
    rows: list[dict[str, Any]] = []
    with _metadata_url(args.scale_metadata, work) as url:
        meta = _Counting(open_metadata(url))
        try:
            for per in pers:
                keys = StreamKeys("default", f"L{per}")
                written = 0
                for target in steps:
                    written = await _grow(meta, keys, per, written, max(1, target // per))
                    rows.append(await _measure(meta, keys, per, written))
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        finally:
            await meta.close()
    return rows


async def _grow(meta: MetadataStore, keys: StreamKeys, per: int, have: int, want: int) -> int:
    """The index of stream `keys` grown from `have` to `want` sections of `per` messages."""
    while have < want:
        n = min(WRITE_BATCH, want - have)
        firsts = [1 + (have + i) * per for i in range(n)]
        ops: list[Op] = [Put(keys.index(f), records.encode(_entry(f, per))) for f in firsts]
        have += n
        last = have * per
        state = StreamState(uid="u", first_seq=1, last_seq=last, msgs=last, bytes=16 * last)
        ops.append(Put(keys.state, records.encode(state)))
        result = await meta.txn([], ops)
        if not result.succeeded:
            raise BenchError("writing the index failed")
    return have


async def _measure(meta: _Counting, keys: StreamKeys, per: int, sections: int) -> dict[str, Any]:
    state = await meta.get(keys.state)
    if state is None:
        raise BenchError(f"{keys.stream}: no state")
    last = sections * per
    times: list[float] = []
    reads: list[int] = []
    for _ in range(LOOKUPS):
        seq = random.randint(1, last)
        ms, snapshots = await _lookup(meta, state, keys, seq)
        times.append(ms)
        reads.append(snapshots)
    times.sort()
    return {
        "section_messages": per,
        "messages": last,
        "index_keys": sections,
        "lookup_p50_ms": statistics.median(times),
        "lookup_p99_ms": times[int(0.99 * len(times))],
        "snapshots_mean": statistics.mean(reads),
        "snapshots_max": max(reads),
    }


async def _lookup(meta: _Counting, state: Item, keys: StreamKeys, seq: int) -> tuple[float, int]:
    """One cold lookup of `seq`: its latency (ms) and the snapshots it took."""
    view = load_view(keys, state)
    before = meta.snapshots
    started = time.perf_counter()
    while True:
        try:
            section = view.section_at(seq, lone=True)
            break
        except Missing as missing:
            await fill(meta, view, missing.need)
    ms = (time.perf_counter() - started) * 1000
    if section is None or not section.first <= seq <= section.last:
        raise BenchError(f"{keys.stream}: the lookup of {seq} found {section}")
    return ms, meta.snapshots - before
