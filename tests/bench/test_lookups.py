"""The scale benchmark's lookups: each length's index is grown from the one before, and every
lookup finds the section that holds its sequence (the workload refuses any other answer)."""

from __future__ import annotations

import argparse
from pathlib import Path

from infinistream_bench.lookups import run_lookups


async def test_lookups_grow_each_stream_and_find_every_section(tmp_path: Path) -> None:
    args = argparse.Namespace(
        scale_metadata="sqlite", scale_messages="1000,5000", scale_lookup_sections="7,250"
    )
    rows = await run_lookups(args, tmp_path)
    got = [(r["section_messages"], r["messages"], r["index_keys"]) for r in rows]
    # Whole sections: 1,000 messages in sections of 7 are 142 of them, 994 messages.
    assert got == [(7, 994, 142), (7, 4998, 714), (250, 1000, 4), (250, 5000, 20)]
    assert all(r["snapshots_max"] >= 1 and r["lookup_p50_ms"] > 0 for r in rows)
