"""plan(): what one batch of publishes does to one stream, message by message."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from infinistream.jetstream.api import StreamConfig
from infinistream.protocol import encode_headers
from infinistream.stream.changes import Changes
from infinistream.stream.config import normalize
from infinistream.stream.publish_rules import (
    Outcome,
    Publish,
    StreamPlan,
    is_plain,
    msg_id_shown,
    msg_id_text,
    plan,
    plan_each,
    plan_plain,
    read_headers,
)
from infinistream.stream.view import StreamView
from support.streamviews import empty_view, extend, kill, view_of


def config(**fields: Any) -> StreamConfig:
    return normalize(StreamConfig(name="S", subjects=["s.>"], **fields))


# A message whose record is 10 bytes counts for 26 in a stream (stream.sizes: nats-server's
# file store frames it in 30 bytes where a record takes 14); the messages already in the
# stream in these tests are such messages.
COUNTED = 26


def pub(
    subject: str, headers: dict[str, str] | None = None, data_len: int = 1, size: int = 10
) -> Publish:
    return Publish(subject, encode_headers(headers) if headers else None, data_len, size, "r")


def run(
    cfg: StreamConfig,
    publishes: list[Publish],
    existing: list[str] | None = None,
    *,
    last_msg_id: str = "",
    known_ids: dict[str, int] | None = None,
    view: StreamView | None = None,
) -> StreamPlan:
    view = view if view is not None else view_of(existing or [], size=COUNTED)
    return plan(cfg, Changes(view), publishes, last_msg_id, known_ids or {})


def seqs(result: StreamPlan) -> list[int]:
    return [o.seq for o in result.outcomes]


def error_of(outcome: Outcome) -> tuple[int, int, str]:
    assert outcome.error is not None, outcome
    return outcome.error.code, outcome.error.err_code, outcome.error.description


# -- sequences ----------------------------------------------------------------------------------


def test_sequences_follow_the_stream_in_batch_order() -> None:
    result = run(config(), [pub("s.a"), pub("s.b"), pub("s.a")], existing=["s.x", "s.y"])
    assert seqs(result) == [3, 4, 5]
    assert result.accepted == [0, 1, 2]
    assert (result.changes.last_seq, result.changes.msgs) == (5, 5)


def test_refused_messages_take_no_sequence() -> None:
    result = run(
        config(max_msg_size=5),
        [pub("s.a"), pub("s.b", data_len=6), pub("s.c")],
    )
    assert seqs(result) == [1, 0, 2]
    assert result.accepted == [0, 2]
    assert error_of(result.outcomes[1]) == (400, 10054, "message size exceeds maximum allowed")


def test_sealed_stream_refuses_every_message() -> None:
    cfg = config()
    cfg.sealed = True
    result = run(cfg, [pub("s.a"), pub("s.b")])
    assert [error_of(o) for o in result.outcomes] == [
        (400, 10109, "invalid operation on sealed stream")
    ] * 2
    assert not result.changes.touched


# -- dedupe -------------------------------------------------------------------------------------


def test_known_msg_id_is_a_duplicate_of_its_sequence() -> None:
    result = run(config(), [pub("s.a", {"Nats-Msg-Id": "x"})], existing=["s.a"], known_ids={"x": 1})
    assert result.outcomes == [Outcome(seq=1, duplicate=True)]
    assert not result.changes.touched


def test_msg_id_repeated_in_the_batch_is_a_duplicate_of_the_first() -> None:
    result = run(
        config(),
        [
            pub("s.a", {"Nats-Msg-Id": "x"}),
            pub("s.b", {"Nats-Msg-Id": "y"}),
            pub("s.c", {"Nats-Msg-Id": "x"}),
        ],
    )
    assert [(o.seq, o.duplicate) for o in result.outcomes] == [(1, False), (2, False), (1, True)]
    assert result.new_ids == {"x": 1, "y": 2}
    assert result.last_msg_id == "y"


def test_a_message_without_id_clears_the_last_msg_id() -> None:
    result = run(config(), [pub("s.a", {"Nats-Msg-Id": "x"}), pub("s.b")], last_msg_id="old")
    assert result.last_msg_id == ""


def test_refused_message_keeps_the_last_msg_id() -> None:
    result = run(
        config(max_msg_size=5),
        [pub("s.a", {"Nats-Msg-Id": "x"}, data_len=500)],
        last_msg_id="old",
    )
    assert result.outcomes[0].error is not None
    assert (result.last_msg_id, result.new_ids) == ("old", {})


# -- expected headers ---------------------------------------------------------------------------


def test_expected_stream() -> None:
    result = run(
        config(),
        [pub("s.a", {"Nats-Expected-Stream": "S"}), pub("s.a", {"Nats-Expected-Stream": "T"})],
    )
    assert result.outcomes[0].seq == 1
    assert error_of(result.outcomes[1]) == (400, 10060, "expected stream does not match")


def test_expected_last_sequence_sees_earlier_messages_of_the_batch() -> None:
    result = run(
        config(),
        [
            pub("s.a", {"Nats-Expected-Last-Sequence": "2"}),
            pub("s.a", {"Nats-Expected-Last-Sequence": "3"}),
            pub("s.a", {"Nats-Expected-Last-Sequence": "3"}),
        ],
        existing=["s.x", "s.y"],
    )
    assert seqs(result)[:2] == [3, 4]
    assert error_of(result.outcomes[2]) == (400, 10071, "wrong last sequence: 4")


def test_expected_last_subject_sequence_sees_the_batch_and_the_view() -> None:
    result = run(
        config(),
        [
            pub("s.a", {"Nats-Expected-Last-Subject-Sequence": "2"}),
            pub("s.b", {"Nats-Expected-Last-Subject-Sequence": "0"}),
            pub("s.a", {"Nats-Expected-Last-Subject-Sequence": "2"}),
        ],
        existing=["s.x", "s.a"],
    )
    assert seqs(result)[:2] == [3, 4]
    assert error_of(result.outcomes[2]) == (400, 10071, "wrong last sequence: 3")


def test_expected_last_subject_sequence_for_another_subject() -> None:
    headers = {
        "Nats-Expected-Last-Subject-Sequence": "1",
        "Nats-Expected-Last-Subject-Sequence-Subject": "s.x",
    }
    result = run(config(), [pub("s.new", headers)], existing=["s.x", "s.a"])
    assert seqs(result) == [3]


def test_expected_last_subject_sequence_for_a_wildcard_subject() -> None:
    headers = {
        "Nats-Expected-Last-Subject-Sequence": "3",
        "Nats-Expected-Last-Subject-Sequence-Subject": "s.*",
    }
    result = run(
        config(), [pub("s.new", headers), pub("s.new", headers)], existing=["s.x", "t.y", "s.a"]
    )
    assert seqs(result) == [4, 0]
    assert error_of(result.outcomes[1]) == (400, 10071, "wrong last sequence: 4")


def test_expected_subject_alone_is_refused() -> None:
    result = run(config(), [pub("s.a", {"Nats-Expected-Last-Subject-Sequence-Subject": "s.a"})])
    assert error_of(result.outcomes[0]) == (
        400,
        10193,
        "missing sequence for expected last sequence per subject",
    )


def test_expected_last_msg_id() -> None:
    result = run(
        config(),
        [
            pub("s.a", {"Nats-Expected-Last-Msg-Id": "old", "Nats-Msg-Id": "new"}),
            pub("s.a", {"Nats-Expected-Last-Msg-Id": "old"}),
        ],
        last_msg_id="old",
    )
    assert result.outcomes[0].seq == 1
    assert error_of(result.outcomes[1]) == (400, 10070, "wrong last msg ID: new")


def test_headers_are_checked_in_nats_server_order() -> None:
    # Expected stream before expected last sequence; that before dedupe; dedupe before
    # expected last msg id.
    both = {"Nats-Expected-Stream": "T", "Nats-Expected-Last-Sequence": "9"}
    dup_and_wrong_seq = {"Nats-Msg-Id": "x", "Nats-Expected-Last-Sequence": "9"}
    dup_and_wrong_id = {"Nats-Msg-Id": "x", "Nats-Expected-Last-Msg-Id": "zz"}
    result = run(
        config(),
        [pub("s.a", both), pub("s.a", dup_and_wrong_seq), pub("s.a", dup_and_wrong_id)],
        existing=["s.a"],
        known_ids={"x": 1},
    )
    assert error_of(result.outcomes[0])[1] == 10060
    assert error_of(result.outcomes[1])[1] == 10071
    assert result.outcomes[2] == Outcome(seq=1, duplicate=True)


def test_message_ttl_is_refused_without_allow_msg_ttl() -> None:
    result = run(config(), [pub("s.a", {"Nats-TTL": "5s"}), pub("s.b", {"Nats-TTL": "never"})])
    assert error_of(result.outcomes[0]) == (400, 10166, "per-message TTL is disabled")
    assert error_of(result.outcomes[1]) == (400, 10166, "per-message TTL is disabled")
    # A malformed one is reported as invalid, after the other checks (nats-server's order).
    result = run(config(max_msg_size=5), [pub("s.a", {"Nats-TTL": "1ms"}, data_len=9)])
    assert error_of(result.outcomes[0]) == (400, 10054, "message size exceeds maximum allowed")
    result = run(config(), [pub("s.a", {"Nats-TTL": "1ms"})])
    assert error_of(result.outcomes[0]) == (400, 10165, "invalid per-message TTL")


def test_message_ttls_are_planned_with_their_messages() -> None:
    cfg = config(allow_msg_ttl=True)
    result = run(
        cfg,
        [pub("s.a", {"Nats-TTL": "2m"}), pub("s.b"), pub("s.c", {"Nats-TTL": "never"})],
    )
    assert seqs(result) == [1, 2, 3]
    assert result.changes.ttls == {1: 120, 3: -1}
    assert result.changes.new_nevers() == [3]
    assert result.changes.is_never(3) and not result.changes.is_never(1)


def test_a_delete_marker_commits_only_while_it_replaces_the_last_message() -> None:
    cfg = config(allow_rollup_hdrs=True, allow_msg_ttl=True)
    marker = {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "1s", "Nats-Rollup": "sub"}

    def marker_for(seq: int) -> Publish:
        return Publish("s.a", encode_headers(marker), 0, 10, None, replaces=seq)

    result = run(cfg, [marker_for(2)], existing=["s.a", "s.a", "s.b"])
    assert seqs(result) == [4]
    assert result.changes.live_of_subject("s.a") == [4]
    # Another agent's marker came first, or the subject moved on: nothing happens.
    result = run(cfg, [marker_for(2), marker_for(2)], existing=["s.a", "s.a"])
    assert seqs(result) == [3, 0]
    assert error_of(result.outcomes[1])[1] == 10071


# -- rollups ------------------------------------------------------------------------------------


def test_rollup_sub_kills_older_messages_of_the_subject() -> None:
    result = run(
        config(allow_rollup_hdrs=True),
        [pub("s.a"), pub("s.a", {"Nats-Rollup": "sub"})],
        existing=["s.a", "s.b", "s.a"],
    )
    assert seqs(result) == [4, 5]
    assert result.changes.killed == {1, 3, 4}
    assert result.changes.live_of_subject("s.a") == [5]
    assert result.changes.first_seq == 2


def test_rollup_all_kills_everything_before() -> None:
    result = run(
        config(allow_rollup_hdrs=True),
        [pub("s.c", {"Nats-Rollup": "all"}), pub("s.d")],
        existing=["s.a", "s.b"],
    )
    assert seqs(result) == [3, 4]
    assert (result.changes.first_seq, result.changes.msgs) == (3, 2)


def test_rollup_needs_allow_rollup_hdrs() -> None:
    result = run(config(), [pub("s.a", {"Nats-Rollup": "all"})], existing=["s.a"])
    assert error_of(result.outcomes[0]) == (500, 10111, "rollup not permitted")
    assert result.changes.msgs == 1


def test_rollup_value_must_be_sub_or_all() -> None:
    result = run(config(allow_rollup_hdrs=True), [pub("s.a", {"Nats-Rollup": "some"})])
    assert error_of(result.outcomes[0]) == (500, 10111, 'rollup value invalid: "some"')


# -- size ---------------------------------------------------------------------------------------


def test_max_msg_size_counts_headers_and_data() -> None:
    headers = {"A": "b"}
    header_len = len(encode_headers(headers))
    result = run(
        config(max_msg_size=header_len + 4),
        [pub("s.a", headers, data_len=4), pub("s.a", headers, data_len=5)],
    )
    assert result.outcomes[0].seq == 1
    assert error_of(result.outcomes[1])[1] == 10054


def test_huge_header_block_is_refused() -> None:
    result = run(config(), [pub("s.a", {"X": "y" * 70_000})])
    assert error_of(result.outcomes[0])[1] == 10097


# -- limits -------------------------------------------------------------------------------------


def test_discard_old_max_msgs_evicts_the_oldest() -> None:
    result = run(config(max_msgs=3), [pub("s.d"), pub("s.e")], existing=["s.a", "s.b", "s.c"])
    assert seqs(result) == [4, 5]
    assert (result.changes.first_seq, result.changes.msgs) == (3, 3)


def test_discard_old_max_bytes_evicts_until_it_fits() -> None:
    # 3 x 26 stored, and one of 20 + 16: two must go.
    result = run(config(max_bytes=70), [pub("s.d", size=20)], existing=["s.a", "s.b", "s.c"])
    assert seqs(result) == [4]
    assert (result.changes.first_seq, result.changes.bytes) == (3, 62)


def test_discard_new_refuses_when_full() -> None:
    result = run(
        config(max_msgs=3, discard="new"),
        [pub("s.c"), pub("s.d")],
        existing=["s.a", "s.b"],
    )
    assert seqs(result) == [3, 0]
    assert error_of(result.outcomes[1]) == (503, 10077, "maximum messages exceeded")


def test_discard_new_refuses_over_max_bytes() -> None:
    result = run(
        config(max_bytes=2 * COUNTED + 21, discard="new"),
        [pub("s.c", size=6), pub("s.d", size=5)],
        existing=["s.a", "s.b"],
    )
    assert seqs(result) == [0, 3]
    assert error_of(result.outcomes[0]) == (503, 10077, "maximum bytes exceeded")


def test_per_subject_limit_evicts_that_subjects_oldest() -> None:
    result = run(
        config(max_msgs_per_subject=2), [pub("s.a"), pub("s.b")], existing=["s.a", "s.b", "s.a"]
    )
    assert seqs(result) == [4, 5]
    assert result.changes.killed == {1}
    assert (result.changes.live_count("s.a"), result.changes.live_count("s.b")) == (2, 2)


def test_discard_new_per_subject_refuses_at_the_limit() -> None:
    cfg = config(max_msgs_per_subject=1, discard="new", discard_new_per_subject=True)
    result = run(cfg, [pub("s.a"), pub("s.b"), pub("s.b")], existing=["s.a"])
    assert seqs(result) == [0, 2, 0]
    assert error_of(result.outcomes[0]) == (503, 10077, "maximum messages per subject exceeded")


def test_discard_new_lets_a_message_in_that_replaces_one_of_its_subject() -> None:
    cfg = config(max_msgs=2, max_msgs_per_subject=1, discard="new")
    result = run(cfg, [pub("s.a"), pub("s.c")], existing=["s.a", "s.b"])
    assert seqs(result) == [3, 0]
    assert result.changes.killed == {1}
    assert error_of(result.outcomes[1])[2] == "maximum messages exceeded"


def test_discard_new_over_its_count_limit_evicts_only_per_subject() -> None:
    # A stream left above max_msgs by an update: discard new never evicts for the count.
    cfg = config(max_msgs=2, max_msgs_per_subject=1, discard="new")
    result = run(cfg, [pub("s.a")], existing=["s.a", "s.b", "s.c", "s.d"])
    assert seqs(result) == [5]
    assert result.changes.killed == {1}
    assert result.changes.msgs == 4


def test_discard_new_max_bytes_takes_a_replacement_no_bigger_than_the_old() -> None:
    cfg = config(max_bytes=2 * COUNTED + 5, max_msgs_per_subject=1, discard="new")
    result = run(cfg, [pub("s.a", size=11), pub("s.a", size=10)], existing=["s.a", "s.b"])
    assert seqs(result) == [0, 3]
    assert error_of(result.outcomes[0])[2] == "maximum bytes exceeded"


# -- the plain path -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "headers", "data_len", "plain"),
    [
        ({}, None, 1, True),
        ({"max_msgs": 2, "max_bytes": 100, "max_age": 10**9}, None, 1, True),
        ({"discard": "new"}, None, 1, True),
        ({"max_msg_size": 5}, None, 5, True),
        ({}, {"Nats-Msg-Id": "x"}, 1, False),
        ({"max_msg_size": 5}, None, 6, False),
        ({"max_msgs_per_subject": 1}, None, 1, False),
        ({"discard": "new", "max_msgs": 2}, None, 1, False),
        ({"discard": "new", "max_bytes": 100}, None, 1, False),
    ],
)
def test_which_batches_take_the_plain_path(
    fields: dict[str, Any], headers: dict[str, str] | None, data_len: int, plain: bool
) -> None:
    publishes = [pub("s.a"), pub("s.b", headers, data_len=data_len)]
    assert is_plain(config(**fields), publishes) is plain


def test_interest_retention_never_takes_the_plain_path() -> None:
    changes = Changes(view_of([]))
    result = plan(config(), changes, [pub("s.a"), pub("s.b")], "", {}, lambda s: s == "s.b")
    assert seqs(result) == [1, 2]
    assert (changes.killed, changes.msgs) == ({1}, 1)


def view_with(subjects: list[str], sizes: list[int], dead: set[int]) -> StreamView:
    """A view of one segment, sequences from 1, with the given sequences deleted."""
    view = empty_view()
    if subjects:
        extend(view, subjects, sizes)
    kill(view, dead)
    return view


def state_of(changes: Changes) -> dict[str, Any]:
    """Everything a plan's changes answer or commit, for comparing two plans."""
    names = ["s.a", "s.b", "s.c", "s.d"]
    return {
        "totals": (changes.first_seq, changes.last_seq, changes.msgs, changes.bytes),
        "num_subjects": changes.num_subjects,
        "appended": (changes.subjects, changes.sizes),
        "killed": changes.killed,
        "new_tombstones": changes.new_tombstones(),
        # Records' first and last are bounds: each path may leave different ones, both right.
        "bounds_hold": all(
            r is None
            or not (live := changes.live_of_subject(n))
            or r.first <= live[0] <= live[-1] <= r.last
            for n, r in changes.records.items()
        ),
        "live": {n: changes.live_of_subject(n) for n in names},
        "live_count": {n: changes.live_count(n) for n in names},
        "last": {n: changes.last_for(n) for n in names},
        "oldest": {n: changes.oldest_for(n) for n in names},
    }


