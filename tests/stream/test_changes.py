"""Changes: a plan layered over a StreamView, which it must answer for without touching."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from infinistream.stream.changes import Changes
from infinistream.stream.view import StreamView
from support.streamviews import kill, view_of


def snapshot(view: StreamView) -> dict[str, Any]:
    return {
        "first": view.first_seq,
        "last": view.last_seq,
        "msgs": view.msgs,
        "bytes": view.bytes,
        "subjects": view.subjects_matching(""),
        "tombs": set(view.tombstones()),
        "live": list(view.live_seqs()),
    }


def test_a_fresh_plan_mirrors_the_view() -> None:
    view = view_of(["a", "b", "a"])
    changes = Changes(view)
    assert (changes.first_seq, changes.last_seq, changes.msgs, changes.bytes) == (1, 3, 3, 30)
    assert changes.num_subjects == 2
    assert not changes.touched


def test_appends_take_sequences_after_the_view() -> None:
    changes = Changes(view_of(["a", "b"]))
    assert changes.append("c", 7) == 3
    assert changes.append("a", 5) == 4
    assert (changes.last_seq, changes.msgs, changes.bytes, changes.num_subjects) == (4, 4, 32, 3)
    assert changes.subject_of(3) == "c"
    assert changes.size_of(4) == 5
    assert changes.subject_of(1) == "a"
    assert changes.touched


def test_planning_leaves_the_view_untouched() -> None:
    view = view_of(["a", "b", "a", "c"])
    before = snapshot(view)
    changes = Changes(view)
    changes.append("d", 1)
    changes.kill(2)
    changes.kill(1)
    changes.kill_below(4)
    assert snapshot(view) == before


def test_live_count_includes_appends_and_kills() -> None:
    changes = Changes(view_of(["a", "b", "a"]))
    assert changes.live_count("a") == 2
    changes.append("a", 1)
    assert changes.live_count("a") == 3
    changes.kill(1)
    assert changes.live_count("a") == 2
    assert changes.live_count("never") == 0


def test_last_for_prefers_a_live_append() -> None:
    changes = Changes(view_of(["a", "b", "a"]))
    assert changes.last_for("a") == 3
    seq = changes.append("a", 1)
    assert changes.last_for("a") == seq
    changes.kill(seq)
    assert changes.last_for("a") == 3
    changes.kill(3)
    assert changes.last_for("a") == 1
    assert changes.last_for("z") == 0


def test_last_matching_a_wildcard_takes_the_newest_live_match() -> None:
    changes = Changes(view_of(["s.a", "s.b", "t.c", "s.a"]))
    assert changes.last_matching("s.*") == 4
    assert changes.last_matching("s.b") == 2
    changes.kill(4)
    assert changes.last_matching("s.*") == 2
    seq = changes.append("s.z", 1)
    assert changes.last_matching("s.>") == seq
    assert changes.last_matching(">") == seq
    assert changes.last_matching("u.*") == 0


def test_oldest_for_walks_past_killed_messages() -> None:
    changes = Changes(view_of(["a", "b", "a", "a"]))
    assert changes.oldest_for("a") == 1
    changes.kill(1)
    assert changes.oldest_for("a") == 3
    changes.kill(3)
    changes.kill(4)
    assert changes.oldest_for("a") == 0
    seq = changes.append("a", 1)
    assert changes.oldest_for("a") == seq


def test_kill_of_a_dead_or_unknown_sequence_is_refused() -> None:
    view = view_of(["a", "b", "c"])
    kill(view, [2])
    changes = Changes(view)
    assert not changes.kill(2)
    assert not changes.kill(0)
    assert not changes.kill(4)
    assert changes.kill(3)
    assert not changes.kill(3)
    assert changes.msgs == 1


def test_killing_the_first_advances_past_view_tombstones() -> None:
    view = view_of(["a", "b", "c", "d"])
    kill(view, [2])
    changes = Changes(view)
    changes.kill(3)
    changes.kill(1)
    assert changes.first_seq == 4
    assert changes.msgs == 1


def test_killing_the_first_advances_into_appends() -> None:
    changes = Changes(view_of(["a"]))
    changes.append("b", 1)
    changes.kill(1)
    assert changes.first_seq == 2
    changes.kill(2)
    # Nothing left: the head sits just past the end.
    assert (changes.first_seq, changes.last_seq, changes.msgs, changes.bytes) == (3, 2, 0, 0)


def test_killing_a_subjects_last_message_drops_the_subject() -> None:
    changes = Changes(view_of(["a", "b"]))
    changes.kill(2)
    assert changes.num_subjects == 1
    changes.append("b", 1)
    assert changes.num_subjects == 2


def test_kill_below_returns_how_many_went() -> None:
    view = view_of(["a", "b", "c", "d", "e"])
    kill(view, [2])
    changes = Changes(view)
    assert changes.kill_below(4) == 2
    assert (changes.first_seq, changes.msgs) == (4, 2)


def test_kill_below_past_the_end_moves_the_end() -> None:
    changes = Changes(view_of(["a", "b"]))
    assert changes.kill_below(10) == 2
    assert (changes.first_seq, changes.last_seq, changes.msgs) == (10, 9, 0)
    assert changes.append("c", 1) == 10
    assert (changes.last_for("c"), changes.oldest_for("c"), changes.live_of_subject("c")) == (
        10,
        10,
        [10],
    )


def test_live_of_subject_lists_view_and_appended_sequences() -> None:
    changes = Changes(view_of(["a", "b", "a"]))
    changes.append("a", 1)
    changes.kill(1)
    assert changes.live_of_subject("a") == [3, 4]
    assert changes.live_of_subject("b") == [2]
    assert changes.live_of_subject("z") == []


def test_evict_oldest_takes_the_head() -> None:
    changes = Changes(view_of(["a", "b", "c"]))
    changes.evict_oldest()
    assert (changes.first_seq, changes.msgs, changes.killed) == (2, 2, {1})


def test_tombstones_to_write_and_to_drop() -> None:
    view = view_of(["a", "b", "c", "d", "e", "f"])
    kill(view, [2, 5])
    changes = Changes(view)
    changes.kill(4)
    changes.kill(6)
    assert changes.new_tombstones() == [4, 6]
    # The head moves past 1 and the tombstone at 2 (which the commit drops with a range
    # below the new head); 5 stays.
    changes.kill(1)
    assert changes.first_seq == 3
    assert changes.new_tombstones() == [4, 6]


def test_a_killed_head_needs_no_tombstone() -> None:
    changes = Changes(view_of(["a", "b", "c"]))
    changes.kill(1)
    changes.kill(2)
    assert changes.new_tombstones() == []
    assert changes.first_seq == 3


# -- batches of appends -------------------------------------------------------------------------

subjects_st = st.sampled_from(["a", "b", "c"])


def answers(changes: Changes) -> dict[str, Any]:
    return {
        "totals": (changes.first_seq, changes.last_seq, changes.msgs, changes.bytes),
        "num_subjects": changes.num_subjects,
        "appended": (changes.subjects, changes.sizes),
        "live_count": {n: changes.live_count(n) for n in "abcz"},
        "last": {n: changes.last_for(n) for n in "abcz"},
        "oldest": {n: changes.oldest_for(n) for n in "abcz"},
        "live": {n: changes.live_of_subject(n) for n in "abcz"},
        "last_matching": changes.last_matching("*"),
    }


@settings(max_examples=200, deadline=None)
@given(
    st.lists(subjects_st, max_size=5),
    st.lists(st.lists(st.tuples(subjects_st, st.integers(1, 9)), max_size=4), max_size=4),
    st.sets(st.integers(1, 5)),
)
def test_append_many_is_append_one_by_one(
    existing: list[str], batches: list[list[tuple[str, int]]], dead: set[int]
) -> None:
    view = view_of(existing)
    kill(view, [seq for seq in dead if seq <= len(existing)])
    many, one = Changes(view), Changes(view)
    for batch in batches:
        first = many.append_many([s for s, _ in batch], [n for _, n in batch])
        seqs = [one.append(subject, size) for subject, size in batch]
        assert seqs == list(range(first, first + len(batch)))
        # Questions between batches must see every append so far.
        assert answers(many) == answers(one)


def test_subject_questions_see_appends_made_after_earlier_questions() -> None:
    changes = Changes(view_of(["a", "b"]))
    changes.append_many(["a", "c"], [1, 1])
    assert (changes.last_for("a"), changes.oldest_for("c")) == (3, 4)
    changes.append("a", 1)
    changes.append_many(["c", "a"], [1, 1])
    assert changes.live_of_subject("a") == [1, 3, 5, 7]
    assert (changes.last_for("c"), changes.last_matching("*")) == (6, 7)
    changes.kill(7)
    assert changes.last_for("a") == 5


def test_appends_before_and_after_a_kill_below_past_the_end_keep_their_sequences() -> None:
    changes = Changes(view_of(["a"]))
    changes.append_many(["b", "b"], [1, 1])
    changes.kill_below(8)
    assert changes.append("b", 1) == 8
    assert changes.append_many(["b"], [1]) == 9
    assert changes.live_of_subject("b") == [8, 9]
    # The view's message goes with the head (no tombstone, nor any subject record of the
    # view's: they are cleared); the appended ones one by one.
    assert changes.killed == {2, 3} and changes.reset_subjects
