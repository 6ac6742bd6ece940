"""Stream views built from index entries alone, for tests that need no metadata store."""

from __future__ import annotations

from array import array

from infinistream.stream.records import IndexEntry, StreamState
from infinistream.stream.view import Segment, StreamView


def view_of(subjects: list[str], *, size: int = 10) -> StreamView:
    """A view of one segment, sequences from 1, every record `size` bytes, each message
    counting for as many in the stream."""
    view = StreamView(StreamState(uid="u", first_seq=1, last_seq=0), 1)
    if subjects:
        names: dict[str, int] = {}
        ids = array("I", (names.setdefault(s, len(names)) for s in subjects))
        entry = IndexEntry(
            obj="o",
            offset=0,
            length=size * len(subjects),
            first_seq=1,
            ts=100,
            subjects=list(names),
            subject_ids=ids.tobytes(),
            lengths=array("I", [size] * len(subjects)).tobytes(),
            sizes=array("I", [size] * len(subjects)).tobytes(),
        )
        view.add_segment(Segment.from_entry("k", entry))
    return view
