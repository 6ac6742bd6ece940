"""Which origin messages a mirror or source takes, and under which subject (stream.mirror);
a mirror's skip over what its origin deleted (Changes.skip_to) is tested end to end in
tests/e2e/test_mirror.py."""

from __future__ import annotations

from infinistream.jetstream.api import StreamSource, SubjectTransformConfig
from infinistream.stream.mirror import SubjectFilter


def test_no_filter_takes_everything_as_it_is() -> None:
    assert SubjectFilter.of(StreamSource(name="O")).subject("a.b") == "a.b"


def test_a_filter_subject_takes_what_it_matches() -> None:
    taken = SubjectFilter.of(StreamSource(name="O", filter_subject="orders.*"))
    assert taken.subject("orders.1") == "orders.1"
    assert taken.subject("orders.1.x") is None


def test_the_first_matching_transform_maps_the_subject() -> None:
    taken = SubjectFilter.of(
        StreamSource(
            name="O",
            subject_transforms=[
                SubjectTransformConfig(src="a.*", dest="x.{{wildcard(1)}}"),
                SubjectTransformConfig(src="b.>", dest=""),
            ],
        )
    )
    assert taken.subject("a.1") == "x.1"
    assert taken.subject("b.1.2") == "b.1.2"
    assert taken.subject("c") is None
