"""Subject summaries: exact for a few subjects, a filter for many, nothing when useless."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from infinistream.stream.summary import MAX_NAMED, SubjectSummary, summarize


def test_a_few_subjects_are_named_with_their_counts() -> None:
    summary = summarize(["a.1", "a.2", "a.1", "b.9"])
    assert summary.exact and summary.names == ("a.1", "a.2", "b.9")
    assert [summary.count_of(s) for s in ("a.1", "a.2", "b.9", "c")] == [2, 1, 1, 0]
    assert summary.may_hold("a.2") and not summary.may_hold("a.3")
    assert summary.may_match("a.*") and summary.may_match("b.>") and not summary.may_match("c.>")
    assert summary.may_match("") and summary.may_match(">")


@given(st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=400))
def test_a_summary_never_leaves_out_a_subject_it_holds(subjects: list[str]) -> None:
    summary = summarize(subjects)
    assert all(summary.may_hold(s) and summary.may_match(s) for s in subjects)


def test_many_subjects_make_a_filter_that_rules_most_others_out() -> None:
    rng = random.Random(7)
    held = [f"big.{rng.randrange(10**9)}" for _ in range(1_000)]
    summary = summarize(held * 4)  # 4,000 records, 1,000 subjects
    assert not summary.exact and summary.bloom and summary.count_of(held[0]) is None
    assert len(summary.bloom) <= 4_000 * 2 // 8
    others = [f"other.{i}" for i in range(10_000)]
    passed = sum(summary.may_hold(s) for s in others)
    assert passed < 0.1 * len(others)
    # Wildcards cannot be asked of a filter: anything may match.
    assert summary.may_match("nothing.*")


def test_a_filter_too_small_to_help_is_not_kept() -> None:
    # One record a subject and a quarter of a bit a record: it would pass almost anything.
    subjects = [f"s.{i}" for i in range(20_000)]
    summary = summarize(subjects, bits_per_record=0.25)
    assert summary == SubjectSummary() and not summary.known
    assert summary.may_hold("anything") and summary.may_match("anything.>")


def test_the_named_limit() -> None:
    assert summarize([f"s.{i}" for i in range(MAX_NAMED)]).exact
    assert not summarize([f"s.{i}" for i in range(MAX_NAMED + 1)] * 8).exact
