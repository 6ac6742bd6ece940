"""A stream's sections as an agent holds them: a small summary each, the detail on demand.

A `Section` is what a section's metadata entry says: where it is, which sequences and times it
holds, how many records and bytes, and which subjects (`stream.summary`). An agent keeps the
summaries of the sections it has looked at, a few hundred bytes each whatever the section's size.

A `Segment` is a section's detail: per record holding a sequence, its subject, offset and length
in the section's plain bytes, and its sequence and timestamp. It comes from the section's record
directory in its object (`storage.directory`), or, for an index entry written before record
directories (`IndexEntry`), from the entry itself; an agent builds it when it needs to know the
section's records and keeps it within its index cache's budget.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from sys import intern

from infinistream.storage import Encryption, ObjectStore, RecordDirectory, read_directory
from infinistream.stream.records import (
    Entry,
    IndexEntry,
    SectionEntry,
    decode_section,
    seq_from_key,
)
from infinistream.stream.sizes import record_size, record_sizes, section_size
from infinistream.stream.summary import SubjectSummary, summarize

# Bits a record that a section's subject filter may take (see stream.summary): what keeps a
# section's entry within half a byte a message before compaction, whatever its subjects.
FILTER_BITS_PER_RECORD = 2.0

# What CPython takes for an ASCII string beyond its characters (`sys.getsizeof("")`).
_ASCII_STR_BYTES = sys.getsizeof("")


def strings_bytes(strings: Sequence[str]) -> int:
    """The memory `strings` take, as `sys.getsizeof` counts it. A compacted section names up
    to one subject a record, and asking each string its size took most of the time of
    building such a section's detail (16,384 names: 1.5 ms); ASCII strings, nearly all
    subjects, are counted from their joined length instead (0.1 ms)."""
    joined = "".join(strings)
    if joined.isascii():
        return _ASCII_STR_BYTES * len(strings) + len(joined)
    return sum(map(sys.getsizeof, strings))


class Segment:
    """The records of one section that hold a sequence, position by position.

    Position i holds sequence `seq_at(i)`: first + i for a section written by an agent, or an
    explicit list for a compacted one, where deleted messages left gaps.
    """

    __slots__ = (
        "codec",
        "dir_length",
        "first",
        "header_lengths",
        "key",
        "last",
        "length",
        "lengths",
        "names_bytes",
        "obj",
        "offset",
        "offsets",
        "plain_length",
        "seqs",
        "sizes",
        "stamps",
        "subjects",
        "ts",
    )

    def __init__(
        self,
        key: str,
        entry: Entry,
        *,
        subjects: Sequence[str],
        offsets: array[int],
        lengths: array[int],
        plain_length: int,
        seqs: array[int] | None = None,
        stamps: array[int] | None = None,
        header_lengths: array[int] | None = None,
        sizes: array[int] | None = None,
        names: Sequence[str] | None = None,
    ) -> None:
        """The detail of the section that `entry` (at `key`) places in its object; `names`,
        when given, are the distinct strings `subjects` point to."""
        self.key = key
        self.obj = entry.obj
        self.offset = entry.offset
        self.length = entry.length
        # A compressed section (codec != 0) is `length` bytes in its object and is read
        # whole; `plain_length` bytes of records once decoded, which `offsets` point into.
        self.codec = entry.codec
        self.plain_length = plain_length
        # The record directory's stored bytes, right after the section (0: none, an index
        # entry held the detail).
        self.dir_length = entry.dir_length if isinstance(entry, SectionEntry) else 0
        self.seqs = seqs
        self.stamps = stamps
        self.first = entry.first_seq if seqs is None or not seqs else seqs[0]
        self.last = self.first + len(subjects) - 1 if seqs is None or not seqs else seqs[-1]
        self.ts = entry.ts
        # Per position, interned. A tuple of strings only: the cyclic collector stops
        # tracking it at its first pass, where a list would be walked at each full
        # collection, a reference per cached message.
        self.subjects: tuple[str, ...] = subjects if type(subjects) is tuple else tuple(subjects)
        self.offsets = offsets  # per position: record offset within the section
        self.lengths = lengths  # per position: record length
        self.header_lengths = header_lengths  # per position, None when none has headers
        # Per position, what the message counts for in its stream, for an index entry that
        # kept it (stream.sizes); None: worked out from its length and headers (`size_at`).
        self.sizes = sizes
        # The bytes of the distinct subject strings the positions point to: most of what a
        # segment takes when its records have nearly as many subjects as records.
        if names is None:
            names = list({id(s): s for s in subjects}.values())
        self.names_bytes = strings_bytes(names)

    def index_of(self, seq: int) -> int | None:
        """The position of `seq` in this segment, or None if it holds no such sequence."""
        if self.seqs is None:
            return seq - self.first if self.first <= seq <= self.last else None
        i = bisect_left(self.seqs, seq)
        return i if i < len(self.seqs) and self.seqs[i] == seq else None

    def seq_at(self, i: int) -> int:
        return self.first + i if self.seqs is None else self.seqs[i]

    def ts_at(self, i: int) -> int:
        return self.ts + i if self.stamps is None else self.stamps[i]

    def size_at(self, i: int, storage: str) -> int:
        """What the message at position i counts for in a stream of `storage` (stream.sizes)."""
        if self.sizes is not None:
            return self.sizes[i]
        hdrs = self.header_lengths
        return record_size(storage, self.lengths[i], hdrs is not None and hdrs[i] > 0)

    def positions_from(self, seq: int) -> range:
        """Positions holding sequences >= seq."""
        n = len(self.subjects)
        if self.seqs is None:
            return range(min(max(0, seq - self.first), n), n)
        return range(bisect_left(self.seqs, seq), n)

    def cost(self) -> int:
        """About how many bytes of memory the segment takes (for the index cache's budget):
        a reference a position, its columns, and its subjects' strings. The strings count:
        a section of 3,484 records over 100,000 subjects takes 270 KB (tracemalloc), 79 B a
        record, where one over 16 subjects takes 21 B a record."""
        columns = sum(
            len(column) * column.itemsize
            for column in (
                self.offsets,
                self.lengths,
                self.header_lengths,
                self.seqs,
                self.stamps,
                self.sizes,
            )
            if column is not None
        )
        return 400 + 8 * len(self.subjects) + columns + self.names_bytes

    @classmethod
    def from_entry(cls, key: str, entry: IndexEntry) -> Segment:
        all_lengths = entry.length_array()
        all_offsets = array("I", accumulate(all_lengths, initial=0))
        # Entries written before sizes were kept leave them to `size_at`.
        all_sizes = record_sizes(entry.sizes, all_lengths) if entry.sizes else None
        names = entry.subjects
        ids = entry.subject_id_array()
        if entry.skipped:
            skipped = set(entry.skipped)
            kept = [i for i in range(len(all_lengths)) if i not in skipped]
            offsets = array("I", (all_offsets[i] for i in kept))
            lengths = array("I", (all_lengths[i] for i in kept))
            if all_sizes is not None:
                all_sizes = array("I", (all_sizes[i] for i in kept))
            subjects = [names[ids[i]] for i in kept]
        else:
            offsets = all_offsets[:-1]
            lengths = all_lengths
            subjects = [names[i] for i in ids]
        return cls(
            key,
            entry,
            subjects=subjects,
            offsets=offsets,
            lengths=lengths,
            plain_length=all_offsets[-1] if entry.codec else entry.length,
            seqs=entry.seq_array(),
            stamps=entry.timestamp_array(),
            sizes=all_sizes,
        )

    @classmethod
    def recovered(
        cls, key: str, entry: SectionEntry, intact: Sequence[tuple[str, int, int]]
    ) -> Segment:
        """The detail of a section whose record directory cannot be read, from the records
        read intact at its start (`storage.intact_records`: subject, length, headers length).
        The records past them are of unknown subject and no length, so every read of one
        finds it damaged (and a filter matches none). A section whose sequences only its
        directory knew (`entry.explicit`) cannot be told this way: all of it is unknown."""
        n = entry.records
        if entry.explicit:
            intact = ()
        known, unknown = len(intact), n - len(intact)
        subjects = [s for s, _, _ in intact] + [""] * unknown
        lengths = array("I", [ln for _, ln, _ in intact]) + array("I", bytes(4 * unknown))
        hdrs = array("I", [h for _, _, h in intact]) + array("I", bytes(4 * unknown))
        # The unknown records all start where the intact ones end: that is where the damage is.
        starts = array("I", accumulate(lengths[:known], initial=0))
        offsets = starts[:known] + array("I", [starts[known]] * unknown)
        kept: range | list[int] = range(n)
        if entry.skipped:
            skipped = set(entry.skipped)
            kept = [i for i in kept if i not in skipped]
        return cls(
            key,
            entry,
            subjects=[subjects[i] for i in kept],
            offsets=array("I", (offsets[i] for i in kept)),
            lengths=array("I", (lengths[i] for i in kept)),
            plain_length=entry.plain_length,
            header_lengths=array("I", (hdrs[i] for i in kept)) if any(hdrs) else None,
        )

    @classmethod
    def from_directory(cls, key: str, entry: SectionEntry, directory: RecordDirectory) -> Segment:
        """The detail of a section whose entry is `entry` and record directory `directory`."""
        if len(directory) != entry.records or sum(directory.lengths) != entry.plain_length:
            raise ValueError(f"index entry {key}: the record directory is of other records")
        names = directory.subjects
        all_offsets = array("I", accumulate(directory.lengths, initial=0))
        del all_offsets[-1]
        if entry.explicit and (directory.seqs is None or directory.stamps is None):
            raise ValueError(f"index entry {key}: its directory lists no sequences")
        # The directory's columns, position by position; only a section that skips records
        # copies them. Built in C (a cold read of one message builds the detail of its
        # section: 3,125 records a section took 0.6 ms picked one by one in Python).
        if entry.skipped:
            skipped = set(entry.skipped)
            kept = [i for i in range(len(directory)) if i not in skipped]

            def column(values: array[int]) -> array[int]:
                return array(values.typecode, map(values.__getitem__, kept))

        else:

            def column(values: array[int]) -> array[int]:
                return values

        hdrs = directory.header_lengths
        seg = cls(
            key,
            entry,
            subjects=tuple(map(names.__getitem__, column(directory.ids))),
            offsets=column(all_offsets),
            lengths=column(directory.lengths),
            plain_length=entry.plain_length,
            seqs=column(directory.seqs) if entry.explicit and directory.seqs else None,
            stamps=column(directory.stamps) if entry.explicit and directory.stamps else None,
            header_lengths=None if hdrs is None else column(hdrs),
            names=names,
        )
        if len(seg.subjects) != entry.count or seg.last != entry.last_seq:
            raise ValueError(f"index entry {key}: the record directory disagrees with it")
        return seg


@dataclass(slots=True)
class Section:
    """What an index entry says of its section, without the detail of each record."""

    key: str
    obj: str
    first: int
    last: int
    # Records holding a sequence, and their plain bytes.
    count: int
    size: int
    ts: int
    last_ts: int
    summary: SubjectSummary
    # The entry, for a section whose detail is in its record directory (None for one whose
    # entry holds its detail: build it again from the entry, read again).
    entry: SectionEntry | None
    # How many of its records have headers; and what its messages count for in all, when
    # the entry kept each one's size (else `stored_size` works it out).
    hdrs: int = 0
    stored: int | None = None

    def holds(self, seq: int) -> bool:
        return self.first <= seq <= self.last

    def stored_size(self, storage: str) -> int:
        """What the section's messages count for in a stream of `storage` (stream.sizes)."""
        if self.stored is not None:
            return self.stored
        return section_size(storage, self.size, self.count, self.hdrs)

    def cost(self) -> int:
        """About how many bytes of memory the summary takes, its entry's with it (measured
        with tracemalloc: 1,950 B with a filter of 871 B, 2,460 B with 16 names)."""
        names = sum(len(n) + 80 for n in self.summary.names)
        return 1100 + names + len(self.summary.bloom)


def entry_summary(entry: SectionEntry) -> SubjectSummary:
    """The subject summary an index entry carries."""
    return SubjectSummary(entry.names, entry.counts, entry.bloom, entry.bloom_k)


def section_of(key: str, entry: Entry) -> tuple[Section, Segment | None]:
    """The summary of the section `entry` describes; with its detail when the entry holds it."""
    if isinstance(entry, SectionEntry):
        summary = entry_summary(entry)
        section = Section(
            key,
            entry.obj,
            entry.first_seq,
            entry.last_seq,
            entry.count,
            entry.size,
            entry.ts,
            entry.last_ts,
            summary,
            entry,
            entry.hdrs,
        )
        return section, None
    seg = Segment.from_entry(key, entry)
    return summary_of(seg), seg


async def read_segment(
    objects: ObjectStore, key: str, entry: Entry, keys: Encryption | None = None
) -> Segment:
    """The detail of the section `entry` (at metadata key `key`) describes: from the entry
    itself, or from its record directory, read with one ranged GET (opened with `keys` when
    sealed). For readers outside an agent (pipeline jobs), which cache nothing."""
    if isinstance(entry, IndexEntry):
        return Segment.from_entry(key, entry)
    directory = await read_directory(
        objects, entry.obj, entry.dir_offset, entry.dir_length, keys=keys
    )
    return Segment.from_directory(key, entry, directory)


def summary_of(seg: Segment) -> Section:
    """The summary of a section from its detail."""
    n = len(seg.subjects)
    hdrs = seg.header_lengths
    return Section(
        seg.key,
        seg.obj,
        seg.first,
        seg.last,
        n,
        sum(seg.lengths),
        seg.ts_at(0) if n else seg.ts,
        seg.ts_at(n - 1) if n else seg.ts,
        summarize(seg.subjects, FILTER_BITS_PER_RECORD),
        None,
        0 if hdrs is None else sum(1 for h in hdrs if h),
        None if seg.sizes is None else sum(seg.sizes),
    )


# The end of a page that reaches the end of the stream as its view knows it.
OPEN = 2**64
# Index entries in one page of section summaries, as read from metadata, and at most in the
# open page an agent appends its own commits to: a page is what the index cache keeps or
# drops as one, so none grows with the stream.
PAGE_ENTRIES = 128


class Page:
    """The sections of sequences `lo`..`hi` (inclusive; `OPEN`: to the stream's end), every
    one of them: a sequence in that span that no section holds is held by none.

    A page read from metadata keeps its entries as they are stored (`stored`): a cold read of
    one message needs one entry of the page's 129, and decoding them all was most of what the
    read cost in a stream of hundreds of pages (a page's read took 3.6-4.2 ms of CPU decoded,
    0.5-0.7 ms kept as stored; 100M messages), and took three times the memory. `find`
    decodes the one entry it needs; the first look at `sections` (a walk over sections)
    decodes them all, for good."""

    __slots__ = ("_firsts", "_keys", "_sections", "_stored", "hi", "lo")

    def __init__(self, lo: int, hi: int, sections: list[Section]) -> None:
        self.lo = lo
        self.hi = hi
        self._sections: list[Section] | None = sections
        self._keys: list[str] = []
        self._stored: list[bytes] = []
        self._firsts = array("Q")

    @classmethod
    def stored(cls, lo: int, hi: int, keys: list[str], values: list[bytes]) -> Page:
        """The page of the `SectionEntry`s stored at `keys` (in sequence order) as `values`."""
        page = cls(lo, hi, [])
        page._sections = None
        page._keys = keys
        page._stored = values
        page._firsts = array("Q", map(seq_from_key, keys))
        return page

    @property
    def decoded(self) -> bool:
        """Whether the page holds its sections decoded (what `cost` says it takes)."""
        return self._sections is not None

    @property
    def sections(self) -> list[Section]:
        """Its sections, in sequence order; decoded now if not yet (the page's cost grows)."""
        if self._sections is None:
            self._sections = list(map(stored_section, self._keys, self._stored))
            self._keys, self._stored, self._firsts = [], [], array("Q")
        return self._sections

    def cost(self) -> int:
        """About how many bytes of memory the page takes. Stored entries: a key string and a
        bytes object each, and a sequence (tracemalloc: 55.9 KB for 129 entries of 274 B,
        where decoded they take 174 KB; 777 B for the one entry a lookup reads, most of it
        the page's own lists and array)."""
        if self._sections is None:
            stored = sum(map(len, self._stored)) + sum(map(len, self._keys))
            return 350 + stored + 121 * len(self._stored)
        return 200 + sum(s.cost() for s in self._sections)

    def find(self, seq: int) -> Section | None:
        if self._sections is None:
            i = bisect_right(self._firsts, seq) - 1
            if i < 0:
                return None
            section = stored_section(self._keys[i], self._stored[i])
            return section if section.last >= seq else None
        sections = self._sections
        i = bisect_left(sections, seq, key=_last_of)
        if i < len(sections) and sections[i].first <= seq:
            return sections[i]
        return None


def stored_section(key: str, value: bytes) -> Section:
    """The summary of the section whose `SectionEntry` is stored at `key` as `value`."""
    entry = decode_section(value)
    # Held for as long as the section is: the same few subjects for every entry.
    entry.names = tuple(map(intern, entry.names))
    return section_of(key, entry)[0]


def _last_of(section: Section) -> int:
    return section.last


class SectionPages:
    """The pages of a stream's sections an agent has read, in sequence order, not overlapping."""

    __slots__ = ("_los", "pages")

    def __init__(self) -> None:
        self.pages: list[Page] = []
        self._los: list[int] = []

    def __len__(self) -> int:
        return len(self.pages)

    def page_at(self, seq: int) -> Page | None:
        i = bisect_left(self._los, seq + 1) - 1
        if i >= 0 and self.pages[i].hi >= seq:
            return self.pages[i]
        return None

    def neighbours(self, seq: int) -> tuple[Page | None, Page | None]:
        """The pages just before and just after `seq`, which no page covers."""
        i = bisect_left(self._los, seq + 1)
        return (self.pages[i - 1] if i else None), (self.pages[i] if i < len(self.pages) else None)

    def add(self, page: Page) -> None:
        i = bisect_left(self._los, page.lo)
        self.pages.insert(i, page)
        self._los.insert(i, page.lo)

    def remove(self, page: Page) -> None:
        i = bisect_left(self._los, page.lo)
        if i < len(self.pages) and self.pages[i] is page:
            del self.pages[i]
            del self._los[i]

    def last_page(self) -> Page | None:
        return self.pages[-1] if self.pages else None

    def all_sections(self) -> list[Section]:
        return [s for page in self.pages for s in page.sections]
