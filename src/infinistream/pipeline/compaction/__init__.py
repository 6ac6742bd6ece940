"""Compaction: many small multi-stream objects -> large per-stream ones.

The driver reads a snapshot of each stream from metadata and plans chunks: runs of
consecutive index entries whose objects are older than `--min-age`, about `--target-size` of
live messages each (`plan`). Spark tasks read the chunks' sections, drop deleted and expired
messages and write one new object per chunk (`tasks`). The driver then swaps each chunk's index
entries in one compare-and-set transaction (`swap`), so a range that changed meanwhile is
skipped rather than brought back. Readers see every message exactly once throughout: until the
swap the old entries and objects serve them, after it the new ones do, and nothing is deleted
here (old objects are the janitor's, after its grace period). `job` runs it all as
`infinistream pipeline compact`; `report` measures what it saves.
"""
