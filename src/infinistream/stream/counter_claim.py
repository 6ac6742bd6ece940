"""What a counter increment claims when it is committed (see stream.counters).

A counter message's body holds the counter's value after it, computed from the subject's last
message before the object is written. The commit takes it only while that message is still
the subject's last: the claim is checked in the commit's plan, against the stream as the
commit transaction sees it, so two agents incrementing at once never both build on the same
value (the one that loses is computed again on the new last value).
"""

from __future__ import annotations

import msgspec


class CounterClaim(msgspec.Struct, gc=False):
    # The subject's last sequence the value was computed from (0: the subject had none).
    base: int
    # Computed from the counter message of the same subject just before it in the same
    # write: the claim holds if that one was stored and is still the subject's last.
    chained: bool
    # The counter's value once this message is stored: the PubAck's `val`.
    value: str
    # Whatever the counter path keeps to answer or retry the increment.
    ticket: object = None
