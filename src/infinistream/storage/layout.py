"""Where objects live in the object store: the one place that builds and parses their keys.

    {group}/objects/l0/{time:020d}-{agent}-{n:08d}-{nonce}.iso    a flush (one agent's batch)
    {group}/objects/l{level}/{time:020d}-c{token}.iso             compaction output (level >= 1)
    {group}/objects/l{level}/{time:020d}-r{token}.iso             a rewrap (key rotation) of an
                                                                   object of that level and time

`time` is when the object was written, in nanoseconds since the epoch, zero-padded so that
keys sort by it: the janitor lists a level in ranges of time, and compaction and the janitor
read an object's age from its key without a HEAD request. A flush's object holds a section per
stream of the batch; a compacted one holds one stream's section. Keys are unique by
construction (the agent's id and counter and a nonce, or a random token), so write-once puts
do not collide.
"""

from __future__ import annotations

import re

__all__ = [
    "compacted_key",
    "is_objects_prefix",
    "l0_key",
    "level_of",
    "level_prefix",
    "objects_prefix",
    "rewrapped_key",
    "time_floor",
    "written_ns_of",
]

# A key as this module builds it: in a level, a name that starts with its time.
_LEVELED = re.compile(r"/objects/l(\d+)/(\d{20})-[^/]*$")


def objects_prefix(group: str) -> str:
    """Every object of the group lies under this prefix (it has no trailing `/`)."""
    return f"{group}/objects"


def is_objects_prefix(prefix: str) -> bool:
    """Whether `prefix` is a group's objects prefix itself rather than one under it (a group's
    name holds no `/`)."""
    return prefix.count("/") == 1


def level_prefix(group: str, level: int) -> str:
    """The objects of one level: 0 for flushes, 1 and up for compaction output."""
    return f"{objects_prefix(group)}/l{level}"


def time_floor(prefix: str, time_ns: int) -> str:
    """The smallest key under a level prefix of an object written at `time_ns` or later."""
    return f"{prefix}/{time_ns:020d}"


def l0_key(group: str, time_ns: int, agent_id: str, n: int, nonce: str) -> str:
    """The key of a flush's object: the `n`th that agent `agent_id` wrote, at `time_ns`."""
    return f"{time_floor(level_prefix(group, 0), time_ns)}-{agent_id}-{n:08d}-{nonce}.iso"


def compacted_key(group: str, level: int, written_ns: int, token: str) -> str:
    """The key of an object that compaction wrote into `level` (1 or more) at `written_ns`."""
    return f"{time_floor(level_prefix(group, level), written_ns)}-c{token}.iso"


def rewrapped_key(old: str, written_ns: int, token: str) -> str:
    """The key of the copy of object `old` whose data keys a key rotation wrapped anew: same
    group and level, and `old`'s time when its name has one (so compaction and the janitor
    see the copy as old as the original)."""
    group = old.split("/", 1)[0]
    when = written_ns_of(old) or written_ns
    return f"{time_floor(level_prefix(group, level_of(old)), when)}-r{token}.iso"


def level_of(key: str) -> int:
    """The level of an object: n for a key `.../objects/ln/{time}-...`, 0 for any other key."""
    m = _LEVELED.search(key)
    return int(m.group(1)) if m else 0


def written_ns_of(key: str) -> int | None:
    """When the object was written, from the time its name starts with (`{time:020d}-...`);
    None if its name carries no time."""
    head = key.rsplit("/", 1)[-1].split("-", 1)[0]
    return int(head) if len(head) == 20 and head.isdecimal() else None
