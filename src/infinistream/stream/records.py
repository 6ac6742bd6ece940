"""What a stream keeps in the metadata store, and where.

Per stream, under the virtual group:

    {group}/streams/{name}            StreamRecord: config, creation time, incarnation id
    {group}/sd/{name}/state           StreamState: the compare-and-set point of every change
    {group}/sd/{name}/i/{first_seq}   SectionEntry: one section of one object, a run of sequences
                                      (IndexEntry in stores written before record directories)
    {group}/sd/{name}/p/{subject}     SubjectRecord: a subject's first and last sequence, count
    {group}/sd/{name}/t/{seq}         tombstone of a message deleted inside the live range
    {group}/sd/{name}/m/{msg_id}      DedupeEntry for Nats-Msg-Id within the duplicate window
    {group}/sd/{name}/x/{expires}{seq} a message with a TTL, due at `expires` (ns)
    {group}/sd/{name}/n/{seq}         a message whose TTL says never (exempt from max_age)
    {group}/sd/{name}/s/{due}{seq}    a message holding a schedule, next due at `due` (ns)

No payloads live here (invariant 5): an index entry holds subjects, counts and the object
location, never message bytes.

What metadata keeps of a stream does not grow with its length: one `SectionEntry` per section
(its object and range, its sequence and time bounds, counts, and a summary of its subjects),
while what each record is (subject, length, time, sequence) lives in the section's record
directory in the object (`storage.directory`), and per-subject state in one `SubjectRecord` per
subject. Stores written before that hold `IndexEntry` values, with every record's subject and
length: they are read as ever, and compaction (or `pipeline index`) rewrites them.
"""

from __future__ import annotations

from array import array

import msgspec

from infinistream.jetstream.api import StreamConfig

SEQ_WIDTH = 20
# The highest sequence a purge or a config's first_seq may start a stream at. Sequences are
# stored as uint64, and nats-server wraps past 2^64 - 1 to 0; starting no higher than this
# leaves room for 2^63 publishes, so a stream's next sequence can always be written.
MAX_START_SEQ = 2**63 - 1


class StreamRecord(msgspec.Struct, kw_only=True):
    config: StreamConfig
    created_ns: int
    # A new id each time a stream of this name is created, so that an agent holding a view of
    # a deleted stream notices that a same-named stream is a different one.
    uid: str
    # When an update last changed the config (0: never): where a republish turned on by an
    # update starts.
    updated_ns: int = 0


class StreamState(msgspec.Struct, kw_only=True):
    uid: str
    first_seq: int
    last_seq: int
    first_ts: int = 0
    last_ts: int = 0
    msgs: int = 0
    bytes: int = 0
    num_subjects: int = 0
    num_deleted: int = 0
    # Bumped whenever tombstones are written, so a reader knows when to rescan them.
    tomb_rev: int = 0
    last_msg_id: str = ""
    # Bumped when compaction replaces index entries, so views reload where messages live.
    layout: int = 0
    # Bumped whenever the set of never-expiring messages changes (see `never` keys).
    never_rev: int = 0
    # 1 when the stream's subject records (`p/` keys) are exact as of this state: every agent
    # that knows them keeps them so at each commit. An agent of an earlier version rewrites
    # the state without this field (it does not know it), which is how agents learn that the
    # records may have fallen behind and must be built again.
    subject_records: int = 0


