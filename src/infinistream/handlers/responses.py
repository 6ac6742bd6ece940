"""What every handler's answer shares: its response type, also on refusals, and account info."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from infinistream.jetstream import errors
from infinistream.jetstream.api import API_LEVEL, TYPE_PREFIX


async def typed(kind: str, work: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """Run a handler; a refusal it raises answers with the handler's response type, so clients
    raise their usual exceptions."""
    try:
        return await work
    except errors.ApiError as exc:
        exc.response_type = TYPE_PREFIX + kind  # type: ignore[attr-defined]
        raise


def account_info_response(
    *, streams: int, consumers: int, storage: int, total: int, errors_count: int
) -> dict[str, Any]:
    return {
        "type": TYPE_PREFIX + "account_info_response",
        "memory": 0,
        "storage": storage,
        "reserved_memory": 0,
        "reserved_storage": 0,
        "streams": streams,
        "consumers": consumers,
        "limits": {
            "max_memory": -1,
            "max_storage": -1,
            "max_streams": -1,
            "max_consumers": -1,
            "max_ack_pending": -1,
            "memory_max_stream_bytes": -1,
            "storage_max_stream_bytes": -1,
            "max_bytes_required": False,
        },
        "api": {"level": API_LEVEL, "total": total, "errors": errors_count},
    }
