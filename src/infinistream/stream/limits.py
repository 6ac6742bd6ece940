"""A stream's limits, applied to planned changes: one implementation for every path.

Publishing applies them message by message (or once after a plain batch), an update that
tightens them applies them at once, and expiry and the janitor apply them to streams nobody
publishes to. All of them call these functions on a `Changes`, so the limits bite the same way
whichever path changes the stream.
"""

from __future__ import annotations

import time

from infinistream.jetstream.api import StreamConfig
from infinistream.stream.catalog import StreamEntry
from infinistream.stream.changes import Changes


def evict_for_count_and_size(cfg: StreamConfig, changes: Changes) -> None:
    """Evict the oldest messages while the stream is over max_msgs or max_bytes."""
    if cfg.max_msgs > 0:
        while changes.msgs > cfg.max_msgs:
            changes.evict_oldest()
    if cfg.max_bytes > 0:
        while changes.bytes > cfg.max_bytes and changes.msgs:
            changes.evict_oldest()


def trim_subject(changes: Changes, subject: str, keep: int) -> None:
    """Delete a subject's oldest messages until at most `keep` are live."""
    while changes.live_count(subject) > keep:
        changes.kill(changes.oldest_for(subject))


def enforce_limits(entry: StreamEntry, changes: Changes) -> None:
    """Apply the stream's count, size, age and per-subject limits to what is stored."""
    cfg = entry.config
    if cfg.max_msgs_per_subject > 0:
        for subject in changes.view.subjects_matching(""):
            trim_subject(changes, subject, cfg.max_msgs_per_subject)
    # With discard new nats-server never evicts for the count and size limits (its stores'
    # enforceMsgLimit / enforceBytesLimit return early), even when an update lowers them.
    if cfg.discard == "old":
        evict_for_count_and_size(cfg, changes)
    expire(entry, changes, time.time_ns())


def expire(entry: StreamEntry, changes: Changes, now: int) -> None:
    """Evict the messages older than the stream's max_age.

    Not those whose TTL says never; and with subject delete markers, not the last message of a
    subject, which the expiry job replaces with a marker (stream.expiry).
    """
    cfg = entry.config
    if cfg.max_age <= 0:
        return
    cutoff = now - cfg.max_age
    view = changes.view
    markers = cfg.subject_delete_marker_ttl > 0
    if not view.nevers() and not markers:
        # Whole sections first (their last timestamp says), then message by message.
        whole = 0
        for section in view.sections_from(changes.first_seq):
            if section.last_ts > cutoff:
                break
            whole = section.last + 1
        if whole:
            changes.kill_below(whole)
        while (
            changes.msgs
            and changes.first_seq <= view.last_seq
            and view.ts_of(changes.first_seq) <= cutoff
        ):
            changes.evict_oldest()
        return
    for seq in view.live_seqs(changes.first_seq):
        if view.ts_of(seq) > cutoff:
            break
        if not changes.is_live(seq) or changes.is_never(seq):
            continue
        if markers and changes.last_for(view.subject_of(seq)) == seq:
            continue
        changes.kill(seq)
