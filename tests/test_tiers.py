"""The quick tier's list of slow tests (tests/support/tiers.py) names only what exists, and
matches a test with its parameters but no other test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.tiers import SLOW, is_slow

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("entry", SLOW)
def test_every_slow_entry_names_a_directory_a_module_or_a_test(entry: str) -> None:
    path, _, test = entry.partition("::")
    assert (ROOT / path).exists(), f"{path} does not exist: remove or correct the entry"
    if entry.endswith("/"):
        assert (ROOT / path).is_dir()
    if test:
        source = (ROOT / path).read_text()
        assert re.search(rf"^(async )?def {re.escape(test)}\(", source, re.M), entry


def test_an_entry_covers_its_tests_and_their_parameters_only() -> None:
    assert is_slow("tests/fault/test_fault_kill.py::test_kill[3]")
    assert not is_slow("tests/faultless/test_x.py::test_y")


def test_the_quick_tier_is_not_marked_slow_in_the_full_run() -> None:
    # The smoke test is what the quick tier is for: a real agent and nats-py.
    assert not is_slow("tests/e2e/test_smoke.py::test_create_publish_read")
