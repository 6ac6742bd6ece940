"""How many times an SQLite store's loop connection read keys for a commit's compares.

    reads = CompareReads(store)
    await store.txn([Compare("g/a", 1)], [Put("g/a", b"2")])
    assert reads() == 0    # answered from what the commit before left

A statement trace on the connection that makes the loop's commits: the compares' read is the
one query of a commit that selects keys with their revisions.
"""

from __future__ import annotations

from infinistream.metadata import SqliteMetadataStore

COMPARES_READ = "SELECT key, mod_revision"


class CompareReads:
    def __init__(self, store: SqliteMetadataStore) -> None:
        self.traced: list[str] = []
        store._loop.connection().set_trace_callback(self.traced.append)

    def __call__(self) -> int:
        """The compares' reads since the last call."""
        count = sum(1 for sql in self.traced if sql.startswith(COMPARES_READ))
        self.traced.clear()
        return count
