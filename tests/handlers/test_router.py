"""The JetStream API's table: which subjects it serves, with which response type, and what a
subject it does not serve gets. (The e2e tests check the same answers against nats-server.)"""

from __future__ import annotations

import pytest

from infinistream.handlers.router import (
    ROUTES,
    SYSTEM_RESPONSE,
    JsonRoute,
    MessageRoute,
    finds_no_one,
    route_for,
)
from infinistream.jetstream.api import TYPE_PREFIX
from support.apiaccount import Account

BAD_REQUEST = {"code": 400, "err_code": 10003, "description": "bad request"}


def tokens(subject: str) -> list[str]:
    return ("$JS.API." + subject).split(".")


def test_every_subject_once_with_its_response_type() -> None:
    subjects = [r.subject for r in ROUTES]
    assert len(subjects) == len(set(subjects))
    json_types = {r.subject: r.response for r in ROUTES if isinstance(r, JsonRoute)}
    assert json_types["INFO"] == TYPE_PREFIX + "account_info_response"
    assert json_types["STREAM.MSG.GET.*"] == TYPE_PREFIX + "stream_msg_get_response"
    assert json_types["CONSUMER.DURABLE.CREATE.*.*"] == TYPE_PREFIX + "consumer_create_response"
    # InfiniStream's own subject carries its own type.
    assert json_types["STREAM.ERASE.STATUS.*"].startswith("io.infinistream.api.v1.")
    messages = {r.subject for r in ROUTES if isinstance(r, MessageRoute)}
    assert messages == {
        "CONSUMER.MSG.NEXT.*.*",
        "CONSUMER.RESET.*.*",
        "DIRECT.GET.*",
        "DIRECT.GET.*.>",
    }


@pytest.mark.parametrize(
    ("subject", "route"),
    [
        ("INFO", "INFO"),
        ("STREAM.CREATE.S", "STREAM.CREATE.*"),
        ("STREAM.NAMES", "STREAM.NAMES"),
        ("CONSUMER.CREATE.S", "CONSUMER.CREATE.*"),
        ("CONSUMER.CREATE.S.C", "CONSUMER.CREATE.*.>"),
        ("CONSUMER.CREATE.S.C.orders.>", "CONSUMER.CREATE.*.>"),
        ("CONSUMER.MSG.NEXT.S.C", "CONSUMER.MSG.NEXT.*.*"),
        ("DIRECT.GET.S", "DIRECT.GET.*"),
        ("DIRECT.GET.S.a.b", "DIRECT.GET.*.>"),
        # `*` is one whole token, `>` at least one.
        ("STREAM.CREATE", None),
        ("STREAM.CREATE.A.B", None),
        ("STREAM.NAMES.X", None),
        ("INFO.X", None),
        ("CONSUMER.INFO.S", None),
        ("CONSUMER.MSG.NEXT.S", None),
        ("DIRECT.GET", None),
        ("NOPE", None),
        ("", None),
    ],
)
def test_a_subject_finds_its_route(subject: str, route: str | None) -> None:
    found = route_for(tokens(subject) if subject else ["$JS", "API"])
    assert (found.subject if found is not None else None) == route


def test_only_pulls_and_direct_gets_find_no_one() -> None:
    for subject in ("CONSUMER.MSG.NEXT", "CONSUMER.MSG.NEXT.S", "DIRECT.GET", "DIRECT.GET.S.a"):
        assert finds_no_one(tokens(subject))
    for subject in ("CONSUMER.MSG", "DIRECT", "DIRECT.X", "STREAM.BOGUS", "NOPE"):
        assert not finds_no_one(tokens(subject))


@pytest.mark.parametrize("subject", ["STREAM.BOGUS", "NOPE", "STREAM.INFO", "CONSUMER.MSG"])
async def test_a_subject_no_route_serves_is_a_bad_request(account: Account, subject: str) -> None:
    assert await account.request(subject) == {"type": SYSTEM_RESPONSE, "error": BAD_REQUEST}


@pytest.mark.parametrize("subject", ["CONSUMER.MSG.NEXT.S", "DIRECT.GET", "DIRECT.GET.NOSUCH"])
async def test_pulls_and_direct_gets_nothing_serves_find_no_one(
    account: Account, subject: str
) -> None:
    assert not await account.api.handle("$JS.API." + subject, "_R.x", None, b"")
    assert account.outbox.sent == []


async def test_a_refusal_carries_its_routes_type(account: Account) -> None:
    got = await account.request("STREAM.INFO.NOSUCH")
    assert got == {
        "type": TYPE_PREFIX + "stream_info_response",
        "error": {"code": 404, "err_code": 10059, "description": "stream not found"},
        "total": 0,
        "offset": 0,
        "limit": 0,
    }
    # Paged responses embed their page, on a refusal too (nats-server's ApiPaged).
    got = await account.request("CONSUMER.NAMES.NOSUCH")
    assert got["type"] == TYPE_PREFIX + "consumer_names_response"
    assert (got["total"], got["offset"], got["limit"]) == (0, 0, 0)
    got = await account.request("STREAM.ERASE.STATUS.NOSUCH")
    assert got["type"] == "io.infinistream.api.v1.stream_erase_status_response"
    assert got["error"]["err_code"] == 10059


async def test_account_info_counts_requests_and_errors(account: Account) -> None:
    await account.create_stream(name="S")
    await account.request("STREAM.INFO.NOSUCH")
    await account.request("NOPE")
    # A message get counts where it is refused, not where it is served (nats-server answers
    # it past its API layer).
    await account.api.handle("$JS.API.STREAM.MSG.GET.S", "r", None, b'{"seq":1}')
    await account.publish("S", "s.x", b"x")
    await account.api.handle("$JS.API.STREAM.MSG.GET.S", "r", None, b'{"seq":1}')
    info = await account.request("INFO")
    assert info["type"] == TYPE_PREFIX + "account_info_response"
    assert (info["streams"], info["consumers"]) == (1, 0)
    # This request does not count itself, as in nats-server; three were refused.
    assert info["api"] == {"level": 2, "total": 4, "errors": 3}


async def test_a_request_without_reply_is_served_unanswered(account: Account) -> None:
    assert await account.api.handle("$JS.API.STREAM.CREATE.S", None, None, b'{"name":"S"}')
    assert account.outbox.sent == []
    assert "S" in account.catalog.streams
