"""progress.py against a real StreamView: what a claim hands out and what an ack changes.

The expected numbers (ack floors, redelivery counts) are the ones nats-server 2.x reports in
CONSUMER.INFO for the same steps; the end-to-end tests check the same against a running agent.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from infinistream.consumer.config import ConsumerConfig
from infinistream.consumer.progress import (
    ACK,
    EXCEEDED,
    NAK,
    NEXT,
    PROGRESS,
    TERM,
    Ack,
    Delivery,
    Filter,
    PlainAcks,
    acked_by,
    apply_ack,
    apply_ack_run,
    claim,
    copy_state,
    next_deadline,
    num_ack_pending,
    num_pending,
    num_redelivered,
    prune,
    starting_point,
)
from infinistream.consumer.records import ConsumerState
from infinistream.stream.view import StreamView
from support.streamviews import empty_view, extend, kill

S = 1_000_000_000
NOW = 1_000 * S
SIZE = 10


# -- helpers ----------------------------------------------------------------------------------


def append(view: StreamView, *subjects: str, size: int = SIZE, ts: int = 5_000) -> None:
    """Append messages with these subjects, each `size` bytes, as one segment."""
    extend(view, list(subjects), [size] * len(subjects), ts=ts)


def view_of(*subjects: str, size: int = SIZE) -> StreamView:
    view = empty_view()
    if subjects:
        append(view, *subjects, size=size)
    return view


def config(**kw: Any) -> ConsumerConfig:
    kw.setdefault("durable_name", "d")
    kw.setdefault("ack_policy", "explicit")
    kw.setdefault("ack_wait", 30 * S)
    kw.setdefault("max_deliver", -1)
    kw.setdefault("max_ack_pending", 1000)
    return ConsumerConfig(**kw)


def new_state(cfg: ConsumerConfig, view: StreamView, seq_for_time: int = 0) -> ConsumerState:
    """The state CONSUMER.CREATE writes (api._create_new)."""
    start, start_seqs = starting_point(cfg, view, seq_for_time)
    floor = start_seqs[0] - 1 if start_seqs else start
    return ConsumerState(uid="u", stream_seq=start, ack_floor_stream=floor, start_seqs=start_seqs)


def take(
    state: ConsumerState,
    cfg: ConsumerConfig,
    view: StreamView,
    batch: int = 100,
    now: int = NOW,
    **kw: Any,
) -> list[tuple[int, int, int]]:
    """Claim and return (stream seq, consumer seq, deliveries) of each delivery."""
    out, _ = claim(state, cfg, Filter(cfg), view, now, batch, **kw)
    return [(d.stream_seq, d.consumer_seq, d.deliveries) for d in out]


def seqs(state: ConsumerState, cfg: ConsumerConfig, view: StreamView, **kw: Any) -> list[int]:
    return [s for s, _, _ in take(state, cfg, view, **kw)]


def ack(
    state: ConsumerState,
    cfg: ConsumerConfig,
    seq: int,
    kind: str = ACK,
    *,
    now: int = NOW,
    delay: int | None = None,
) -> bool:
    entry = state.pending.get(seq)
    dseq = entry.consumer_seq if entry is not None else 0
    deliveries = entry.deliveries if entry is not None else 1
    return apply_ack(state, cfg, Ack(kind, seq, deliveries, delay, dseq), now)


def floor(state: ConsumerState) -> tuple[int, int]:
    return (state.ack_floor_consumer, state.ack_floor_stream)


def delivered(state: ConsumerState) -> tuple[int, int]:
    return (state.consumer_seq, state.stream_seq)


# -- filters and starting points --------------------------------------------------------------


def test_filter_of_nothing_one_and_several_subjects() -> None:
    view = view_of("s.a", "s.b", "t.c", "s.a", "t.d")
    assert list(Filter(config()).live_seqs(view, 1)) == [1, 2, 3, 4, 5]
    assert list(Filter(config(filter_subject="s.a")).live_seqs(view, 2)) == [4]
    multi = Filter(config(filter_subjects=["s.b", "t.*"]))
    assert list(multi.live_seqs(view, 1)) == [2, 3, 5]
    assert multi.matches("t.x") and not multi.matches("s.a")
    # ">" filters nothing out.
    assert not Filter(config(filter_subjects=[">", "s.a"]))


def test_count_after_skips_deleted_messages() -> None:
    view = view_of("s.a", "s.b", "s.a", "s.b", "s.a")
    kill(view, [3])
    assert Filter(config()).count_after(view, 0) == 4
    assert Filter(config()).count_after(view, 2) == 2
    assert Filter(config(filter_subject="s.a")).count_after(view, 0) == 2
    assert Filter(config(filter_subjects=["s.a", "s.b"])).count_after(view, 3) == 2
    assert Filter(config()).count_after(view, 9) == 0


def test_a_filter_on_the_streams_only_subject_counts_as_no_filter() -> None:
    view = view_of("s.a", "s.a", "s.a", "s.a", "s.a")
    kill(view, [2])
    one = Filter(config(filter_subject="s.a"))
    assert [one.count_after(view, after) for after in range(6)] == [4, 3, 3, 2, 1, 0]
    assert list(one.live_seqs(view, 2)) == [3, 4, 5]
    # Another subject's message in the stream: counted record by record again, and once it
    # is deleted, the filter passes every message.
    append(view, "s.b", "s.a")
    assert one.count_after(view, 0) == 5 and list(one.live_seqs(view, 5)) == [5, 7]
    kill(view, [6])
    assert one.count_after(view, 0) == 5 and list(one.live_seqs(view, 5)) == [5, 7]
    assert Filter(config(filter_subject="s.b")).count_after(view, 0) == 0


@settings(max_examples=100, deadline=None)
@given(
    subjects=st.lists(st.sampled_from(["s.a", "s.b", "t.c"]), min_size=1, max_size=40),
    killed=st.sets(st.integers(1, 40), max_size=20),
    filters=st.sampled_from([[], ["s.a"], ["s.*"], ["s.a", "t.c"], [">"]]),
)
def test_count_after_counts_what_live_seqs_yields(
    subjects: list[str], killed: set[int], filters: list[str]
) -> None:
    # Counted either by walking the tail or by subject and tombstone totals: the same answer.
    view = view_of(*subjects)
    for seq in sorted(killed):
        if seq <= len(subjects):
            kill(view, [seq])
    filt = Filter(config(filter_subjects=filters) if filters else config())
    for after in range(len(subjects) + 2):
        assert filt.count_after(view, after) == sum(1 for _ in filt.live_seqs(view, after + 1))


@pytest.mark.parametrize(
    ("kw", "start", "start_seqs"),
    [
        ({}, 0, []),
        ({"deliver_policy": "new"}, 6, []),
        ({"deliver_policy": "last"}, 5, []),
        ({"deliver_policy": "last", "filter_subject": "s.b"}, 4, []),
        ({"deliver_policy": "last", "filter_subject": "nope"}, 6, []),
        ({"deliver_policy": "by_start_sequence", "opt_start_seq": 4}, 3, []),
        ({"deliver_policy": "by_start_sequence", "opt_start_seq": 40}, 39, []),
        ({"deliver_policy": "last_per_subject", "filter_subject": "s.>"}, 6, [4, 5, 6]),
        (
            {"deliver_policy": "last_per_subject", "filter_subjects": ["s.a", "s.c"]},
            6,
            [4, 6],
        ),
    ],
)
def test_starting_points(kw: dict[str, Any], start: int, start_seqs: list[int]) -> None:
    view = view_of("s.a", "s.b", "s.a", "s.c", "s.b", "s.a")
    assert starting_point(config(**kw), view, 0) == (start, start_seqs)


def test_by_start_time_starts_at_the_given_sequence() -> None:
    view = view_of("s.a", "s.b", "s.a")
    cfg = config(deliver_policy="by_start_time", opt_start_time="2020-01-01T00:00:00Z")
    assert starting_point(cfg, view, 2) == (1, [])


def test_deliver_all_starts_at_the_first_live_message() -> None:
    view = view_of("a", "b", "c", "d")
    kill(view, range(view.first_seq, 3))
    state = new_state(config(), view)
    assert (state.stream_seq, state.ack_floor_stream) == (2, 2)
    assert seqs(state, config(), view) == [3, 4]


# -- claims -----------------------------------------------------------------------------------


def test_claim_hands_out_in_order_and_tracks_pending() -> None:
    cfg = config()
    view = view_of("a", "b", "c", "d", "e")
    state = new_state(cfg, view)
    assert take(state, cfg, view, batch=3) == [(1, 1, 1), (2, 2, 1), (3, 3, 1)]
    assert delivered(state) == (3, 3)
    # Deliveries never move the floor: only acks do (nats-server's consumer store).
    assert floor(state) == (0, 0)
    assert num_ack_pending(state) == 3
    assert num_pending(state, Filter(cfg), view) == 2
    assert state.pending[2].deadline == NOW + 30 * S
    assert state.last_delivered_ns == NOW
    assert take(state, cfg, view) == [(4, 4, 1), (5, 5, 1)]
    assert take(state, cfg, view) == []


def test_claim_with_a_filter_skips_other_subjects() -> None:
    cfg = config(filter_subjects=["s.b", "s.c"])
    view = view_of("s.a", "s.b", "s.a", "s.c", "s.b", "s.a")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [2, 4, 5]
    assert delivered(state) == (3, 5)
    assert floor(state) == (0, 0)
    append(view, "s.a", "s.c", "s.b")
    assert num_pending(state, Filter(cfg), view) == 2
    assert seqs(state, cfg, view) == [8, 9]


def test_max_ack_pending_limits_outstanding_messages() -> None:
    cfg = config(max_ack_pending=2)
    view = view_of("a", "b", "c", "d", "e")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1, 2]
    assert seqs(state, cfg, view) == []
    assert ack(state, cfg, 1)
    assert seqs(state, cfg, view) == [3]
    assert num_ack_pending(state) == 2


def test_max_ack_pending_does_not_apply_without_acks() -> None:
    cfg = config(ack_policy="none", max_ack_pending=2)
    view = view_of("a", "b", "c")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1, 2, 3]
    assert state.pending == {}
    # With ack policy none the floor follows what was delivered.
    assert floor(state) == delivered(state) == (3, 3)


def test_redelivery_after_the_ack_wait_comes_first() -> None:
    cfg = config(ack_wait=5 * S)
    view = view_of("a", "b", "c")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view, batch=2) == [1, 2]
    assert take(state, cfg, view, batch=5, now=NOW + 4 * S) == [(3, 3, 1)]
    later = NOW + 5 * S
    assert take(state, cfg, view, now=later) == [(1, 4, 2), (2, 5, 2)]
    assert state.pending[1].deadline == later + 5 * S
    # The original delivery sequence stays for the floor.
    assert state.pending[1].first_consumer_seq == 1
    assert delivered(state) == (5, 3)
    assert num_redelivered(state, cfg) == 2
    assert next_deadline(state) == NOW + 4 * S + 5 * S  # message 3, delivered at +4s


def test_backoff_sets_each_redelivery_deadline() -> None:
    cfg = config(ack_wait=1 * S, backoff=[1 * S, 3 * S], max_deliver=5)
    view = view_of("a")
    state = new_state(cfg, view)
    now = NOW
    assert take(state, cfg, view, now=now) == [(1, 1, 1)]
    assert state.pending[1].deadline == now + S
    now += S
    assert take(state, cfg, view, now=now) == [(1, 2, 2)]
    assert state.pending[1].deadline == now + 3 * S
    assert take(state, cfg, view, now=now + 2 * S) == []
    now += 3 * S
    assert take(state, cfg, view, now=now) == [(1, 3, 3)]
    # The last step repeats.
    assert state.pending[1].deadline == now + 3 * S


def test_max_deliver_stops_redelivery_but_keeps_the_floor() -> None:
    cfg = config(ack_wait=S, max_deliver=2)
    view = view_of("a", "b")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1, 2]
    assert take(state, cfg, view, now=NOW + S) == [(1, 3, 2), (2, 4, 2)]
    before = copy_state(state)
    assert take(state, cfg, view, now=NOW + 3 * S) == []
    # Nothing handed out, but the state changed: the caller must commit it.
    assert state != before
    assert state.pending[1].deadline == EXCEEDED
    assert num_ack_pending(state) == 0
    assert num_redelivered(state, cfg) == 2
    assert floor(state) == (0, 0)
    assert next_deadline(state) == 0
    assert take(state, cfg, view, now=NOW + 100 * S) == []
    # A new message: delivered, and acking it empties what awaits acks: floor = delivered.
    append(view, "c")
    assert take(state, cfg, view, now=NOW + 100 * S) == [(3, 5, 1)]
    assert floor(state) == (0, 0)
    assert ack(state, cfg, 3)
    assert floor(state) == (5, 3)
    # nats-server keeps counting the two as redelivered until they are acked.
    assert num_redelivered(state, cfg) == 2
    assert ack(state, cfg, 1)
    assert num_redelivered(state, cfg) == 1
    assert floor(state) == (5, 3)


def test_max_deliver_one_reports_no_redeliveries() -> None:
    cfg = config(ack_wait=S, max_deliver=1)
    view = view_of("a")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1]
    assert take(state, cfg, view, now=NOW + 2 * S) == []
    assert state.pending[1].deadline == EXCEEDED
    assert num_redelivered(state, cfg) == 0


def test_exceeded_messages_do_not_count_against_max_ack_pending() -> None:
    cfg = config(ack_wait=S, max_deliver=1, max_ack_pending=1)
    view = view_of("a", "b")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1]
    assert seqs(state, cfg, view, now=NOW + 2 * S) == [2]


def test_pending_messages_gone_from_the_stream_are_acked_away() -> None:
    cfg = config(ack_wait=S)
    view = view_of("a", "b", "c", "d")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1, 2, 3, 4]
    kill(view, [1])
    kill(view, [3])
    assert prune(state, cfg, view)
    assert sorted(state.pending) == [2, 4]
    # As nats-server: the removal of 1 acts as its ack, so the floor moves to 1.
    assert floor(state) == (1, 1)
    assert not prune(state, cfg, view)
    assert take(state, cfg, view, now=NOW + S) == [(2, 5, 2), (4, 6, 2)]


def test_claim_prunes_deleted_pending_even_before_their_deadline() -> None:
    cfg = config()
    view = view_of("a", "b")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1, 2]
    kill(view, range(view.first_seq, 3))
    assert take(state, cfg, view) == []
    assert state.pending == {}
    assert floor(state) == delivered(state) == (2, 2)


def test_deleted_pending_message_under_ack_all_acks_everything_below() -> None:
    cfg = config(ack_policy="all")
    view = view_of("a", "b", "c", "d")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1, 2, 3, 4]
    kill(view, [3])
    assert prune(state, cfg, view)
    assert sorted(state.pending) == [4]
    assert floor(state) == (3, 3)


def test_exceeded_messages_gone_from_the_stream_are_forgotten() -> None:
    cfg = config(ack_wait=S, max_deliver=1)
    view = view_of("a", "b")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1, 2]
    take(state, cfg, view, now=NOW + 2 * S)
    kill(view, [2])
    assert prune(state, cfg, view)
    assert sorted(state.pending) == [1]
    assert floor(state) == (0, 0)


def test_max_bytes_counts_sizes() -> None:
    cfg = config()
    view = view_of("a", "b", "c", size=40)
    state = new_state(cfg, view)
    out, blocked = claim(state, cfg, Filter(cfg), view, NOW, 10, 100)
    assert [d.stream_seq for d in out] == [1, 2] and blocked
    out, blocked = claim(state, cfg, Filter(cfg), view, NOW, 10, 39)
    assert out == [] and blocked
    assert delivered(state) == (2, 2)
    out, blocked = claim(state, cfg, Filter(cfg), view, NOW, 10, 40)
    assert [d.stream_seq for d in out] == [3] and not blocked


def test_chunk_bytes_ends_a_claim_without_blocking_it() -> None:
    cfg = config()
    view = view_of("a", "b", "c", "d", "e", size=40)
    state = new_state(cfg, view)
    out, blocked = claim(state, cfg, Filter(cfg), view, NOW, 10, chunk_bytes=100)
    assert [d.stream_seq for d in out] == [1, 2] and not blocked
    # The next claim goes on where it stopped; a message over the chunk goes alone.
    out, blocked = claim(state, cfg, Filter(cfg), view, NOW, 10, chunk_bytes=30)
    assert [d.stream_seq for d in out] == [3] and not blocked
    # max_bytes still blocks inside a chunk, chunk_bytes only ends it.
    out, blocked = claim(state, cfg, Filter(cfg), view, NOW, 10, 70, chunk_bytes=100)
    assert [d.stream_seq for d in out] == [4] and blocked
    assert delivered(state) == (4, 4)


def test_sizes_of_one_claim_come_from_each_message_s_own_section() -> None:
    cfg = config()
    view = view_of("a", "b", size=40)
    append(view, "c", "d", size=10)
    append(view, "e", size=70)
    state = new_state(cfg, view)
    lengths = [view.record_length_of(seq) for seq in range(1, 6)]
    # A chunk that ends inside the second section, then one that ends before the third.
    chunk = lengths[0] + lengths[1] + lengths[2]
    out, _ = claim(state, cfg, Filter(cfg), view, NOW, 10, chunk_bytes=chunk)
    assert [d.stream_seq for d in out] == [1, 2, 3]
    out, _ = claim(state, cfg, Filter(cfg), view, NOW, 10, chunk_bytes=lengths[3] + 1)
    assert [d.stream_seq for d in out] == [4]
    out, _ = claim(state, cfg, Filter(cfg), view, NOW, 10, chunk_bytes=lengths[4])
    assert [d.stream_seq for d in out] == [5]


@settings(max_examples=100, deadline=None)
@given(
    sections=st.lists(st.lists(st.integers(1, 60), min_size=1, max_size=8), min_size=1, max_size=5),
    killed=st.sets(st.integers(1, 40), max_size=10),
    chunk=st.integers(1, 300),
    batch=st.integers(1, 12),
)
def test_claims_by_count_and_chunk_take_what_each_record_s_length_allows(
    sections: list[list[int]], killed: set[int], chunk: int, batch: int
) -> None:
    # The run of new messages is sized a segment at a time: the same cut as record by record.
    view = empty_view()
    for sizes in sections:
        extend(view, ["s"] * len(sizes), sizes, ts=5_000)
    kill(view, sorted(s for s in killed if s <= view.last_seq))
    cfg = config()
    state = new_state(cfg, view)
    live = list(view.live_seqs(1))
    while live:
        out, blocked = claim(state, cfg, Filter(cfg), view, NOW, batch, chunk_bytes=chunk)
        expected, used = [], 0
        for seq in live[:batch]:
            if expected and used + view.record_length_of(seq) > chunk:
                break
            used += view.record_length_of(seq)
            expected.append(seq)
        assert [d.stream_seq for d in out] == expected and not blocked
        assert [d.consumer_seq for d in out] == list(
            range(out[0].consumer_seq, state.consumer_seq + 1)
        )
        assert sorted(state.pending) == [s for s in view.live_seqs(1) if s <= expected[-1]]
        live = live[len(expected) :]


def test_chunk_bytes_keeps_redeliveries_in_order() -> None:
    cfg = config(ack_wait=S)
    view = view_of("a", "b", "c", size=40)
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1, 2, 3]
    # All three due again: a chunk of two, then the third, then nothing new.
    out, blocked = claim(state, cfg, Filter(cfg), view, NOW + 2 * S, 10, chunk_bytes=80)
    assert [(d.stream_seq, d.deliveries) for d in out] == [(1, 2), (2, 2)] and not blocked
    out, blocked = claim(state, cfg, Filter(cfg), view, NOW + 2 * S, 10, chunk_bytes=80)
    assert [(d.stream_seq, d.deliveries) for d in out] == [(3, 2)] and not blocked
    out, _ = claim(state, cfg, Filter(cfg), view, NOW + 2 * S, 10, chunk_bytes=80)
    assert out == []


def test_max_bytes_uses_the_size_function() -> None:
    cfg = config(ack_wait=S)
    view = view_of("a", "b", "c")
    state = new_state(cfg, view)
    calls: list[tuple[int, int, int, int]] = []

    def size_of(seq: int, deliveries: int, consumer_seq: int, fresh: int) -> int:
        calls.append((seq, deliveries, consumer_seq, fresh))
        return 100

    out, blocked = claim(state, cfg, Filter(cfg), view, NOW, 10, 250, size_of)
    assert [d.stream_seq for d in out] == [1, 2] and blocked
    assert calls == [(1, 1, 1, 0), (2, 1, 2, 1), (3, 1, 3, 2)]
    calls.clear()
    out, blocked = claim(state, cfg, Filter(cfg), view, NOW + S, 10, 150, size_of)
    # The redelivery of 1 is sized with its new delivery count and consumer sequence.
    assert [d.stream_seq for d in out] == [1] and blocked
    assert calls[0] == (1, 2, 3, 0)


def test_max_bytes_stopping_redeliveries_still_retires_exceeded_ones() -> None:
    cfg = config(ack_wait=S, max_deliver=2)
    view = view_of("a", "b", "c", "d", size=40)
    state = new_state(cfg, view)
    seqs(state, cfg, view, batch=3)
    state.pending[3] = msgspec.structs.replace(state.pending[3], deliveries=2)
    out, blocked = claim(state, cfg, Filter(cfg), view, NOW + S, 10, 40)
    assert [(d.stream_seq, d.deliveries) for d in out] == [(1, 2)] and blocked
    assert state.pending[2].deadline == NOW + S  # due, left for the next request
    assert state.pending[3].deadline == EXCEEDED
    assert state.last_delivered_ns == NOW + S
    assert state.stream_seq == 3  # nothing new handed out past the block


def test_last_per_subject_hands_out_the_lasts_then_newer() -> None:
    cfg = config(deliver_policy="last_per_subject", filter_subjects=["s.a", "s.c"])
    view = view_of("s.a", "s.b", "s.a", "s.c", "s.b", "s.a")
    state = new_state(cfg, view)
    assert floor(state) == (0, 3)
    assert num_pending(state, Filter(cfg), view) == 2
    append(view, "s.a", "s.c", "s.b")
    assert num_pending(state, Filter(cfg), view) == 4
    assert take(state, cfg, view, batch=1) == [(4, 1, 1)]
    assert take(state, cfg, view) == [(6, 2, 1), (7, 3, 1), (8, 4, 1)]
    assert num_pending(state, Filter(cfg), view) == 0


def test_last_per_subject_skips_deleted_lasts() -> None:
    cfg = config(deliver_policy="last_per_subject", filter_subject=">")
    view = view_of("a", "b", "c")
    state = new_state(cfg, view)
    assert state.start_seqs == [1, 2, 3]
    kill(view, [2])
    assert num_pending(state, Filter(cfg), view) == 2
    assert seqs(state, cfg, view) == [1, 3]


# -- acks -------------------------------------------------------------------------------------


def test_explicit_acks_move_the_floor_like_nats_server() -> None:
    cfg = config()
    view = view_of("a", "b", "c", "d", "e")
    state = new_state(cfg, view)
    seqs(state, cfg, view, batch=3)
    assert ack(state, cfg, 2)
    # Out of order: the floor stays below the oldest unacknowledged message.
    assert floor(state) == (0, 0)
    assert ack(state, cfg, 1)
    assert floor(state) == (2, 2)
    assert not ack(state, cfg, 1)  # a double ack changes nothing
    assert ack(state, cfg, 3, TERM)  # +TERM is an ack
    assert floor(state) == delivered(state) == (3, 3)
    assert state.last_ack_ns == NOW


def test_acks_in_order_move_the_floor_one_by_one() -> None:
    cfg = config(ack_wait=S)
    view = view_of("a", "b", "c", "d", "e")
    state = new_state(cfg, view)
    seqs(state, cfg, view, batch=5)
    # Message 3 redelivered: it is consumer sequence 6 now, and the floor stops below it.
    state.pending[3] = msgspec.structs.replace(state.pending[3], deadline=0)
    assert seqs(state, cfg, view) == [3]
    assert ack(state, cfg, 1)
    assert floor(state) == (1, 1)
    assert ack(state, cfg, 2)
    assert floor(state) == (2, 2)
    assert ack(state, cfg, 3)
    assert floor(state) == (3, 3)
    assert ack(state, cfg, 4) and ack(state, cfg, 5)
    assert floor(state) == delivered(state) == (6, 5)


def test_ack_floor_with_a_filter_gap() -> None:
    cfg = config(filter_subject="s.a")
    view = view_of("s.a", "s.b", "s.a", "s.c", "s.b", "s.a")
    state = new_state(cfg, view)
    assert seqs(state, cfg, view) == [1, 3, 6]
    assert ack(state, cfg, 3)
    assert floor(state) == (0, 0)
    assert ack(state, cfg, 1)
    assert floor(state) == (2, 5)
    assert ack(state, cfg, 6)
    assert floor(state) == (3, 6)


def test_ack_past_what_was_delivered_is_ignored() -> None:
    cfg = config()
    view = view_of("a", "b", "c")
    state = new_state(cfg, view)
    seqs(state, cfg, view, batch=1)
    assert not apply_ack(state, cfg, Ack(ACK, 3, 1, None, 3), NOW)
    assert not apply_ack(state, cfg, Ack(ACK, 99, 1, None, 99), NOW)
    assert sorted(state.pending) == [1]


def test_ack_all_acks_everything_up_to_it() -> None:
    cfg = config(ack_policy="all")
    view = view_of("a", "b", "c", "d", "e")
    state = new_state(cfg, view)
    seqs(state, cfg, view)
    assert ack(state, cfg, 3)
    assert sorted(state.pending) == [4, 5]
    assert floor(state) == (3, 3)
    assert not ack(state, cfg, 2)  # below the floor
    # +TERM under ack policy all acks everything up to it too, as nats-server does.
    assert ack(state, cfg, 4, TERM)
    assert sorted(state.pending) == [5]
    assert floor(state) == (4, 4)


def test_ack_all_floor_takes_the_consumer_sequence_of_the_acked_delivery() -> None:
    cfg = config(ack_policy="all", ack_wait=S)
    view = view_of("a", "b")
    state = new_state(cfg, view)
    seqs(state, cfg, view)
    assert ack(state, cfg, 2, NAK)
    assert take(state, cfg, view) == [(2, 3, 2)]
    assert apply_ack(state, cfg, Ack(ACK, 2, 2, None, 3), NOW)
    assert floor(state) == (3, 2)
    assert state.pending == {}


def test_ack_policy_none_ignores_acks() -> None:
    cfg = config(ack_policy="none")
    view = view_of("a")
    state = new_state(cfg, view)
    seqs(state, cfg, view)
    for kind in (ACK, NAK, TERM, PROGRESS, NEXT):
        assert not apply_ack(state, cfg, Ack(kind, 1, 1, None, 1), NOW)


def test_nak_redelivers_now_even_with_backoff() -> None:
    cfg = config(ack_wait=10 * S, backoff=[10 * S, 20 * S])
    view = view_of("a")
    state = new_state(cfg, view)
    seqs(state, cfg, view)
    assert ack(state, cfg, 1, NAK)
    assert state.pending[1].deadline == 0
    assert take(state, cfg, view) == [(1, 2, 2)]


def test_nak_with_delay_waits_that_long() -> None:
    cfg = config()
    view = view_of("a")
    state = new_state(cfg, view)
    seqs(state, cfg, view)
    assert ack(state, cfg, 1, NAK, delay=2 * S)
    assert take(state, cfg, view, now=NOW + S) == []
    assert take(state, cfg, view, now=NOW + 2 * S) == [(1, 2, 2)]


def test_progress_restarts_the_ack_wait() -> None:
    cfg = config(ack_wait=5 * S)
    view = view_of("a")
    state = new_state(cfg, view)
    seqs(state, cfg, view)
    assert ack(state, cfg, 1, PROGRESS, now=NOW + 4 * S)
    assert take(state, cfg, view, now=NOW + 6 * S) == []
    assert take(state, cfg, view, now=NOW + 9 * S) == [(1, 2, 2)]


def test_nak_progress_and_term_of_unknown_messages_change_nothing() -> None:
    cfg = config(ack_wait=S, max_deliver=1)
    view = view_of("a", "b")
    state = new_state(cfg, view)
    seqs(state, cfg, view, batch=1)
    take(state, cfg, view, now=NOW + 2 * S, batch=0)
    assert state.pending[1].deadline == EXCEEDED
    for kind in (NAK, PROGRESS):
        assert not ack(state, cfg, 1, kind)  # past max_deliver: nothing to redeliver
        assert not ack(state, cfg, 2, kind)  # never delivered
    assert state.pending[1].deadline == EXCEEDED


# -- interest ---------------------------------------------------------------------------------


def test_acked_by() -> None:
    cfg = config(filter_subject="s.a", ack_wait=S, max_deliver=1)
    view = view_of("s.a", "s.b", "s.a", "s.a")
    state = new_state(cfg, view)
    filt = Filter(cfg)
    assert acked_by(state, filt, 2, "s.b")  # not its subject
    assert not acked_by(state, filt, 1, "s.a")  # not delivered yet
    seqs(state, cfg, view, batch=2)
    assert not acked_by(state, filt, 1, "s.a")  # awaiting its ack
    ack(state, cfg, 1)
    assert acked_by(state, filt, 1, "s.a")
    take(state, cfg, view, now=NOW + 2 * S, batch=0)
    # Past max_deliver and never acked: an interest stream keeps it, as nats-server does.
    assert state.pending[3].deadline == EXCEEDED
    assert not acked_by(state, filt, 3, "s.a")


# -- properties -------------------------------------------------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(["claim", "ack", "nak", "term", "wpi", "publish", "delete", "tick"]),
        st.integers(min_value=1, max_value=12),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    OPS,
    st.sampled_from(["explicit", "all", "none"]),
    st.sampled_from([-1, 1, 3]),
    st.sampled_from([0, 3]),
)
# Ack policy all: a redelivery's ack moved the floor past a pending message's first delivery,
# then that message was deleted; it used to stay pending and be handed out again.
@example(
    [
        ("claim", 3),
        ("tick", 4),
        ("claim", 1),
        ("claim", 1),
        ("ack", 1),
        ("delete", 4),
        ("claim", 1),
    ],
    "all",
    -1,
    0,
)
def test_invariants_hold_for_any_sequence_of_operations(
    ops: list[tuple[str, int]], policy: str, max_deliver: int, max_ack_pending: int
) -> None:
    cfg = config(
        ack_policy=policy,
        ack_wait=2 * S,
        max_deliver=max_deliver,
        max_ack_pending=max_ack_pending,
        filter_subjects=["a", "c"],
    )
    view = view_of("a", "b", "c", "a")
    state = new_state(cfg, view)
    now = NOW
    handed: dict[int, int] = {}  # stream seq -> deliveries so far
    for op, n in ops:
        if op == "claim":
            out, _ = claim(state, cfg, Filter(cfg), view, now, n)
            for d in out:
                assert isinstance(d, Delivery)
                assert view.is_live(d.stream_seq)
                assert view.subject_of(d.stream_seq) in ("a", "c")
                handed[d.stream_seq] = handed.get(d.stream_seq, 0) + 1
                assert d.deliveries == handed[d.stream_seq]
                if max_deliver > 0:
                    assert d.deliveries <= max_deliver
                if policy == "none":
                    assert d.deliveries == 1
        elif op in ("ack", "nak", "term", "wpi"):
            kind = {"ack": ACK, "nak": NAK, "term": TERM, "wpi": PROGRESS}[op]
            ack(state, cfg, n, kind, now=now)
        elif op == "publish":
            append(view, "a" if n % 3 else "b")
        elif op == "delete":
            kill(view, [n])
        else:
            now += n * S // 2
        # Invariants after every step.
        assert state.ack_floor_stream <= max(state.stream_seq, state.ack_floor_stream)
        assert state.ack_floor_consumer <= state.consumer_seq
        for seq, p in state.pending.items():
            assert seq in handed
            assert seq > state.ack_floor_stream or p.deadline == EXCEEDED or policy == "all"
            assert p.consumer_seq <= state.consumer_seq
        if max_ack_pending and policy != "none":
            assert num_ack_pending(state) <= max_ack_pending
        if policy == "none":
            assert state.pending == {}
        # The state survives its own encoding (it is stored as msgpack).
        raw = msgspec.msgpack.encode(state)
        assert msgspec.msgpack.decode(raw, type=ConsumerState) == state


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([ACK, NAK, TERM, PROGRESS, NEXT]), st.integers(1, 14)),
        max_size=30,
    ),
    st.sampled_from(["explicit", "all"]),
    st.integers(1, 3),
    st.none() | st.tuples(st.integers(1, 4), st.integers(1, 14)),
    st.booleans(),
)
def test_a_run_of_acks_is_each_ack_in_turn(
    acks: list[tuple[str, int]],
    policy: str,
    rounds: int,
    in_order: tuple[int, int] | None,
    columns: bool,
) -> None:
    if in_order is not None:
        # A client's usual run: plain acks of sequences in order, after some others or not.
        acks = [*acks[: in_order[0] - 1], *((ACK, s) for s in range(in_order[0], in_order[1]))]
    cfg = config(ack_policy=policy, ack_wait=2 * S, max_deliver=3)
    view = view_of(*["a"] * 12)
    state = new_state(cfg, view)
    for r in range(rounds):  # some redelivered, their consumer sequences apart from the first
        claim(state, cfg, Filter(cfg), view, NOW + r * 3 * S, 12 - 3 * r)
    now = NOW + rounds * 3 * S
    run = [
        Ack(kind, seq, 1, None, entry.consumer_seq if (entry := state.pending.get(seq)) else seq)
        for kind, seq in acks
    ]
    one_by_one = copy_state(state)
    expected = [apply_ack(one_by_one, cfg, a, now) for a in run]
    given_run: list[Ack | PlainAcks] = list(run)
    if columns:  # plain acks in a row as the parser hands them over: one `PlainAcks`
        given_run = []
        for a in run:
            last = given_run[-1] if given_run else None
            if a.kind != ACK:
                given_run.append(a)
            elif isinstance(last, PlainAcks):
                last.stream_seqs.append(a.stream_seq)
                last.consumer_seqs.append(a.consumer_seq)
            else:
                given_run.append(PlainAcks([a.stream_seq], [a.consumer_seq]))
    assert apply_ack_run(state, cfg, given_run, now) == any(expected)
    assert state == one_by_one