subjects_st = st.sampled_from(["s.a", "s.b", "s.c", "s.d"])
limit_st = st.one_of(st.just(-1), st.integers(0, 12))


@st.composite
def plain_batches(draw: st.DrawFn) -> tuple[StreamConfig, StreamView, list[Publish]]:
    existing = draw(st.lists(subjects_st, max_size=8))
    sizes = draw(st.lists(st.integers(1, 30), min_size=len(existing), max_size=len(existing)))
    dead = draw(st.sets(st.integers(1, max(1, len(existing))))) if existing else set()
    cfg = config(
        max_msgs=draw(limit_st),
        max_bytes=draw(st.one_of(st.just(-1), st.integers(0, 150))),
        max_msg_size=draw(st.one_of(st.just(-1), st.integers(0, 40))),
        discard=draw(st.sampled_from(["old", "new"])),
    )
    publishes = draw(
        st.lists(
            st.builds(
                lambda subject, data_len, size: Publish(subject, None, data_len, size, "r"),
                subjects_st,
                st.integers(0, 20),
                st.integers(1, 40),
            ),
            max_size=10,
        )
    )
    return cfg, view_with(existing, sizes, dead), publishes


@settings(max_examples=400, deadline=None)
@given(plain_batches(), st.sampled_from(["", "old-id"]))
def test_plain_path_plans_exactly_as_message_by_message(
    batch: tuple[StreamConfig, StreamView, list[Publish]], last_msg_id: str
) -> None:
    cfg, view, publishes = batch
    if not is_plain(cfg, publishes):
        return
    plain = StreamPlan(changes=Changes(view), outcomes=[], last_msg_id=last_msg_id)
    each = StreamPlan(changes=Changes(view), outcomes=[], last_msg_id=last_msg_id)
    plan_plain(cfg, plain, publishes)
    plan_each(cfg, each, publishes, {}, None)
    assert plain.outcomes == each.outcomes
    assert plain.accepted == each.accepted
    assert (plain.last_msg_id, plain.new_ids) == (each.last_msg_id, each.new_ids)
    assert state_of(plain.changes) == state_of(each.changes)


