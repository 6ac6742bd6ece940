"""The push directory: which push consumers deliver to which subjects, for every agent to read.

An agent serves a push consumer where one of its own clients subscribes to the consumer's
deliver subject. That client may subscribe on one agent to a consumer created through another
(a deliver group spread over agents), or come back to another agent after its own died; the
directory in metadata tells any agent which deliver subjects belong to which push consumers.
Its entries change in the transaction that changes the consumer's record, together with a
marker key, so an agent rereads the directory only when the marker moved. Like every other
view an agent has, it is a cache of metadata and can be dropped at any time.
"""

from __future__ import annotations

import os

from infinistream.consumer.records import (
    ConsumerKeys,
    PushTarget,
    decode_push_target,
    encode,
    push_marker,
    push_prefix,
)
from infinistream.jetstream.subjects import is_literal, matches
from infinistream.metadata.kv import Delete, MetadataStore, Op, Put

ConsumerId = tuple[str, str]  # (stream, consumer)


def target_ops(
    group: str, keys: ConsumerKeys, old: PushTarget | None, new: PushTarget | None
) -> list[Op]:
    """What keeps the directory in step when a consumer's target goes from `old` to `new`
    (None: not a push consumer, or deleted); nothing when it stays the same."""
    if old == new:
        return []
    change: Op = Put(keys.push, encode(new)) if new is not None else Delete(keys.push)
    return [change, marker_op(group)]


def marker_op(group: str) -> Op:
    """Tells every agent that the directory changed."""
    return Put(push_marker(group), os.urandom(8).hex().encode())


class PushDirectory:
    def __init__(self, meta: MetadataStore, group: str) -> None:
        self.meta = meta
        self.group = group
        self.targets: dict[ConsumerId, PushTarget] = {}
        self._by_subject: dict[str, set[ConsumerId]] = {}
        self._marker_rev = -1

    async def refresh(self) -> list[ConsumerId]:
        """Reread the directory if it changed; the consumers whose target is new or moved."""
        marker = await self.meta.get(push_marker(self.group))
        rev = marker.mod_revision if marker is not None else 0
        if rev == self._marker_rev:
            return []
        prefix = push_prefix(self.group)
        items = await self.meta.range(prefix)
        targets: dict[ConsumerId, PushTarget] = {}
        for item in items:
            stream, _, name = item.key[len(prefix) :].partition("/")
            targets[(stream, name)] = decode_push_target(item.value)
        changed = [cid for cid, t in targets.items() if self.targets.get(cid) != t]
        self._replace(targets)
        self._marker_rev = rev
        return changed

    def set(self, stream: str, name: str, target: PushTarget | None) -> None:
        """This agent just committed a change to a consumer's target."""
        cid = (stream, name)
        old = self.targets.pop(cid, None)
        if old is not None:
            at = self._by_subject.get(old.deliver_subject)
            if at is not None:
                at.discard(cid)
                if not at:
                    del self._by_subject[old.deliver_subject]
        if target is not None:
            self.targets[cid] = target
            self._by_subject.setdefault(target.deliver_subject, set()).add(cid)

    def target(self, stream: str, name: str) -> PushTarget | None:
        return self.targets.get((stream, name))

    def delivering_to(self, subscribed: str) -> list[ConsumerId]:
        """The consumers whose deliver subject a subscription to `subscribed` receives."""
        if is_literal(subscribed):
            return sorted(self._by_subject.get(subscribed, ()))
        return sorted(
            cid
            for subject, cids in self._by_subject.items()
            if matches(subscribed, subject)
            for cid in cids
        )

    def _replace(self, targets: dict[ConsumerId, PushTarget]) -> None:
        by_subject: dict[str, set[ConsumerId]] = {}
        for cid, target in targets.items():
            by_subject.setdefault(target.deliver_subject, set()).add(cid)
        self.targets = targets
        self._by_subject = by_subject
