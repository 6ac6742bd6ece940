"""What every handler's answer shares: its response type, also on refusals, and account info."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from infinistream.jetstream import errors
from infinistream.jetstream.accounts import limits_to_wire
from infinistream.jetstream.api import API_LEVEL, TYPE_PREFIX
from infinistream.jetstream.times import ZERO_TIME
from infinistream.security.config import JetStreamLimits

if TYPE_CHECKING:
    from infinistream.handlers.streams import StoredBytes

_PAGE: Final = {"total": 0, "offset": 0, "limit": 0}
# What a refusal of each response type carries besides its error: the fields nats-server's
# response struct has without `omitempty` (ApiPaged embedded in the paged ones), at their zero
# values, or as its handler made them before it refused.
REFUSAL_FIELDS: Final[dict[str, dict[str, Any]]] = {
    TYPE_PREFIX + "stream_names_response": _PAGE | {"streams": None},
    TYPE_PREFIX + "stream_list_response": _PAGE | {"streams": []},
    TYPE_PREFIX + "consumer_names_response": _PAGE | {"consumers": []},
    TYPE_PREFIX + "consumer_list_response": _PAGE | {"consumers": []},
    TYPE_PREFIX + "stream_info_response": _PAGE,
    TYPE_PREFIX + "stream_purge_response": {"purged": 0},
    TYPE_PREFIX + "consumer_pause_response": {"paused": False, "pause_until": ZERO_TIME},
}


def refusal(kind: str, exc: errors.ApiError) -> dict[str, Any]:
    """The answer to a refused request of response type `kind`, as nats-server shapes it."""
    response: dict[str, Any] = {"type": kind, "error": exc.to_dict()}
    response.update(REFUSAL_FIELDS.get(kind, {}))
    return response


def account_info_response(
    *,
    stored: StoredBytes,
    consumers: int,
    limits: JetStreamLimits,
    total: int,
    errors_count: int,
    domain: str = "",
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "type": TYPE_PREFIX + "account_info_response",
        "memory": stored.memory,
        "storage": stored.storage,
        "reserved_memory": stored.reserved_memory,
        "reserved_storage": stored.reserved_storage,
        "streams": stored.streams,
        "consumers": consumers,
        "limits": limits_to_wire(limits),
    }
    if domain:
        response["domain"] = domain
    response["api"] = {"level": API_LEVEL, "total": total, "errors": errors_count}
    return response