def test_plain_batch_over_the_limits_evicts_as_message_by_message() -> None:
    # Three in, with room for two: the stream's old message and the batch's first go.
    result = run(config(max_msgs=2), [pub("s.b"), pub("s.c"), pub("s.d")], existing=["s.a"])
    assert seqs(result) == [2, 3, 4]
    assert (result.changes.first_seq, result.changes.msgs, result.changes.killed) == (3, 2, {1, 2})


def test_empty_batch_leaves_a_stream_above_its_limits_as_it_is() -> None:
    result = run(config(max_msgs=1), [], existing=["s.a", "s.b"])
    assert result.outcomes == []
    assert not result.changes.touched


def batch_pub(subject: str, seq: int, headers: dict[str, str] | None = None) -> Publish:
    hdrs = {"Nats-Batch-Id": "b", **(headers or {})}
    return Publish(subject, encode_headers(hdrs), 1, 10, None, batch="b", batch_seq=seq)


def test_an_atomic_batch_is_planned_whole_or_not_at_all() -> None:
    cfg = config(allow_atomic=True, allow_rollup_hdrs=True)
    good = [batch_pub("s.a", 1), batch_pub("s.b", 2), batch_pub("s.c", 3)]
    result = run(cfg, [pub("s.x"), *good, pub("s.y")])
    assert seqs(result) == [1, 2, 3, 4, 5]
    assert result.outcomes[3] == Outcome(seq=4, batch="b", count=3)
    # One refusal refuses every message of the batch, and undoes what the others planned.
    bad = [
        batch_pub("s.a", 1, {"Nats-Rollup": "all"}),
        batch_pub("s.b", 2),
        batch_pub("s.c", 3, {"Nats-Expected-Last-Subject-Sequence": "9"}),
    ]
    result = run(cfg, [pub("s.x"), *bad, pub("s.y")], existing=["s.old"])
    assert seqs(result) == [2, 0, 0, 0, 3]
    assert {error_of(o)[1] for o in result.outcomes[1:4]} == {10071}
    assert result.accepted == [0, 4]
    assert list(result.changes.live_of_subject("s.old")) == [1]  # the rollup was undone
    assert (result.changes.msgs, result.changes.last_seq) == (3, 3)


