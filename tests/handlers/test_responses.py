"""What every handler's answer shares (handlers/responses.py): refusals shaped as nats-server
shapes them, and account info."""

from __future__ import annotations

from infinistream.handlers.responses import account_info_response, refusal
from infinistream.handlers.streams import StoredBytes
from infinistream.jetstream import errors
from infinistream.jetstream.api import TYPE_PREFIX
from infinistream.security.config import JetStreamLimits


def test_a_refusal_carries_the_fields_nats_server_always_writes() -> None:
    err = errors.stream_not_found()
    assert refusal(TYPE_PREFIX + "stream_delete_response", err) == {
        "type": TYPE_PREFIX + "stream_delete_response",
        "error": err.to_dict(),
    }
    # StreamInfo's response embeds ApiPaged, as the paged ones do.
    assert refusal(TYPE_PREFIX + "stream_info_response", err) == {
        "type": TYPE_PREFIX + "stream_info_response",
        "error": err.to_dict(),
        "total": 0,
        "offset": 0,
        "limit": 0,
    }
    names = refusal(TYPE_PREFIX + "stream_names_response", err)
    assert (names["total"], names["offset"], names["limit"], names["streams"]) == (0, 0, 0, None)
    assert refusal(TYPE_PREFIX + "consumer_list_response", err)["consumers"] == []
    assert refusal(TYPE_PREFIX + "stream_purge_response", err)["purged"] == 0
    pause = refusal(TYPE_PREFIX + "consumer_pause_response", err)
    assert (pause["paused"], pause["pause_until"]) == (False, "0001-01-01T00:00:00Z")


def test_account_info_counts_by_storage_type() -> None:
    info = account_info_response(
        stored=StoredBytes(streams=2, storage=100, reserved_storage=50, memory=7),
        consumers=3,
        limits=JetStreamLimits(max_streams=10),
        total=7,
        errors_count=1,
    )
    assert info["type"] == TYPE_PREFIX + "account_info_response"
    assert (info["memory"], info["storage"], info["reserved_storage"]) == (7, 100, 50)
    assert (info["reserved_memory"], info["streams"], info["consumers"]) == (0, 2, 3)
    assert info["limits"]["max_streams"] == 10
    assert info["api"] == {"level": 2, "total": 7, "errors": 1}
