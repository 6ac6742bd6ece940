"""NATS subject rules, following nats-server's server/sublist.go and jetstream.go.

A subject is a dot-separated list of non-empty tokens. A token that is exactly ``*`` matches any
single token; a token that is exactly ``>`` matches one or more tokens and must be last. A token
such as ``a*`` or ``>b`` is an ordinary literal, as in nats-server.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from functools import partial
from operator import itemgetter
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


# Patterns longer than this are matched without a place in the matcher cache: a client's filter
# may be as long as a request allows, and the cache must not keep hundreds of them.
_CACHED_PATTERN_MAX = 1024


def matches(pattern: str, subject: str) -> bool:
    """True if the literal ``subject`` is matched by ``pattern`` (which may have wildcards).

    Wildcard characters in ``subject`` are compared literally. A subject with an empty token
    is never matched by a wildcard, as it is not a valid subject. A pattern that is not a
    valid subject (``>`` before its last token, an empty token) matches nothing but itself, as
    nats-server answers such a filter at once with nothing found.

    One pass over the tokens, whatever the pattern: no regular expression, no backtracking.
    """
    if pattern == subject:
        return True
    match = _MATCHERS.get(pattern)
    if match is None:
        match = _matcher(pattern)
        if len(pattern) <= _CACHED_PATTERN_MAX:
            if len(_MATCHERS) >= _MATCHERS_MAX:
                _MATCHERS.clear()
            _MATCHERS[pattern] = match
    return match(subject)


# The publish path and consumers match against the same few stream subjects and filters.
_MATCHERS: dict[str, Callable[[str], bool]] = {}
_MATCHERS_MAX = 4096


def _never(_: str) -> bool:
    return False


def _matcher(pattern: str) -> Callable[[str], bool]:
    """The match function of one wildcard pattern, linear in the subject's length."""
    if ("*" not in pattern and ">" not in pattern) or not is_valid_subject(pattern):
        return _never  # a literal pattern matches only itself, which the caller compared
    tokens = pattern.split(".")
    last = tokens[-1] == FWC
    fixed = tokens[:-1] if last else tokens
    if last and PWC not in fixed:
        # The common filter, `orders.eu.>`: a prefix and at least one more token.
        return partial(_prefix_match, pattern[:-1])
    # The literal tokens are compared in one go, picked out of the subject's by position.
    at = [i for i, tok in enumerate(fixed) if tok != PWC]
    pick: Callable[[list[str]], object] = _nothing
    want: object = ()
    if len(at) == 1:
        pick, want = itemgetter(at[0]), fixed[at[0]]  # one index: itemgetter gives no tuple
    elif at:
        pick, want = itemgetter(*at), tuple(fixed[i] for i in at)
    return partial(_tokens_match, len(fixed), last, pick, want)


def _nothing(_: list[str]) -> tuple[()]:
    return ()


def _prefix_match(prefix: str, subject: str) -> bool:
    if not subject.startswith(prefix) or len(subject) == len(prefix):
        return False
    rest = subject[len(prefix) :]
    return rest[0] != "." and rest[-1] != "." and ".." not in rest


def _tokens_match(
    n: int, more: bool, pick: Callable[[list[str]], object], want: object, subject: str
) -> bool:
    """`n` tokens (and with `more`, at least one after them), none empty, whose literal ones
    `pick` finds equal to `want`."""
    tokens = subject.split(".")
    if (len(tokens) <= n if more else len(tokens) != n) or "" in tokens:
        return False
    return bool(pick(tokens) == want)


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
            _match_level(self._root, tokens, out)
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
        return _colliding(self._root, tokens)

    def _invalidate(self, pattern: str) -> None:
        if not self._cache:
            return
        if is_literal(pattern):
            self._cache.pop(pattern, None)
            return
        for key in [k for k in self._cache if matches(pattern, k)]:
            del self._cache[key]


def _match_level(root: _Node[T], tokens: list[str], out: list[T]) -> None:
    """Collect the values of every pattern under `root` matching `tokens`, in the order a
    depth-first walk meets them (as Sublist.matchLevel): a '>' first, then a '*' branch, then
    the literal one. An explicit stack, not recursion: a subject may have thousands of tokens."""
    n = len(tokens)
    stack: list[tuple[_Node[T], int]] = [(root, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        node, i = pop()
        if i == n:
            out.extend(node.values)
            continue
        if node.fwc is not None:
            out.extend(node.fwc.values)
        child = node.children.get(tokens[i])
        if child is not None:
            push((child, i + 1))
        pwc = node.pwc
        if pwc is not None:
            if i + 1 == n:
                out.extend(pwc.values)
            else:
                push((pwc, i + 1))  # popped first: the '*' branch before the literal one


def _colliding(root: _Node[T], tokens: list[str]) -> Iterator[T]:
    """The values of every pattern under `root` that collides with `tokens`; an explicit stack,
    as `_match_level`."""
    n = len(tokens)
    stack: list[tuple[_Node[T], int]] = [(root, 0)]
    while stack:
        node, i = stack.pop()
        if i == n:
            # Patterns of the same length whose every token could match.
            yield from node.values
            continue
        tok = tokens[i]
        if tok == FWC:
            # One or more tokens: every stored pattern with at least one token more.
            yield from _below(node)
            continue
        if node.fwc is not None:
            # A stored '>' takes this token and whatever follows.
            yield from node.fwc.values
        if tok == PWC:
            stack.extend((child, i + 1) for child in node.children.values())
        else:
            same = node.children.get(tok)
            if same is not None:
                stack.append((same, i + 1))
        if node.pwc is not None:
            stack.append((node.pwc, i + 1))


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