class IndexEntry(msgspec.Struct, kw_only=True, array_like=True):
    """One section of one object, holding the records of a run of consecutive sequences."""

    obj: str
    offset: int
    length: int
    first_seq: int
    # Timestamp of the first message; message i of the run is stamped ts + i nanoseconds.
    ts: int
    subjects: list[str]
    # Per record in the section: index into `subjects` and encoded length (u32 arrays).
    subject_ids: bytes
    lengths: bytes
    # Records in the section that were refused at commit (dedupe, expected-* checks, limits)
    # and so hold no sequence.
    skipped: list[int] = msgspec.field(default_factory=list)
    # Compacted sections hold only live records, so their sequences may have gaps: then the
    # sequence and timestamp of every record are listed (u64 arrays) instead of derived.
    seqs: bytes = b""
    timestamps: bytes = b""
    # How the section is stored (storage.codec): for a compressed one, `offset` and `length`
    # are those of the stored bytes, read whole, while `lengths` (and so record offsets) are
    # those of the plain records.
    codec: int = 0
    # Per record: the bytes the message counts for in the stream (stream.sizes, u32s); empty
    # in entries written before they were kept.
    sizes: bytes = b""

    def plain_length(self) -> int:
        """Bytes of records in the section, before any codec."""
        return sum(self.length_array()) if self.codec else self.length

    def subject_id_array(self) -> array[int]:
        return _array_of("I", self.subject_ids)

    def length_array(self) -> array[int]:
        return _array_of("I", self.lengths)

    def seq_array(self) -> array[int] | None:
        return _array_of("Q", self.seqs) if self.seqs else None

    def timestamp_array(self) -> array[int] | None:
        return _array_of("Q", self.timestamps) if self.timestamps else None


def _array_of(typecode: str, raw: bytes) -> array[int]:
    """The integers an entry keeps as bytes (u32s "I", u64s "Q", native order)."""
    values = array(typecode)
    values.frombytes(raw)
    return values


SECTION_FORMAT = 2


class SectionEntry(msgspec.Struct, kw_only=True, array_like=True, gc=False):
    """One section of one object, in the form that keeps metadata small: where it is, what
    sequences and times it holds, how many records and bytes, and a summary of its subjects;
    each record's detail is in the section's record directory (`storage.directory`), the
    `dir_length` bytes right after the section's stored bytes.

    Record i of the section that holds a sequence has, unless `explicit`, the sequence
    `first_seq + i` and the timestamp `ts + i` (counting only records that hold one: those at
    the `skipped` positions were refused at commit); with `explicit`, both come from the
    directory (compaction, which leaves gaps; or a writer that took them from an origin).

    An agent holds one per section it caches, and nothing in it can refer back to it: not
    tracked by the cyclic collector (`gc=False`), its lists tuples, which the collector stops
    tracking at their first collection.
    """

    format: int = SECTION_FORMAT
    obj: str
    offset: int
    length: int
    codec: int = 0
    # Bytes of all the section's records (skipped ones too) before any codec.
    plain_length: int
    dir_length: int
    # Records in the section, skipped ones too.
    records: int
    first_seq: int
    last_seq: int
    # Records that hold a sequence, their plain bytes, and how many of them have headers
    # (what a message's size as nats-server counts it needs beyond the record's length).
    count: int
    size: int
    hdrs: int = 0
    ts: int
    last_ts: int
    skipped: tuple[int, ...] = ()
    explicit: bool = False
    # The subject summary (stream.summary): names and counts, or a filter, or neither.
    names: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()
    bloom: bytes = b""
    bloom_k: int = 0
    # The CRC-32 of the directory's stored bytes (the object's TOC has it too), so that bytes a
    # peer (the zone cache) gave can be checked without reading the TOC; 0: not known.
    dir_crc: int = 0

    @property
    def dir_offset(self) -> int:
        return self.offset + self.length


Entry = IndexEntry | SectionEntry


class SubjectRecord(msgspec.Struct, array_like=True):
    """A subject's live messages in a stream: how many, and bounds on the first and last.

    `count` is exact. `first` is at or below the subject's first live sequence and `last` at
    or above its last: a commit that deletes a subject's first or last message need not look
    for the next one (nats-server's psim marks such bounds for a later update the same way);
    a reader that needs the exact one walks from the bound, and a commit that does writes the
    tighter bound back."""

    first: int
    last: int
    count: int


class DedupeEntry(msgspec.Struct, array_like=True):
    seq: int
    ts: int


