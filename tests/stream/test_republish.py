"""Republish: the config rules and the headers a republished message carries (ADR-28)."""

from __future__ import annotations

import pytest

from infinistream.jetstream.api import RePublish, StreamConfig, SubjectTransformConfig
from infinistream.jetstream.api_error import ApiError
from infinistream.protocol import encode_headers, parse_headers
from infinistream.stream.config import normalize
from infinistream.stream.republish import republish_rule, republished_headers
from infinistream.stream.republisher import previous_of_subject
from infinistream.stream.view import StreamView
from support.streamviews import empty_view, extend, kill


def config(**fields: object) -> StreamConfig:
    return normalize(StreamConfig(name="S", **fields))  # type: ignore[arg-type]


def test_an_empty_source_is_everything() -> None:
    cfg = config(subjects=["a.>"], republish=RePublish(dest="b.>"))
    assert cfg.republish == RePublish(src=">", dest="b.>")
    rule = republish_rule(cfg)
    assert rule is not None and rule.destination("a.x.y") == "b.a.x.y"


def test_implicit_republish_of_the_transformed_subject() -> None:
    cfg = config(
        subjects=["in"],
        subject_transform=SubjectTransformConfig(src="in", dest="kept"),
        republish=RePublish(src=">", dest=">"),
    )
    assert cfg.republish == RePublish(src="kept", dest="kept")


def test_no_destination_republishes_nothing() -> None:
    assert republish_rule(config(subjects=["a.>"], republish=RePublish(src="a.>", dest=""))) is None


@pytest.mark.parametrize(
    ("subjects", "republish", "text"),
    [
        (
            ["a.>"],
            RePublish(dest="a.b"),
            "stream configuration for republish destination forms a cycle",
        ),
        (
            ["a.>"],
            RePublish(src="a.*", dest="b.$2"),
            "stream configuration for republish with transform from 'a.*' to 'b.$2' not valid",
        ),
    ],
)
def test_refused(subjects: list[str], republish: RePublish, text: str) -> None:
    with pytest.raises(ApiError) as refused:
        config(subjects=subjects, republish=republish)
    assert (refused.value.code, refused.value.err_code, refused.value.description) == (
        500,
        10052,
        text,
    )


def test_destinations_no_one_can_publish_to_are_skipped() -> None:
    rule = republish_rule(config(subjects=["a.*"], republish=RePublish(src="a.*", dest="b. c.$1")))
    assert rule is not None
    assert rule.destination("a.x") is None


def test_headers_follow_the_messages_own() -> None:
    own = encode_headers({"X": "1"})
    block = republished_headers(
        own,
        stream="S",
        subject="a.b",
        seq=7,
        ts=1_700_000_000_123_000_000,
        last_seq=3,
        msg_size=None,
    )
    assert block == (
        b"NATS/1.0\r\nX: 1\r\nNats-Stream: S\r\nNats-Subject: a.b\r\nNats-Sequence: 7\r\n"
        b"Nats-Time-Stamp: 2023-11-14T22:13:20.123Z\r\nNats-Last-Sequence: 3\r\n\r\n"
    )
    bare = republished_headers(b"", stream="S", subject="a", seq=1, ts=0, last_seq=0, msg_size=5)
    parsed = parse_headers(bare)
    assert parsed.get("Nats-Msg-Size") == "5"
    assert bare.startswith(b"NATS/1.0\r\nNats-Stream: S\r\n")


def view_of(*runs: list[str]) -> StreamView:
    """A view with a section per run of subjects, sequences from 1."""
    view = empty_view()
    for run in runs:
        extend(view, run)
    return view


def test_the_last_sequence_is_the_subjects_previous_live_one() -> None:
    view = view_of(["a", "b", "a"], ["a", "b"])
    assert [previous_of_subject(view, "a", seq, -1) for seq in (1, 3, 4)] == [0, 1, 3]
    assert previous_of_subject(view, "b", 5, -1) == 2
    assert previous_of_subject(view, "c", 5, -1) == 0
    # Deleted before 4 was stored: the one before it was the last then.
    kill(view, [3])
    assert previous_of_subject(view, "a", 4, -1) == 1
    assert previous_of_subject(view, "a", 4, 3) == 1


def test_a_message_the_subject_limit_pushed_out_was_the_last() -> None:
    # A KV bucket's history of one: 3 went when 4 was stored, and was its last.
    view = view_of(["a", "b", "a"], ["a", "b"])
    kill(view, [1, 3])
    assert previous_of_subject(view, "a", 4, 1) == 3
    assert previous_of_subject(view, "a", 3, 1) == 1
    # With a history of two, 1 went only when 4 came: 3 found 1 in place.
    assert previous_of_subject(view, "a", 3, 2) == 1


def test_a_revision_gone_with_the_head_is_the_one_seen_go_by() -> None:
    # A history of one, one message a section: 1 went with the head when 2 came, and its
    # section with it; the caller saw 1 go by.
    view = view_of(["a"], ["a"])
    kill(view, [1])
    assert previous_of_subject(view, "a", 2, 1, seen=1) == 1
    assert previous_of_subject(view, "a", 2, 1) == 0
    # Not pushed out by the limit: deleted before, so not the last.
    assert previous_of_subject(view, "a", 2, -1, seen=1) == 0
