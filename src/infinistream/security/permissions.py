"""Deciding what a user may publish and subscribe to (nats-server's client.go pubAllowed and
canSubscribe, with its sublist's matching).

A pattern's `*` matches any one token and `>` one or more trailing tokens; a subscription's
own wildcards are tokens like any other (so `foo.*` allows subscribing to `foo.>`, as on
nats-server). Publish decisions are cached per subject, bounded, as nats-server does: the
same few subjects are published over and over, and a lookup is cheaper than the match.
Subscription permissions may name a queue group (`"orders workers"`): such an entry allows
(or denies) only that queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from infinistream.security.identity import Permissions, SubjectPermission

# nats-server's maxPermCacheSize and the share of it pruned when full.
PUB_CACHE_SIZE = 128
PUB_CACHE_PRUNE = 32
# Reply subjects remembered for allow_responses (nats-server prunes its map similarly).
MAX_REPLIES = 10_000


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether `pattern` (with wildcards) matches `subject`, token by token."""
    if pattern == subject:
        return True
    p = pattern.split(".")
    s = subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s):
            return False
        if token != "*" and token != s[i]:
            return False
    return len(p) == len(s)


@dataclass(frozen=True, slots=True)
class _Entries:
    """One allow or deny list, split into plain subjects and `subject queue` entries."""

    subjects: tuple[str, ...]
    queues: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, entries: Sequence[str]) -> _Entries:
        subjects: list[str] = []
        queues: list[tuple[str, str]] = []
        for entry in entries:
            parts = entry.split()
            if len(parts) == 2:
                queues.append((parts[0], parts[1]))
            else:
                subjects.append(entry)
        return cls(tuple(subjects), tuple(queues))

    def matches(self, subject: str) -> bool:
        return any(subject_matches(p, subject) for p in self.subjects)

    def queue_entries(self, subject: str) -> list[str]:
        return [q for p, q in self.queues if subject_matches(p, subject)]


def _queue_matches(queue: str, patterns: list[str]) -> bool:
    return any(subject_matches(p, queue) for p in patterns)


@dataclass
class _Direction:
    allow: _Entries | None
    deny: _Entries

    @classmethod
    def of(cls, permission: SubjectPermission | None) -> _Direction | None:
        if permission is None:
            return None
        allow = _Entries.of(permission.allow) if permission.allow is not None else None
        return cls(allow, _Entries.of(permission.deny))


@dataclass
class PermissionChecker:
    """One connection's permissions, with its caches and the replies it may answer."""

    permissions: Permissions
    clock: Callable[[], float] = time.monotonic
    _publish: _Direction | None = field(init=False)
    _subscribe: _Direction | None = field(init=False)
    _cache: dict[str, bool] = field(default_factory=dict, init=False)
    # allow_responses: reply subject -> [answers left (negative: no limit), deadline].
    _replies: dict[str, list[float]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._publish = _Direction.of(self.permissions.publish)
        self._subscribe = _Direction.of(self.permissions.subscribe)

    @property
    def tracks_replies(self) -> bool:
        return self.permissions.responses is not None

    def may_publish(self, subject: str) -> bool:
        allowed = self._cache.get(subject)
        if allowed is None:
            allowed = self._decide_publish(subject)
            if len(self._cache) >= PUB_CACHE_SIZE:
                for key in list(self._cache)[:PUB_CACHE_PRUNE]:
                    del self._cache[key]
            self._cache[subject] = allowed
        if allowed:
            return True
        return bool(self._replies) and self._answer(subject)

    def _decide_publish(self, subject: str) -> bool:
        direction = self._publish
        if direction is None:
            return True
        if direction.allow is not None and not direction.allow.matches(subject):
            return False
        return not direction.deny.matches(subject)

    def may_subscribe(self, subject: str, queue: str | None = None) -> bool:
        direction = self._subscribe
        if direction is None:
            return True
        allowed = True
        if direction.allow is not None:
            allowed = direction.allow.matches(subject)
            if queue:
                queues = direction.allow.queue_entries(subject)
                if queues:
                    allowed = _queue_matches(queue, queues)
        if allowed:
            allowed = not direction.deny.matches(subject)
            if allowed and queue:
                queues = direction.deny.queue_entries(subject)
                if queues:
                    allowed = not _queue_matches(queue, queues)
        return allowed

    # -- allow_responses -------------------------------------------------------------------

    def delivered_reply(self, reply: str) -> None:
        """A message with this reply subject was delivered to the client: it may answer."""
        responses = self.permissions.responses
        if responses is None or reply in self._replies:
            return
        if len(self._replies) >= MAX_REPLIES:
            self._prune()
        deadline = self.clock() + responses.expires if responses.expires > 0 else float("inf")
        self._replies[reply] = [responses.max_msgs, deadline]

    def _answer(self, subject: str) -> bool:
        entry = self._replies.get(subject)
        if entry is None:
            return False
        left, deadline = entry
        if self.clock() > deadline:
            del self._replies[subject]
            return False
        if left > 0:
            entry[0] = left - 1
            if entry[0] == 0:
                del self._replies[subject]
        return True

    def _prune(self) -> None:
        now = self.clock()
        for reply, (_, deadline) in list(self._replies.items()):
            if now > deadline:
                del self._replies[reply]
        if len(self._replies) >= MAX_REPLIES:
            # Still full: forget the oldest half.
            for reply in list(self._replies)[: MAX_REPLIES // 2]:
                del self._replies[reply]
