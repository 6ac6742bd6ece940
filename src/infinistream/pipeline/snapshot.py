"""What a job reads of a group's metadata besides single streams (`stream/loader.py` reads a
stream consistently), and how its synchronous driver or executor code runs library coroutines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from infinistream.metadata.kv import MetadataStore
from infinistream.stream.records import StreamKeys, decode_entry, streams_prefix

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run async library code from a job's synchronous driver or executor code."""
    return asyncio.run(coro)


async def stream_names(meta: MetadataStore, group: str) -> list[str]:
    prefix = streams_prefix(group)
    return [item.key[len(prefix) :] for item in await meta.range(prefix, keys_only=True)]


async def referenced_objects(meta: MetadataStore, group: str) -> set[str]:
    """Every object some index entry of some stream of the group points at."""
    referenced: set[str] = set()
    for name in await stream_names(meta, group):
        keys = StreamKeys(group, name)
        for item in await meta.range(keys.index_prefix):
            referenced.add(decode_entry(item.value).obj)
    return referenced
