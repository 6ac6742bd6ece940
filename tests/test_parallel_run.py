"""The groups of the parallel run (tests/support/workers.py) name what exists, keep their
modules in one unit of work, and come first in the order workers take the units."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.workers import GROUPS, LONG, rank, unit_of

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("prefix", [*(prefix for prefix, _ in GROUPS), *LONG])
def test_every_entry_names_a_directory_or_a_module(prefix: str) -> None:
    assert (ROOT / prefix).is_dir() if prefix.endswith("/") else (ROOT / prefix).is_file()


def test_a_groups_modules_are_one_unit_and_other_modules_one_each() -> None:
    kill = unit_of("tests/fault/test_fault_kill.py::test_kill[3]")
    assert kill == unit_of("tests/fault/test_fault_s3.py::test_s3") == "fault"
    assert unit_of("tests/pipeline/tables/test_table_append.py::test_a") == "spark"
    fetch = "tests/e2e/test_fetch.py"
    assert unit_of(f"{fetch}::test_a[agent]") == unit_of(f"{fetch}::test_b") == fetch
    assert unit_of("tests/faultless/test_x.py::test_y") == "tests/faultless/test_x.py"


def test_groups_come_first_then_modules_with_slow_tests() -> None:
    assert rank("fault", False) < rank("tests/e2e/test_fetch.py", True)
    assert rank("tests/e2e/test_fetch.py", True) < rank("tests/stream/test_limits.py", False)
    assert rank("tests/test_readme.py", True) == rank("spark", True) == 0
