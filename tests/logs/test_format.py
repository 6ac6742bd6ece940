"""The log line's form for errors: a store's refusal in its words, anything else with its
traceback."""

from __future__ import annotations

import logging
import sys

from infinistream.logs.format import NatsFormatter
from infinistream.metadata.kv import MetadataError


def formatted(exc: Exception) -> str:
    try:
        raise exc
    except Exception:
        record = logging.LogRecord(
            "infinistream", logging.ERROR, __file__, 1, "catalog refresh failed", (), sys.exc_info()
        )
    return NatsFormatter(logtime=False).format(record)


def test_a_store_error_is_said_in_words() -> None:
    line = formatted(MetadataError("etcd https://e1:2379: /v3/kv/range failed: HTTP 403"))
    assert line.endswith(
        "[ERR] catalog refresh failed: etcd https://e1:2379: /v3/kv/range failed: HTTP 403"
    )
    assert "\n" not in line


def test_any_other_error_keeps_its_traceback() -> None:
    line = formatted(ValueError("bad"))
    assert "catalog refresh failed\nTraceback (most recent call last):" in line
    assert line.endswith("ValueError: bad")
