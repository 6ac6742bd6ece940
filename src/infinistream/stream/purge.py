"""Planning a purge: nats-server's PurgeEx semantics over a stream's planned changes."""

from __future__ import annotations

from infinistream.jetstream import errors
from infinistream.stream.changes import Changes
from infinistream.stream.records import MAX_START_SEQ


def purge(changes: Changes, filter_subject: str, up_to: int, keep: int) -> int:
    """Plan a purge; returns how many messages go.

    Without a filter (or with `>`): everything below `up_to`, or all but the newest `keep`.
    With a filter: that subject's messages, bounded the same ways.
    """
    if not filter_subject or filter_subject == ">":
        if up_to > MAX_START_SEQ:
            # It would move the stream's first sequence there (nats-server accepts it, and its
            # sequences wrap to 0 one publish past 2^64 - 1).
            raise errors.stream_purge_failed(
                f"purge sequence can not be larger than {MAX_START_SEQ}"
            )
        if keep:
            if changes.msgs <= keep:
                return 0
            # Keep the newest `keep` live messages: counted back from the end.
            return changes.kill_below(_newest(changes, keep))
        target = up_to if up_to else changes.last_seq + 1
        return changes.kill_below(target)
    view = changes.view
    candidates = [
        s for s in view.live_seqs(changes.first_seq, filter_subject) if changes.is_live(s)
    ]
    if up_to:
        candidates = [s for s in candidates if s < up_to]
    if keep:
        candidates = candidates[: max(0, len(candidates) - keep)]
    purged = 0
    for seq in candidates:
        if changes.kill(seq):
            purged += 1
    return purged


def _newest(changes: Changes, keep: int) -> int:
    """The oldest of the newest `keep` live messages."""
    seq = changes.last_seq
    while True:
        if changes.is_live(seq):
            keep -= 1
            if not keep:
                return seq
        seq -= 1
