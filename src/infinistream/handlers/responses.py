"""What every handler's answer shares: its response type, also on refusals, and account info."""

from __future__ import annotations

from typing import Any

from infinistream.jetstream import errors
from infinistream.jetstream.accounts import limits_to_wire
from infinistream.jetstream.api import API_LEVEL, TYPE_PREFIX
from infinistream.security.config import JetStreamLimits

# Paged responses (nats-server embeds ApiPaged without omitempty): a refusal carries the page too.
PAGED_RESPONSES = frozenset(
    TYPE_PREFIX + kind
    for kind in (
        "stream_names_response",
        "stream_list_response",
        "consumer_names_response",
        "consumer_list_response",
    )
)


def refusal(kind: str, exc: errors.ApiError) -> dict[str, Any]:
    """The answer to a refused request of response type `kind`, as nats-server shapes it."""
    response: dict[str, Any] = {"type": kind, "error": exc.to_dict()}
    if kind in PAGED_RESPONSES:
        response.update(total=0, offset=0, limit=0)
    return response


def account_info_response(
    *,
    streams: int,
    consumers: int,
    storage: int,
    reserved: int,
    limits: JetStreamLimits,
    total: int,
    errors_count: int,
    domain: str = "",
) -> dict[str, Any]:
    # Every stream is kept in object storage: its bytes and reservations count as storage.
    response: dict[str, Any] = {
        "type": TYPE_PREFIX + "account_info_response",
        "memory": 0,
        "storage": storage,
        "reserved_memory": 0,
        "reserved_storage": reserved,
        "streams": streams,
        "consumers": consumers,
        "limits": limits_to_wire(limits),
    }
    if domain:
        response["domain"] = domain
    response["api"] = {"level": API_LEVEL, "total": total, "errors": errors_count}
    return response
