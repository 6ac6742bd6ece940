"""The fault suite: Jepsen-style runs of real agents under injected faults (`-m fault`).

Each run appends its verdict line to `fault_report`; the lines are printed at the end of the
test session (and written to $INFINISTREAM_FAULT_REPORT when set), so every run of the test
command shows its counts (tests/support/faultreport.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import faultreport


@pytest.fixture
def fault_report(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    lines: list[str] = []
    yield lines
    faultreport.record(request.node, lines)
    target = os.environ.get("INFINISTREAM_FAULT_REPORT")
    if target and lines:
        with Path(target).open("a") as out:
            out.writelines(line + "\n" for line in lines)