class StreamKeys:
    """The metadata keys of one stream."""

    __slots__ = (
        "config",
        "dedupe_prefix",
        "expiry_prefix",
        "group",
        "index_prefix",
        "never_prefix",
        "prefix",
        "schedule_prefix",
        "state",
        "stream",
        "subject_prefix",
        "tomb_prefix",
    )

    def __init__(self, group: str, stream: str) -> None:
        self.group = group
        self.stream = stream
        self.config = f"{streams_prefix(group)}{stream}"
        self.prefix = f"{group}/sd/{stream}/"
        self.state = self.prefix + "state"
        self.index_prefix = self.prefix + "i/"
        self.tomb_prefix = self.prefix + "t/"
        self.dedupe_prefix = self.prefix + "m/"
        self.expiry_prefix = self.prefix + "x/"
        self.never_prefix = self.prefix + "n/"
        self.schedule_prefix = self.prefix + "s/"
        self.subject_prefix = self.prefix + "p/"

    def index(self, first_seq: int) -> str:
        return f"{self.index_prefix}{first_seq:0{SEQ_WIDTH}d}"

    def tomb(self, seq: int) -> str:
        return f"{self.tomb_prefix}{seq:0{SEQ_WIDTH}d}"

    def dedupe(self, msg_id: str) -> str:
        return self.dedupe_prefix + msg_id

    def expiry(self, expires_ns: int, seq: int = 0) -> str:
        """A message's expiry entry. With seq 0 a bound: every entry due at `expires_ns` or
        later sorts at or after it."""
        return f"{self.expiry_prefix}{expires_ns:0{SEQ_WIDTH}d}{seq:0{SEQ_WIDTH}d}"

    def subject(self, subject: str) -> str:
        return self.subject_prefix + subject

    def never(self, seq: int) -> str:
        return f"{self.never_prefix}{seq:0{SEQ_WIDTH}d}"

    def schedule(self, due_ns: int, seq: int = 0) -> str:
        """When the schedule held by message `seq` is next due. With seq 0 a bound, as for
        `expiry`."""
        return f"{self.schedule_prefix}{due_ns:0{SEQ_WIDTH}d}{seq:0{SEQ_WIDTH}d}"


def streams_prefix(group: str) -> str:
    return f"{group}/streams/"


def catalog_key(group: str) -> str:
    """Bumped by every stream create, update and delete, so agents notice catalog changes."""
    return f"{group}/catalog"


def catalog_change(previous: int, stream: str) -> bytes:
    """The catalog marker's value: the marker revision this change replaced, and its stream.

    Every writer compares the marker's revision, so the values chain: an agent whose catalog is
    at `previous` reads only `stream`'s record, not a listing of every stream (which made
    creating N streams cost O(N^2) reads).
    """
    return f"{previous} {stream}".encode()


def parse_catalog_change(value: bytes) -> tuple[int, str] | None:
    """(previous revision, stream) of a marker value; None for a value of another form."""
    previous, sep, stream = value.decode(errors="replace").partition(" ")
    if not sep or not previous.isdigit() or not stream:
        return None
    return int(previous), stream


def seq_from_key(key: str) -> int:
    return int(key[-SEQ_WIDTH:])


def stream_of_index_key(key: str) -> str:
    """The stream an index entry's key `{group}/sd/{stream}/i/{first_seq}` belongs to."""
    return key.rsplit("/", 3)[-3]


def due_from_key(key: str) -> int:
    """The time an expiry or schedule entry is due."""
    return int(key[-2 * SEQ_WIDTH : -SEQ_WIDTH])


_record_encoder = msgspec.msgpack.Encoder()
encode = _record_encoder.encode
decode_record = msgspec.msgpack.Decoder(StreamRecord).decode
decode_state = msgspec.msgpack.Decoder(StreamState).decode
decode_index = msgspec.msgpack.Decoder(IndexEntry).decode
decode_section = msgspec.msgpack.Decoder(SectionEntry).decode
decode_dedupe = msgspec.msgpack.Decoder(DedupeEntry).decode
decode_subject = msgspec.msgpack.Decoder(SubjectRecord).decode


def is_section_entry(value: bytes) -> bool:
    """Whether the stored index entry `value` is a `SectionEntry`: one starts with its format
    number, an `IndexEntry` with its object's name (msgpack: an int, or a str, after the
    array header)."""
    head = value[0] if value else 0
    at = 1 if 0x90 <= head <= 0x9F else 3 if head == 0xDC else 5 if head == 0xDD else 1
    return at < len(value) and value[at] <= 0x7F


def decode_entry(value: bytes) -> Entry:
    """An index entry of either form (see `is_section_entry`)."""
    return decode_section(value) if is_section_entry(value) else decode_index(value)
