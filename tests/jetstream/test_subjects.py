"""NATS subject rules: fixed cases from nats-server's tests and properties against references."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infinistream.jetstream.subjects import (
    MAX_NAME_LEN,
    SubjectIndex,
    collide,
    is_literal,
    is_subset,
    is_valid_name,
    is_valid_subject,
    matches,
)

# Patterns use only "a" and "b"; "c" appears only in the subject universe, so that a wildcard
# always has a token to match that no literal in a pattern equals.
LITERALS = ["a", "b"]
UNIVERSE = [
    ".".join(toks) for n in range(1, 6) for toks in itertools.product(["a", "b", "c"], repeat=n)
]


@st.composite
def patterns(draw: st.DrawFn, max_tokens: int = 4) -> str:
    toks = draw(st.lists(st.sampled_from([*LITERALS, "*"]), min_size=0, max_size=max_tokens))
    if not toks or draw(st.booleans()):
        toks = [*toks[: max_tokens - 1], ">"]
    return ".".join(toks)


literal_subjects = st.lists(st.sampled_from(["a", "b", "c", "foo"]), min_size=1, max_size=5).map(
    ".".join
)


def reference_regex(pattern: str) -> re.Pattern[str]:
    parts = []
    for tok in pattern.split("."):
        if tok == "*":
            parts.append(r"[^.]+")
        elif tok == ">":
            parts.append(r"[^.]+(?:\.[^.]+)*")
        else:
            parts.append(re.escape(tok))
    return re.compile(r"\.".join(parts))


def ref_matches(pattern: str, subject: str) -> bool:
    return reference_regex(pattern).fullmatch(subject) is not None


# --- validity -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "subject",
    [
        "foo",
        "foo.bar",
        "foo.*",
        "foo.>",
        "*",
        ">",
        "*.>",
        "foo.*.bar",
        "foo*.bar",
        "a>b",
        "$JS.API.>",
    ],
)
def test_valid_subjects(subject: str) -> None:
    assert is_valid_subject(subject)


@pytest.mark.parametrize(
    "subject",
    ["", ".", "foo.", ".foo", "foo..bar", "foo.>.bar", ">.foo", "foo bar", "foo.\t", " ", "a.b\n"],
)
def test_invalid_subjects(subject: str) -> None:
    assert not is_valid_subject(subject)


def test_publish_subjects() -> None:
    assert is_valid_subject("foo.bar", allow_wildcards=False)
    assert is_valid_subject("foo*.b>r", allow_wildcards=False)
    assert not is_valid_subject("foo.*", allow_wildcards=False)
    assert not is_valid_subject(">", allow_wildcards=False)
    assert not is_valid_subject("", allow_wildcards=False)


def test_is_literal() -> None:
    assert is_literal("foo.bar")
    assert is_literal("foo*.bar>")
    assert not is_literal("foo.*")
    assert not is_literal(">")
    assert not is_literal("*.bar")


def test_is_valid_name() -> None:
    assert is_valid_name("ORDERS")
    assert is_valid_name("orders-v2_x")
    for bad in ["", "a.b", "a*", "a>", "a b", "a\tb", "a/b", "a\\b", "a\nb"]:
        assert not is_valid_name(bad), bad
    assert is_valid_name("x" * 300)
    assert is_valid_name("x" * MAX_NAME_LEN, max_len=MAX_NAME_LEN)
    assert not is_valid_name("x" * (MAX_NAME_LEN + 1), max_len=MAX_NAME_LEN)
    # Length is in bytes, as in nats-server.
    assert not is_valid_name("é" * 128, max_len=MAX_NAME_LEN)


@given(patterns())
def test_generated_patterns_are_valid(pattern: str) -> None:
    assert is_valid_subject(pattern)
    assert is_literal(pattern) == ("*" not in pattern.split(".") and ">" not in pattern)


# --- matching -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("foo.bar", "foo.bar", True),
        ("foo.bar", "foo.baz", False),
        ("foo.*", "foo.bar", True),
        ("foo.*", "foo.bar.baz", False),
        ("foo.*", "foo", False),
        ("foo.>", "foo.bar.baz", True),
        ("foo.>", "foo", False),
        (">", "foo", True),
        ("*.bar", "foo.bar", True),
        ("*", "foo.bar", False),
        ("foo*", "foox", False),
        ("foo.*", "foo..", False),
        ("foo.>", "foo.a..b", False),
    ],
)
def test_matches_cases(pattern: str, subject: str, expected: bool) -> None:
    assert matches(pattern, subject) is expected


@given(patterns(), literal_subjects)
def test_matches_agrees_with_regex(pattern: str, subject: str) -> None:
    assert matches(pattern, subject) == ref_matches(pattern, subject)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("foo.bar", "foo.bar", True),
        ("foo.bar", "foo.baz", False),
        ("foo.*", "foo.>", True),
        ("foo.*", "*.bar", True),
        ("foo.*", "foo.bar.baz", False),
        ("foo.>", "*.*.bar", True),
        ("*", "a.>", False),
        (">", "*.*", True),
        ("foo.*.>", "foo.bar", False),
        ("$JS.API.>", "$JS.>", True),
        ("orders.*", "$JS.>", False),
    ],
)
def test_collide_cases(a: str, b: str, expected: bool) -> None:
    assert collide(a, b) is expected
    assert collide(b, a) is expected


@given(patterns(), patterns())
@settings(max_examples=300)
def test_collide_iff_common_subject(a: str, b: str) -> None:
    ra, rb = reference_regex(a), reference_regex(b)
    common = any(ra.fullmatch(s) and rb.fullmatch(s) for s in UNIVERSE)
    assert collide(a, b) == common
    assert collide(b, a) == common


@pytest.mark.parametrize(
    ("sub", "of", "expected"),
    [
        ("foo.*", ">", True),
        ("foo.*", "*.*", True),
        ("foo.*", "foo.*", True),
        ("foo.*", "foo.bar", False),
        ("foo.bar", "foo.*", True),
        ("foo.>", "foo.*", False),
        ("foo.*", "foo.>", True),
        ("foo", "foo.>", False),
        ("$JS.EVENT.foo", "$JS.EVENT.>", True),
    ],
)
def test_is_subset_cases(sub: str, of: str, expected: bool) -> None:
    assert is_subset(sub, of) is expected


@given(patterns(), patterns())
@settings(max_examples=300)
def test_is_subset_agrees_with_enumeration(sub: str, of: str) -> None:
    rs, ro = reference_regex(sub), reference_regex(of)
    expected = all(ro.fullmatch(s) for s in UNIVERSE if rs.fullmatch(s))
    assert is_subset(sub, of) == expected


# --- SubjectIndex ---------------------------------------------------------------------------


def test_index_basics() -> None:
    idx: SubjectIndex[str] = SubjectIndex()
    idx.insert("orders.*", "s1")
    idx.insert("orders.eu.>", "s2")
    idx.insert("orders.eu.new", "s3")
    idx.insert(">", "all")
    assert sorted(idx.match("orders.eu.new")) == ["all", "s2", "s3"]
    assert sorted(idx.match("orders.us")) == ["all", "s1"]
    assert idx.match("other") == ["all"]
    assert len(idx) == 4
    assert idx.remove(">", "all")
    assert not idx.remove(">", "all")
    assert not idx.remove("never.inserted", "x")
    assert idx.match("other") == []
    assert sorted(idx.match("orders.eu.new")) == ["s2", "s3"]
    assert idx.match("orders..eu") == []
    with pytest.raises(ValueError):
        idx.insert("orders.>.x", "bad")
    # The result is the caller's to keep.
    got = idx.match("orders.us")
    got.append("mutated")
    assert idx.match("orders.us") == ["s1"]


def test_index_prunes_removed_entries() -> None:
    idx: SubjectIndex[int] = SubjectIndex()
    for i in range(100):
        idx.insert(f"_INBOX.{i}.x", i)
    for i in range(100):
        assert idx.remove(f"_INBOX.{i}.x", i)
    assert len(idx) == 0
    assert idx._root.is_empty()


def test_index_cache_is_bounded() -> None:
    idx: SubjectIndex[int] = SubjectIndex()
    idx.CACHE_MAX = 8
    idx.insert("a.*", 1)
    for i in range(50):
        assert idx.match(f"a.{i}") == [1]
    assert len(idx._cache) <= 8


ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), patterns(), st.integers(0, 2)),
        st.tuples(st.just("remove"), patterns(), st.integers(0, 2)),
        st.tuples(st.just("match"), literal_subjects, st.just(0)),
    ),
    max_size=40,
)


@given(ops)
@settings(max_examples=200)
def test_index_agrees_with_brute_force(operations: list[tuple[str, str, int]]) -> None:
    idx: SubjectIndex[int] = SubjectIndex()
    entries: list[tuple[str, int]] = []

    def check(subject: str) -> None:
        expected = sorted(v for p, v in entries if ref_matches(p, subject))
        assert sorted(idx.match(subject)) == expected

    for op, arg, value in operations:
        if op == "insert":
            idx.insert(arg, value)
            entries.append((arg, value))
        elif op == "remove":
            present = (arg, value) in entries
            assert idx.remove(arg, value) == present
            if present:
                entries.remove((arg, value))
        else:
            check(arg)
    assert len(idx) == len(entries)
    for subject in UNIVERSE[:120]:
        check(subject)


def test_last_token_irrelevant_tracks_literal_tails_by_length() -> None:
    index: SubjectIndex[int] = SubjectIndex()
    index.insert("_INBOX.a.*", 1)
    assert index.last_token_irrelevant(3)
    generation = index.generation
    index.insert("_INBOX.a.7", 2)
    assert index.generation != generation
    assert not index.last_token_irrelevant(3)
    assert index.last_token_irrelevant(2)
    index.remove("_INBOX.a.7", 2)
    assert index.last_token_irrelevant(3)
    index.insert("x.>", 3)
    assert index.last_token_irrelevant(2)


@settings(max_examples=300, deadline=None)
@given(st.lists(patterns(), max_size=12), patterns())
def test_colliding_finds_exactly_the_stored_patterns_that_collide(
    stored: list[str], query: str
) -> None:
    index: SubjectIndex[int] = SubjectIndex()
    for i, pattern in enumerate(stored):
        index.insert(pattern, i)
    assert sorted(index.colliding(query)) == [
        i for i, pattern in enumerate(stored) if collide(query, pattern)
    ]


def test_colliding_walks_only_the_branches_that_can_collide() -> None:
    """With 100,000 stored subjects a literal query looks at a handful of nodes."""
    index: SubjectIndex[int] = SubjectIndex()
    for i in range(100_000):
        index.insert(f"orders.{i}.created", i)
    index.insert("orders.*.shipped", -1)
    index.insert("audit.>", -2)
    assert list(index.colliding("orders.77.created")) == [77]
    assert sorted(index.colliding("orders.77.>")) == [-1, 77]
    assert list(index.colliding("audit.x")) == [-2]
    assert list(index.colliding("orders.x.y")) == []
    assert len(list(index.colliding("orders.*.created"))) == 100_000
    assert list(index.colliding("orders..created")) == []


# --- hostile patterns -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "subject"),
    [
        # '>' is a wildcard only as the last token (nats-server's matchLiteral); elsewhere the
        # pattern is not a valid filter and matches nothing but itself.
        ("r.>.a", "r.x.a"),
        ("r.>.a", "r.x.y.a"),
        ("r.>.>", "r.x.y"),
        ("r..a", "r.x.a"),
        (">.a", "x.a"),
    ],
)
def test_invalid_patterns_match_nothing(pattern: str, subject: str) -> None:
    assert not matches(pattern, subject)
    assert matches(pattern, pattern)


def test_matching_takes_one_pass_over_the_tokens() -> None:
    """A filter of many '>' or '*' tokens against a long subject is answered at once.

    Matching once went through regular expressions, where each '>' became a group that could
    take any number of tokens: 12 of them took seconds, each one more doubled it. The child
    process is a safety net for that: the match itself takes microseconds.
    """
    script = (
        "from infinistream.jetstream.subjects import matches\n"
        "many = 'r.' + '.'.join(['>'] * 40)\n"
        "stars = 'r.' + '.'.join(['*'] * 40) + '.x'\n"
        "subject = 'r.' + '.'.join(['a'] * 60)\n"
        "print(matches(many, subject), matches(stars, subject))\n"
        "print(matches(stars, 'r.' + 'a.' * 40 + 'x'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["False", "False", "True"]


DEEP = 5000  # tokens: far beyond Python's recursion limit


def test_index_matches_subjects_deeper_than_any_recursion_limit() -> None:
    index: SubjectIndex[int] = SubjectIndex()
    stars = ".".join(["*"] * DEEP)
    index.insert(stars, 1)
    index.insert(".".join(["*"] * (DEEP - 1)) + ".>", 2)
    index.insert(".".join(["a"] * DEEP), 3)
    subject = ".".join(["a"] * DEEP)
    assert sorted(index.match(subject)) == [1, 2, 3]
    assert sorted(index.match(subject + ".b")) == [2]
    assert sorted(index.colliding(stars)) == [1, 2, 3]
    assert sorted(index.colliding(".".join(["a"] * (DEEP - 1)) + ".>")) == [1, 2, 3]
    assert index.remove(stars, 1)
    assert sorted(index.match(subject)) == [2, 3]