# -- malformed headers ---------------------------------------------------------------------------


def raw_pub(subject: str, header_lines: bytes) -> Publish:
    headers = b"NATS/1.0\r\n" + header_lines + b"\r\n"
    return Publish(subject, headers, 1, 10, "r", rules=read_headers(headers))


FIVE_THOUSAND_DIGITS = b"9" * 5000


@pytest.mark.parametrize(
    ("header_lines", "expected"),
    [
        # What nats-server 2.15.1 answers to each (tests/e2e/test_hostile_headers.py).
        (b"Nats-Expected-Stream: \xff\xfe\r\n", (400, 10060, "expected stream does not match")),
        (b"Nats-Rollup: \xff\xfe\r\n", (500, 10111, 'rollup value invalid: "\ufffd\ufffd"')),
        (b"Nats-Rollup: All\xff\r\n", (500, 10111, 'rollup value invalid: "all\ufffd"')),
        (
            b"Nats-Expected-Last-Sequence: " + FIVE_THOUSAND_DIGITS + b"\r\n",
            (400, 10071, "wrong last sequence: 2"),
        ),
        (
            b"Nats-Expected-Last-Subject-Sequence: " + FIVE_THOUSAND_DIGITS + b"\r\n",
            (400, 10071, "wrong last sequence: 0"),
        ),
        (b"Nats-TTL: " + FIVE_THOUSAND_DIGITS + b"\r\n", (400, 10165, "invalid per-message TTL")),
        (b"Nats-TTL: " + b"9" * 40 + b"s\r\n", (400, 10165, "invalid per-message TTL")),
        (
            b"Nats-Schedule: @hourly\r\nNats-Schedule-Target: s.t\r\n"
            b"Nats-Schedule-Time-Zone: America\r\n",
            (400, 10223, "message schedules time zone is invalid"),
        ),
        (
            b"Nats-Schedule: 0 0 " + FIVE_THOUSAND_DIGITS + b" * * *\r\n"
            b"Nats-Schedule-Target: s.t\r\n",
            (400, 10189, "message schedules pattern is invalid"),
        ),
        (b"Nats-Expected-Last-Msg-Id: \xff\r\n", (400, 10070, "wrong last msg ID: ")),
    ],
)
def test_a_malformed_header_fails_its_own_message_only(
    header_lines: bytes, expected: tuple[int, int, str]
) -> None:
    cfg = config(allow_msg_ttl=True, allow_rollup_hdrs=True, allow_msg_schedules=True)
    result = run(cfg, [pub("s.a"), raw_pub("s.x", header_lines), pub("s.b")], existing=["s.old"])
    assert seqs(result) == [2, 0, 3]
    assert error_of(result.outcomes[1]) == expected


