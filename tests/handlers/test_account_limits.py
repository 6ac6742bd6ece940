"""An account's stream and consumer limits (handlers/account_limits.py), as nats-server checks
them on create and update."""

from __future__ import annotations

import pytest

from infinistream.handlers.account_limits import check_consumer_count, check_stream
from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.security.config import JetStreamLimits


def cfg(max_bytes: int = 0, storage: str = "file") -> StreamConfig:
    return StreamConfig(name="S", max_bytes=max_bytes, storage=storage)


def err_code(limits: JetStreamLimits, new: StreamConfig, *others: StreamConfig) -> int | None:
    try:
        check_stream(limits, new, others, storage=new.storage, creating=True)
    except errors.ApiError as exc:
        return exc.err_code
    return None


def test_no_limits_allow_anything() -> None:
    assert err_code(JetStreamLimits(), cfg(10**12), cfg(10**12)) is None


def test_stream_count_and_required_max_bytes() -> None:
    two = JetStreamLimits(max_streams=2)
    assert err_code(two, cfg(), cfg()) is None
    assert err_code(two, cfg(), cfg(), cfg()) == errors.maximum_streams_limit().err_code
    # An update is no new stream.
    check_stream(two, cfg(), [cfg(), cfg()], storage="file", creating=False)
    required = JetStreamLimits(max_bytes_required=True)
    assert err_code(required, cfg()) == errors.stream_max_bytes_required().err_code
    assert err_code(required, cfg(1)) is None


def test_reservations_per_storage() -> None:
    limits = JetStreamLimits(max_file=100, max_mem=10)
    assert err_code(limits, cfg(60), cfg(40)) is None
    assert err_code(limits, cfg(61), cfg(40)) == errors.storage_resources_exceeded().err_code
    # Without max_bytes a stream still needs a byte.
    assert err_code(limits, cfg(), cfg(100)) == errors.storage_resources_exceeded().err_code
    # Memory streams count against max_mem only.
    assert err_code(limits, cfg(10, "memory"), cfg(100)) is None
    memory = err_code(limits, cfg(11, "memory"))
    assert memory == errors.memory_resources_exceeded().err_code


@pytest.mark.parametrize(
    ("limit", "count", "refused"), [(-1, 10**6, False), (3, 2, False), (3, 3, True)]
)
def test_consumer_count(limit: int, count: int, refused: bool) -> None:
    limits = JetStreamLimits(max_consumers=limit)
    if refused:
        with pytest.raises(errors.ApiError) as info:
            check_consumer_count(limits, count)
        assert info.value.err_code == errors.maximum_consumers_limit().err_code
    else:
        check_consumer_count(limits, count)
