"""Marks the tests the quick tier leaves out (`slow`); the list and why are in
tests/support/tiers.py."""

from __future__ import annotations

import pytest

from support.tiers import is_slow


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