def test_a_message_id_of_any_bytes_is_an_id_of_its_own() -> None:
    cfg = config()
    ids = [b"\xff\xfe", b"\xff\xfd", b"\xef\xbf\xbd", b"\xef\xbf\xbdfffe", b"plain"]
    first = run(cfg, [raw_pub("s.a", b"Nats-Msg-Id: " + i + b"\r\n") for i in ids])
    assert seqs(first) == [1, 2, 3, 4, 5]
    assert len(first.new_ids) == 5
    assert first.new_ids["plain"] == 5
    again = run(
        cfg,
        [raw_pub("s.a", b"Nats-Msg-Id: " + i + b"\r\n") for i in reversed(ids)],
        existing=["s.a"] * 5,
        known_ids=first.new_ids,
    )
    assert [o.duplicate for o in again.outcomes] == [True] * 5
    assert seqs(again) == [5, 4, 3, 2, 1]
    # The last id is kept as text (metadata keys are text), one for one with its bytes.
    assert first.last_msg_id == "plain"
    assert msg_id_text(b"\xff\xfe") != msg_id_text(b"\xff\xfd")
    assert msg_id_shown(msg_id_text(b"a\xffb")) == "a\ufffdb"
    expect = raw_pub("s.a", b"Nats-Expected-Last-Msg-Id: \xff\xfe\r\n")
    assert seqs(run(cfg, [expect], last_msg_id=msg_id_text(b"\xff\xfe"))) == [1]


