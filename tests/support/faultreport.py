"""The fault suite's verdict lines (tests/fault), printed at the end of the test session.

A run's lines travel in its test's report, which a worker of a parallel run
(support/workers.py) sends to the process that prints the session's summary; that process
never imports tests/fault/conftest.py, so tests/conftest.py gathers and prints them.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

_VERDICT = "fault verdict"
_LINES: list[str] = []


def record(item: pytest.Item, lines: Iterable[str]) -> None:
    """Add `lines` to the report of the test `item`."""
    item.user_properties.extend((_VERDICT, line) for line in lines)


def gather(report: pytest.TestReport) -> None:
    """Keep the lines a test's last report carries."""
    if report.when == "teardown":
        _LINES.extend(str(line) for name, line in report.user_properties if name == _VERDICT)


def print_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _LINES:
        terminalreporter.section("fault suite")
        for line in _LINES:
            terminalreporter.write_line(line)
