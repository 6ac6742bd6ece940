"""What every handler's answer shares (handlers/responses.py): refusals shaped as nats-server
shapes them, and account info."""

from __future__ import annotations

from infinistream.handlers.responses import account_info_response, refusal
from infinistream.jetstream import errors
from infinistream.jetstream.api import TYPE_PREFIX
from infinistream.security.config import JetStreamLimits


def test_a_refusal_of_a_paged_response_carries_an_empty_page() -> None:
    err = errors.stream_not_found()
    assert refusal(TYPE_PREFIX + "stream_info_response", err) == {
        "type": TYPE_PREFIX + "stream_info_response",
        "error": err.to_dict(),
    }
    paged = refusal(TYPE_PREFIX + "stream_names_response", err)
    assert (paged["total"], paged["offset"], paged["limit"]) == (0, 0, 0)


def test_account_info_counts_everything_as_storage() -> None:
    info = account_info_response(
        streams=2,
        consumers=3,
        storage=100,
        reserved=50,
        limits=JetStreamLimits(max_streams=10),
        total=7,
        errors_count=1,
    )
    assert info["type"] == TYPE_PREFIX + "account_info_response"
    assert (info["memory"], info["storage"], info["reserved_storage"]) == (0, 100, 50)
    assert info["limits"]["max_streams"] == 10
    assert info["api"] == {"level": 2, "total": 7, "errors": 1}
