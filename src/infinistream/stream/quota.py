"""An account's `max_file`, held at publish time as nats-server holds it: a message that would
take the account's stored bytes past its limit is refused (10002, resource limits exceeded
for account) and stored nowhere.

The account's stored bytes are the sum of its streams' states, read again now and then
(`refresh`), plus what this agent's write buffer settled since that read and what it holds
unsettled: exact for one agent, and for several agents as fresh as the last refresh. Bytes
are what each message counts for in its stream (stream.sizes), the measure stream states
keep: the write buffer counts its record bytes, so what this quota admitted adds the
difference until the next read.
"""

from __future__ import annotations

from infinistream.jetstream.accounts import AccountPolicy
from infinistream.stream.catalog import Catalog
from infinistream.stream.records import decode_state
from infinistream.stream.write_buffer import WriteBuffer

__all__ = ["StorageQuota"]


class StorageQuota:
    def __init__(self, policy: AccountPolicy, catalog: Catalog, write_buffer: WriteBuffer) -> None:
        self.policy = policy
        self.catalog = catalog
        self.write_buffer = write_buffer
        # The account's stored bytes as last read, and the write buffer's settled bytes then.
        self._stored = 0
        self._settled_at_read = 0
        # Whether the stored bytes were read at all: until then nothing is admitted on a guess.
        self.ready = False
        # What the messages admitted since the last read count for beyond their record bytes.
        self._extra = 0

    @property
    def limit(self) -> int:
        """The account's max_file; -1 for none."""
        return self.policy.limits.max_file

    def usage(self) -> int:
        """The account's bytes: stored, and on their way."""
        wb = self.write_buffer
        on_the_way = wb.settled_bytes - self._settled_at_read + wb.unsettled_bytes
        return self._stored + on_the_way + self._extra

    def admits(self, size: int, record_length: int) -> bool:
        """Whether a message that counts for `size` bytes (and takes `record_length` in the
        write buffer) fits; if it does, it is counted from now on."""
        if self.usage() + size > self.limit:
            return False
        self._extra += size - record_length
        return True

    async def refresh(self) -> None:
        if self.limit < 0:
            # Nothing to hold the account to: no reads (a reload that sets a limit makes the
            # next publish wait for one).
            self.ready = False
            return
        # Taken before the read: what settles during it may be counted twice until the next
        # refresh, never missed.
        settled = self.write_buffer.settled_bytes
        extra = self._extra
        catalog = self.catalog
        await catalog.refresh()
        keys = [entry.keys.state for entry in catalog.streams.values()]
        items = await catalog.meta.get_many(keys)
        self._stored = sum(decode_state(item.value).bytes for item in items.values())
        self._settled_at_read = settled
        self._extra -= extra
        self.ready = True