def test_rollup_values_are_read_in_any_case() -> None:
    """As nats-server's getRollup, which lower-cases the value."""
    cfg = config(allow_rollup_hdrs=True)
    result = run(cfg, [pub("s.a", {"Nats-Rollup": "SUB"})], existing=["s.a", "s.b"])
    assert seqs(result) == [3]
    assert result.changes.killed == {1}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "Nats-Msg-Id",
                    "Nats-Expected-Stream",
                    "Nats-Expected-Last-Sequence",
                    "Nats-Expected-Last-Subject-Sequence",
                    "Nats-Expected-Last-Subject-Sequence-Subject",
                    "Nats-Expected-Last-Msg-Id",
                    "Nats-Rollup",
                    "Nats-TTL",
                    "Nats-Schedule",
                    "Nats-Schedule-Target",
                    "Nats-Schedule-Source",
                    "Nats-Schedule-TTL",
                    "Nats-Schedule-Rollup",
                    "Nats-Schedule-Time-Zone",
                    "Nats-Schedule-Next",
                    "Nats-Scheduler",
                ]
            ),
            st.one_of(
                st.binary(max_size=12).filter(lambda b: b"\r" not in b and b"\n" not in b),
                st.sampled_from(
                    [b"9" * 5000, b"18446744073709551617", b"America", b"\xff", b"-1", b"0"]
                ),
            ),
        ),
        min_size=1,
        max_size=4,
    )
)
# An expected subject that no message can have (not a valid subject) has no record.
@example(
    fields=[
        ("Nats-Expected-Last-Subject-Sequence", b"\x00"),
        ("Nats-Expected-Last-Subject-Sequence-Subject", b"."),
    ]
)
def test_no_header_value_fails_a_batch(fields: list[tuple[str, bytes]]) -> None:
    """Whatever a client puts in the publish headers, planning gives its message an outcome
    and the messages around it theirs."""
    lines = b"".join(name.encode() + b": " + value + b"\r\n" for name, value in fields)
    cfg = config(allow_msg_ttl=True, allow_rollup_hdrs=True, allow_msg_schedules=True)
    result = run(cfg, [pub("s.a"), raw_pub("s.x", lines), pub("s.b")], existing=["s.old"])
    assert len(result.outcomes) == 3
    assert result.outcomes[0].seq == 2 and result.outcomes[2].seq > 2
