"""The checker of the fault suite finds each kind of violation, and takes what is allowed; a
run's waits count events, and fail at their safety net when the events do not come."""

from __future__ import annotations

import json
import time

import pytest

from fault.jepsen import History, check
from fault.workload import until

pytestmark = pytest.mark.fault


def history(acks: dict[str, int | str | None]) -> History:
    """Messages of publisher 0 (numbered in order) and their answers: a sequence, an error
    text, or None for no answer."""
    h = History()
    for msg_id, answer in acks.items():
        n = int(msg_id.split("-")[1])
        h.send(0, n)
        if isinstance(answer, int):
            h.answer(msg_id, json.dumps({"stream": "S", "seq": answer}).encode())
        elif isinstance(answer, str):
            h.answer(msg_id, json.dumps({"error": {"code": 503, "err_code": 10077}}).encode())
    return h


def consumed(h: History, stored: dict[int, str]) -> History:
    for seq, msg_id in stored.items():
        h.consume(msg_id, seq)
    return h


def test_a_clean_run_passes_and_indeterminate_publishes_may_go_either_way() -> None:
    h = history({"p0-1": 1, "p0-2": "refused", "p0-3": None, "p0-4": 3, "p0-5": None})
    # p0-2 was refused but stored (its commit's outcome was unknown), p0-3 and p0-5 were
    # never answered: one stored, one not. All fine.
    stored = {1: "p0-1", 2: "p0-2", 3: "p0-4", 4: "p0-5"}
    verdict = check("clean", consumed(h, stored), stored)
    assert verdict.ok, verdict.problems()
    assert (verdict.sent, verdict.acked, verdict.errors, verdict.unanswered) == (5, 2, 1, 2)


def test_each_violation_is_found() -> None:
    h = history({"p0-1": 1, "p0-2": 2, "p0-3": 3, "p0-4": 4, "p0-5": 5})
    stored = {
        1: "p0-1",
        # p0-2 lost; p0-3 stored twice; p0-4 stored before p0-3; p0-5 at the wrong sequence;
        # p9-9 never sent.
        2: "p0-4",
        3: "p0-3",
        4: "p0-3",
        6: "p0-5",
        7: "p9-9",
    }
    h.consume("p0-1", 1)
    h.consume("p0-1", 1)  # a redelivery is allowed
    h.consume("p7-7", 9)  # consumed, but not in the stream
    verdict = check("broken", h, stored)
    assert not verdict.ok
    assert verdict.lost == ["p0-2"]
    assert verdict.duplicated == ["p0-3"]
    # Publisher 0's messages in the order sent sit at 1, 3, 4, 2, 6: p0-4 comes too early.
    assert verdict.reordered == ["p0-4"]
    # Acked at 3, 4 and 5; stored (also) at 4, 2 and 6.
    assert verdict.wrong_seq == ["p0-3", "p0-4", "p0-5"]
    assert verdict.unexpected == ["p9-9"]
    assert set(verdict.not_consumed) == {"p0-3", "p0-4", "p0-5", "p9-9"}
    assert verdict.consumed_unstored == ["p7-7"]
    assert verdict.redelivered == 1


def test_losses_the_fault_explains_are_counted_apart() -> None:
    h = history({"p0-1": 1, "p0-2": 2, "p0-3": 3})
    stored = {1: "p0-1", 3: "p0-3"}
    verdict = check("damage", consumed(h, stored), stored, damaged={"p0-2"})
    assert verdict.ok
    assert (verdict.lost, verdict.lost_to_damage) == ([], ["p0-2"])
    # Not explained: lost.
    h = history({"p0-1": 1, "p0-2": 2})
    assert check("loss", consumed(h, {1: "p0-1"}), {1: "p0-1"}).lost == ["p0-2"]


def test_progress_counts_what_was_sent_after_a_moment() -> None:
    h = history({"p0-1": 1, "p0-2": "refused", "p0-3": None})
    later = time.monotonic()
    h.send(0, 4)
    h.send(0, 5)
    h.answer("p0-4", json.dumps({"stream": "S", "seq": 2}).encode())
    h.give_up("p0-5")
    h.give_up("p0-4")  # answered already: not given up
    assert (h.acked_since(0.0), h.refused_since(0.0), h.unacked_since(0.0)) == (2, 1, 2)
    assert (h.acked_since(later), h.refused_since(later), h.unacked_since(later)) == (1, 0, 1)


async def test_a_wait_for_events_that_do_not_come_fails_at_its_safety_net() -> None:
    h = history({"p0-1": 1})
    await until(lambda: h.acked_since(0.0) >= 1, "one ack", within=1.0)
    with pytest.raises(AssertionError, match=r"2 acks: not within 0 s \(the safety net\)"):
        await until(lambda: h.acked_since(0.0) >= 2, "2 acks", within=0.2)
