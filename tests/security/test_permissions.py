"""Permission decisions: nats-server's matching, queue entries, the bounded cache, replies."""

from __future__ import annotations

import pytest

from infinistream.security.identity import Permissions, ResponsePermission, SubjectPermission
from infinistream.security.permissions import (
    PUB_CACHE_SIZE,
    PermissionChecker,
    subject_matches,
)


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("foo.bar", "foo.bar", True),
        ("foo.*", "foo.bar", True),
        ("foo.*", "foo.bar.baz", False),
        ("foo.>", "foo.bar.baz", True),
        ("foo.>", "foo", False),
        ("*.bar", "foo.bar", True),
        (">", "anything.at.all", True),
        ("foo.*", "foo.>", True),  # a subscription's wildcard is a token like any other
        ("foo.bar", "foo.*", False),
        ("$JS.API.CONSUMER.MSG.NEXT.ORDERS.*", "$JS.API.CONSUMER.MSG.NEXT.ORDERS.C", True),
        ("$JS.API.CONSUMER.MSG.NEXT.ORDERS.*", "$JS.API.STREAM.CREATE.ORDERS", False),
    ],
)
def test_subject_matches(pattern: str, subject: str, expected: bool) -> None:
    assert subject_matches(pattern, subject) is expected


def checker(**kwargs: object) -> PermissionChecker:
    return PermissionChecker(Permissions(**kwargs))  # type: ignore[arg-type]


def test_allow_then_deny() -> None:
    c = checker(publish=SubjectPermission(allow=("orders.>",), deny=("orders.secret",)))
    assert c.may_publish("orders.new")
    assert not c.may_publish("orders.secret")
    assert not c.may_publish("billing.x")
    assert c.may_subscribe("anything")  # no subscribe permissions: all allowed


def test_deny_only() -> None:
    c = checker(subscribe=SubjectPermission(deny=("secret.>",)))
    assert c.may_subscribe("public.x")
    assert not c.may_subscribe("secret.x")
    assert not c.may_subscribe("secret.*")


def test_queue_entries() -> None:
    c = checker(subscribe=SubjectPermission(allow=("jobs workers", "free")))
    assert c.may_subscribe("jobs", "workers")
    assert not c.may_subscribe("jobs", "others")
    assert not c.may_subscribe("jobs")
    assert c.may_subscribe("free", "any")


def test_the_publish_cache_is_bounded_and_decisions_stay_right() -> None:
    c = checker(publish=SubjectPermission(allow=("a.*",)))
    for i in range(PUB_CACHE_SIZE * 3):
        assert c.may_publish(f"a.{i}")
        assert not c.may_publish(f"b.{i}")
    assert len(c._cache) <= PUB_CACHE_SIZE


def test_responses_count_and_expire() -> None:
    now = [100.0]
    c = PermissionChecker(
        Permissions(publish=SubjectPermission(allow=()), responses=ResponsePermission(2, 5.0)),
        clock=lambda: now[0],
    )
    assert not c.may_publish("_INBOX.r1")
    c.delivered_reply("_INBOX.r1")
    c.delivered_reply("_INBOX.r2")
    assert c.may_publish("_INBOX.r1")
    assert c.may_publish("_INBOX.r1")
    assert not c.may_publish("_INBOX.r1")  # max 2
    now[0] += 6
    assert not c.may_publish("_INBOX.r2")  # expired


def test_unlimited_responses() -> None:
    c = checker(publish=SubjectPermission(allow=()), responses=ResponsePermission(-1, 0.0))
    c.delivered_reply("r")
    assert all(c.may_publish("r") for _ in range(10))
