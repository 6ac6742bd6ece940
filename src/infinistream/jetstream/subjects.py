"""NATS subject rules, following nats-server's server/sublist.go and jetstream.go.

A subject is a dot-separated list of non-empty tokens. A token that is exactly ``*`` matches any
single token; a token that is exactly ``>`` matches one or more tokens and must be last. A token
such as ``a*`` or ``>b`` is an ordinary literal, as in nats-server.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Generic, TypeVar

T = TypeVar("T")

PWC = "*"
FWC = ">"
# jetstream_api.go JSMaxNameLen: longest stream/consumer name, in bytes.
MAX_NAME_LEN = 255

_WHITESPACE = frozenset(" \t\n\r\f")
# isValidAssetName: names become subject tokens and file/object path components.
_NAME_FORBIDDEN = frozenset(" \t\n\r\f.*>/\\")


def is_valid_subject(subject: str, *, allow_wildcards: bool = True) -> bool:
    """IsValidSubject (or IsValidPublishSubject with ``allow_wildcards=False``)."""
    if not subject:
        return False
    tokens = subject.split(".")
    last = len(tokens) - 1
    for i, tok in enumerate(tokens):
        if len(tok) == 1:
            if tok in _WHITESPACE:
                return False
            if tok == PWC and not allow_wildcards:
                return False
            # '>' must be the last token.
            if tok == FWC and (not allow_wildcards or i != last):
                return False
        elif not tok or not _WHITESPACE.isdisjoint(tok):
            return False
    return True


def is_literal(subject: str) -> bool:
    """True if no token is a wildcard (subjectIsLiteral; does not check validity)."""
    if "*" not in subject and ">" not in subject:
        return True
    return all(tok != PWC and tok != FWC for tok in subject.split("."))


_ONE_TOKEN = r"[^.]+"
_MORE_TOKENS = r"[^.]+(?:\.[^.]+)*"


@lru_cache(maxsize=4096)
def _matcher(pattern: str) -> Callable[[str], re.Match[str] | None]:
    # A compiled regex is about twice as fast as comparing split tokens in Python, and the
    # publish path matches against the same few stream subjects and filters, hence the cache.
    parts = [
        _ONE_TOKEN if tok == PWC else _MORE_TOKENS if tok == FWC else re.escape(tok)
        for tok in pattern.split(".")
    ]
    return re.compile(r"\.".join(parts)).fullmatch


def matches(pattern: str, subject: str) -> bool:
    """True if the literal ``subject`` is matched by ``pattern`` (which may have wildcards).

    Wildcard characters in ``subject`` are compared literally. A subject with an empty token
    is never matched by a wildcard, as it is not a valid subject.
    """
    if pattern == subject:
        return True
    if "*" not in pattern and ">" not in pattern:
        return False
    return _matcher(pattern)(subject) is not None


def collide(a: str, b: str) -> bool:
    """True if some literal subject is matched by both ``a`` and ``b`` (SubjectsCollide)."""
    if a == b:
        return True
    ta = a.split(".")
    tb = b.split(".")
    for x, y in zip(ta, tb, strict=False):
        if not x or not y:
            return False
        # '>' is the last token of its pattern and the other pattern still has a token here.
        if x == FWC or y == FWC:
            return True
        if x != y and x != PWC and y != PWC:
            return False
    return len(ta) == len(tb)


def is_subset(sub: str, of: str) -> bool:
    """True if every subject matched by ``sub`` is also matched by ``of`` (subjectIsSubsetMatch).

    ``foo.*`` is a subset of ``>``, ``*.*`` and ``foo.*``, but not of ``foo.bar``.
    """
    ts = sub.split(".")
    to = of.split(".")
    for i, o in enumerate(to):
        if i >= len(ts) or not o:
            return False
        if o == FWC:
            return True
        s = ts[i]
        if not s or s == FWC:
            return False
        if s == PWC:
            if o != PWC:
                return False
        elif o != PWC and o != s:
            return False
    return len(ts) == len(to)


def is_valid_name(name: str, *, max_len: int | None = None) -> bool:
    """Stream/consumer name check (isValidAssetName).

    Names may not be empty or contain whitespace, ``.``, ``*``, ``>``, ``/`` or ``\\``. The length
    is checked only when ``max_len`` (in UTF-8 bytes, e.g. MAX_NAME_LEN) is given, because
    nats-server reports a too-long name with its own error text.
    """
    if not name or not _NAME_FORBIDDEN.isdisjoint(name):
        return False
    return max_len is None or len(name.encode()) <= max_len


class _Node(Generic[T]):
    __slots__ = ("children", "fwc", "pwc", "values")

    def __init__(self) -> None:
        self.children: dict[str, _Node[T]] = {}
        self.pwc: _Node[T] | None = None
        self.fwc: _Node[T] | None = None
        self.values: list[T] = []

    def is_empty(self) -> bool:
        return not (self.values or self.children or self.pwc or self.fwc)


class SubjectIndex(Generic[T]):
    """Maps subscription patterns to values; ``match`` finds the values for a literal subject.

    A trie over tokens (like nats-server's Sublist) with a bounded cache of results per subject.
    Inserting the same (pattern, value) twice stores it twice, and ``remove`` takes one away.
    Not thread-safe: meant for use from one event loop.
    """

    CACHE_MAX = 1024

    def __init__(self) -> None:
        self._root: _Node[T] = _Node()
        self._count = 0
        self._cache: dict[str, tuple[T, ...]] = {}
        # Changes with every insert and remove, so callers can keep their own memos.
        self.generation = 0
        # Per token count, how many patterns end in a literal token.
        self._literal_tails: dict[int, int] = {}
        # nats-server's Sublist statistics (/subsz): counted, since they cannot be derived.
        self.inserts = 0
        self.removes = 0
        self.matches = 0
        self.cache_hits = 0

    def __len__(self) -> int:
        return self._count

    def stats(self) -> dict[str, int | float]:
        """nats-server's SublistStats: sizes, counts, and the fan-out of cached results."""
        fanouts = [len(v) for v in self._cache.values()]
        return {
            "num_subscriptions": self._count,
            "num_cache": len(self._cache),
            "num_inserts": self.inserts,
            "num_removes": self.removes,
            "num_matches": self.matches,
            "cache_hit_rate": self.cache_hits / self.matches if self.matches else 0.0,
            "max_fanout": max(fanouts, default=0),
            "avg_fanout": sum(fanouts) / len(fanouts) if fanouts else 0.0,
        }

    def insert(self, pattern: str, value: T) -> None:
        if not is_valid_subject(pattern):
            raise ValueError(f"invalid subject {pattern!r}")
        node = self._root
        for tok in pattern.split("."):
            if tok == PWC:
                if node.pwc is None:
                    node.pwc = _Node()
                node = node.pwc
            elif tok == FWC:
                if node.fwc is None:
                    node.fwc = _Node()
                node = node.fwc
            else:
                child = node.children.get(tok)
                if child is None:
                    child = node.children[tok] = _Node()
                node = child
        node.values.append(value)
        self._count += 1
        self.inserts += 1
        self._count_tail(pattern, 1)
        self._invalidate(pattern)

    def remove(self, pattern: str, value: T) -> bool:
        """Remove one (pattern, value) entry; False if there was none."""
        path: list[tuple[_Node[T], str]] = []
        node: _Node[T] | None = self._root
        for tok in pattern.split("."):
            assert node is not None
            path.append((node, tok))
            if tok == PWC:
                node = node.pwc
            elif tok == FWC:
                node = node.fwc
            else:
                node = node.children.get(tok)
            if node is None:
                return False
        assert node is not None
        try:
            node.values.remove(value)
        except ValueError:
            return False
        self._count -= 1
        self.removes += 1
        self._count_tail(pattern, -1)
        # Prune emptied nodes so that churn (e.g. reply inboxes) does not grow the trie.
        for parent, tok in reversed(path):
            if not node.is_empty():
                break
            if tok == PWC:
                parent.pwc = None
            elif tok == FWC:
                parent.fwc = None
            else:
                del parent.children[tok]
            node = parent
        self._invalidate(pattern)
        return True

    def _count_tail(self, pattern: str, delta: int) -> None:
        self.generation += 1
        tokens = pattern.split(".")
        if tokens[-1] not in (PWC, FWC):
            n = len(tokens)
            self._literal_tails[n] = self._literal_tails.get(n, 0) + delta

    def last_token_irrelevant(self, tokens: int) -> bool:
        """Whether matches of a subject with this many tokens ignore its last token.

        True when no pattern of that length ends in a literal token: then every subject that
        differs only in its last token (reply inboxes `_INBOX.<id>.<n>`) has the same matches.
        """
        return not self._literal_tails.get(tokens)

    def match(self, subject: str, *, cache: bool = True) -> list[T]:
        """Values of every pattern that matches the literal ``subject``.

        Pass ``cache=False`` for subjects that are seen once (reply inboxes): caching them
        only churns the cache.
        """
        self.matches += 1
        hit = self._cache.get(subject)
        if hit is not None:
            self.cache_hits += 1
        else:
            tokens = subject.split(".")
            if "" in tokens:
                # Not a valid subject (nats-server returns an empty result too); not cached.
                return []
            out: list[T] = []
            _match_level(self._root, tokens, 0, out)
            if not cache:
                return out
            hit = tuple(out)
            if len(self._cache) >= self.CACHE_MAX:
                # Drop the oldest half; dicts keep insertion order.
                for key in list(itertools.islice(self._cache, self.CACHE_MAX // 2)):
                    del self._cache[key]
            self._cache[subject] = hit
        return list(hit)

    def colliding(self, pattern: str) -> Iterator[T]:
        """Values of every stored pattern that collides with ``pattern``: some literal subject
        is matched by both (`collide`). A value stored twice may come twice.

        One walk down the tree, not a comparison with each stored pattern: a literal token
        follows one branch (and the wildcard branches beside it), so the cost grows with the
        patterns that can collide, not with how many are stored. Only a wildcard in
        ``pattern`` visits every literal branch at its level.
        """
        tokens = pattern.split(".")
        if "" in tokens:
            return iter(())  # not a valid subject: collides with nothing (as `collide`)
        return _colliding(self._root, tokens, 0)

    def _invalidate(self, pattern: str) -> None:
        if not self._cache:
            return
        if is_literal(pattern):
            self._cache.pop(pattern, None)
            return
        for key in [k for k in self._cache if matches(pattern, k)]:
            del self._cache[key]


def _match_level(node: _Node[T], tokens: list[str], start: int, out: list[T]) -> None:
    # Iterative over literal children, recursive only into '*' branches (as Sublist.matchLevel).
    n = len(tokens)
    cur: _Node[T] | None = node
    for i in range(start, n):
        assert cur is not None
        if cur.fwc is not None:
            out.extend(cur.fwc.values)
        if cur.pwc is not None:
            if i + 1 == n:
                out.extend(cur.pwc.values)
            else:
                _match_level(cur.pwc, tokens, i + 1, out)
        cur = cur.children.get(tokens[i])
        if cur is None:
            return
    assert cur is not None
    out.extend(cur.values)


def _colliding(node: _Node[T], tokens: list[str], i: int) -> Iterator[T]:
    if i == len(tokens):
        # Patterns of the same length whose every token could match.
        yield from node.values
        return
    tok = tokens[i]
    if tok == FWC:
        # One or more tokens: every stored pattern with at least one token more.
        yield from _below(node)
        return
    if node.fwc is not None:
        # A stored '>' takes this token and whatever follows.
        yield from node.fwc.values
    if node.pwc is not None:
        yield from _colliding(node.pwc, tokens, i + 1)
    if tok == PWC:
        for child in node.children.values():
            yield from _colliding(child, tokens, i + 1)
    else:
        same = node.children.get(tok)
        if same is not None:
            yield from _colliding(same, tokens, i + 1)


def _below(node: _Node[T]) -> Iterator[T]:
    """Values of every pattern in the subtrees under `node` (not `node`'s own)."""
    stack: list[_Node[T]] = [*node.children.values()]
    if node.pwc is not None:
        stack.append(node.pwc)
    if node.fwc is not None:
        stack.append(node.fwc)
    while stack:
        n = stack.pop()
        yield from n.values
        stack.extend(n.children.values())
        if n.pwc is not None:
            stack.append(n.pwc)
        if n.fwc is not None:
            stack.append(n.fwc)
