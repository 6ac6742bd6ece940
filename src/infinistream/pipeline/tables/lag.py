"""How far each table is behind its streams, from metadata alone (the agents' /metrics and
console read it; they import neither pyiceberg nor Spark).

A table's record holds, per stream, the last sequence its newest commit appended and when that
message was stored; the stream's state holds its last sequence and when it was stored. The lag
is their difference: in messages (sequences, deleted ones included) and in seconds of the
stream's own time (0 when the table has everything).
"""

from __future__ import annotations

from dataclasses import dataclass

from infinistream.metadata import MetadataStore
from infinistream.pipeline.tables.progress import read_records
from infinistream.stream.records import StreamKeys, decode_state


@dataclass(frozen=True)
class TableLag:
    table: str
    stream: str
    messages: int
    seconds: float
    committed_ns: int


async def table_lags(meta: MetadataStore, group: str) -> list[TableLag]:
    out: list[TableLag] = []
    for record in await read_records(meta, group):
        for stream, mark in sorted(record.marks.items()):
            item = await meta.get(StreamKeys(group, stream).state)
            if item is None:
                continue
            state = decode_state(item.value)
            if state.uid != mark.uid:
                continue  # the stream was made again: the table holds another one
            behind = max(0, state.last_seq - mark.last_seq)
            through = record.through_ns.get(stream, 0)
            seconds = max(0.0, (state.last_ts - through) / 1e9) if behind and through else 0.0
            out.append(TableLag(record.table, stream, behind, seconds, record.committed_ns))
    return out
