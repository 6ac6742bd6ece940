"""Stream views built in memory, for tests that need no metadata store.

A view starts empty with everything of its (empty) index known, and grows by the same planning
and applying code a commit runs (`Changes`, `committer.apply_changes`), so what it holds is what
an agent's view holds after its own commits.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from typing import TypeVar

from infinistream.metadata import MetadataStore
from infinistream.stream.changes import Changes
from infinistream.stream.committer import apply_changes
from infinistream.stream.loader import fill
from infinistream.stream.records import IndexEntry, StreamState
from infinistream.stream.sections import OPEN, Page, Segment
from infinistream.stream.view import Missing, StreamView

T = TypeVar("T")


def empty_view(first_seq: int = 1) -> StreamView:
    """A view of a stream with no message, whose every section and subject record is known."""
    state = StreamState(uid="u", first_seq=first_seq, last_seq=first_seq - 1, subject_records=1)
    view = StreamView(state, 1)
    view.add_page(Page(0, OPEN, []))
    view.list_subjects(">", {})
    return view


def extend(
    view: StreamView, subjects: list[str], sizes: list[int] | None = None, *, ts: int = 100
) -> None:
    """Append one section holding records of `subjects` (sizes 10 bytes unless given), each
    message counting for its record's length in the stream."""
    sizes = sizes if sizes is not None else [10] * len(subjects)
    changes = Changes(view)
    first = changes.append_many(subjects, sizes)
    names: dict[str, int] = {}
    ids = array("I", (names.setdefault(s, len(names)) for s in subjects))
    entry = IndexEntry(
        obj=f"obj{first}",
        offset=0,
        length=sum(sizes),
        first_seq=first,
        ts=max(ts, view.state.last_ts + 1),
        subjects=list(names),
        subject_ids=ids.tobytes(),
        lengths=array("I", sizes).tobytes(),
        sizes=array("I", sizes).tobytes(),
    )
    apply_changes(view, changes, view.state_rev + 1, entry, f"k{first}")


def add_segment(view: StreamView, seg: Segment) -> None:
    """Append a section whose detail is `seg` (its records where `seg` says), as a commit of
    its messages at the view's end would."""
    changes = Changes(view)
    sizes = [seg.size_at(i, view.storage) for i in range(len(seg.subjects))]
    first = changes.append_many(seg.subjects, sizes)
    assert first == seg.first, "a section appended at the end follows the view's last sequence"
    apply_changes(view, changes, view.state_rev + 1, segment=seg)


def kill(view: StreamView, seqs: Iterable[int]) -> None:
    """Delete these messages, as a commit of their deletes would."""
    changes = Changes(view)
    for seq in sorted(seqs):
        changes.kill(seq)
    apply_changes(view, changes, view.state_rev + 1)


def view_of(subjects: list[str], *, size: int = 10) -> StreamView:
    """A view of one section, sequences from 1, every record `size` bytes."""
    view = empty_view()
    if subjects:
        extend(view, subjects, [size] * len(subjects))
    return view


async def answer(meta: MetadataStore, view: StreamView, question: Callable[[], T]) -> T:
    """`question()`, reading what it finds missing (as `Catalog.answer` does)."""
    while True:
        try:
            return question()
        except Missing as missing:
            await fill(meta, view, missing.need)
