"""Which streams have their sections compressed: `compression: s2` in the stream config.

nats-server's S2 is internal to its file store, so a stream asking for "s2" gets the object
format's compressed sections (storage.codec: Zstandard), and its config and info say "s2" as
nats-server's do. The codec travels with each section (in the object's TOC and the index entry
in metadata), never inferred from the config: a stream whose compression is changed by an
update keeps its older sections readable as they were written, and the next flush uses the new
setting.
"""

from __future__ import annotations

from infinistream.jetstream.api import StreamConfig
from infinistream.storage import CODEC_NONE, CODEC_ZSTD
from infinistream.stream.catalog import Catalog


def section_codec(config: StreamConfig) -> int:
    """The codec that the sections of a stream with this config are written with."""
    return CODEC_ZSTD if config.compression == "s2" else CODEC_NONE


class StreamCodecs:
    """The write buffer's question, once per stream per flush: how is this stream stored?

    Answered from the catalog's cached configs; a stream this agent has not heard of yet (or
    any more) is written uncompressed, which every reader reads.
    """

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def __call__(self, stream: str) -> int:
        entry = self.catalog.streams.get(stream)
        return CODEC_NONE if entry is None else section_codec(entry.config)
