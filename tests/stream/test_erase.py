"""Erase requests: their sequence ranges, and the health probe that says when one is late."""

from __future__ import annotations

import time
from pathlib import Path

from infinistream.metadata import MetadataStore, Put, open_metadata
from infinistream.stream.erase import (
    EraseDeadline,
    EraseRequest,
    SeqRanges,
    encode_request,
    merge_ranges,
    ranges_of,
    request_key,
    wants_erase,
)

HOUR = 3600 * 10**9


def test_ranges_merge_runs_and_answer_membership() -> None:
    assert ranges_of([5, 1, 2, 3, 9]) == [(1, 3), (5, 5), (9, 9)]
    assert merge_ranges([(10, 20), (1, 4), (5, 6), (18, 30)]) == [(1, 6), (10, 30)]
    ranges = SeqRanges([(1, 3), (10, 2**64 - 1)])
    assert [s in ranges for s in (0, 1, 3, 4, 9, 10, 2**64 - 1)] == [
        False,
        True,
        True,
        False,
        False,
        True,
        True,
    ]
    assert ranges.overlaps(4, 10) and not ranges.overlaps(4, 9)
    assert not SeqRanges([])


def test_the_purge_header_asks_for_an_erase() -> None:
    assert wants_erase(b"NATS/1.0\r\nInfiniStream-Erase: true\r\n\r\n")
    assert wants_erase(b"NATS/1.0\r\nInfiniStream-Erase: 1\r\n\r\n")
    # Names match exactly, as nats-server matches its own headers.
    assert not wants_erase(b"NATS/1.0\r\ninfinistream-erase: true\r\n\r\n")
    assert not wants_erase(b"NATS/1.0\r\nInfiniStream-Erase: no\r\n\r\n")
    assert not wants_erase(b"NATS/1.0\r\nOther: true\r\n\r\n")
    assert not wants_erase(None)


async def _put(meta: MetadataStore, stream: str, requested_ns: int, completed_ns: int = 0) -> None:
    request = EraseRequest(
        stream=stream,
        uid="u",
        ranges=[(1, 1)],
        requested_ns=requested_ns,
        kind="delete",
        holders=["o"],
        completed_ns=completed_ns,
    )
    key = request_key("g", stream, requested_ns)
    await meta.txn([], [Put(key, encode_request(request))])


async def test_deadline_probe_fails_on_a_late_request_only(tmp_path: Path) -> None:
    meta = open_metadata(f"sqlite:///{tmp_path / 'meta.db'}")
    now = time.time_ns()
    try:
        probe = EraseDeadline(meta, "g", 24 * HOUR)
        assert await probe() is None  # no requests
        await _put(meta, "A", now - HOUR)
        # Completed, late or not: the alert is about what is still owed.
        await _put(meta, "B", now - 30 * HOUR, completed_ns=now)
        assert await probe() is None
        await _put(meta, "C", now - 25 * HOUR)
        reason = await probe()
        assert reason is not None
        assert reason.startswith("1 erase requests missed their deadline of 24h")
        assert "(stream C, pending) was made 25h ago" in reason
        # Without a deadline there is no alert; another group's requests are not this one's.
        assert await EraseDeadline(meta, "g", 0)() is None
        assert await EraseDeadline(meta, "other", 24 * HOUR)() is None
    finally:
        await meta.close()
