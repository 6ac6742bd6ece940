"""The quick tier: `--quick` (what `./scripts/test --quick` passes) leaves out the tests marked
`slow`. Which are slow, and why, is in tests/support/tiers.py; every run marks them, so
`-m slow` and `-m "not slow"` select the two tiers too."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import faultreport
from support.tiers import is_slow, is_slow_path, starts_a_server
from support.workers import GroupedFileScheduling, rank, unit_of

ROOT = Path(__file__).resolve().parent.parent
_left_out: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="the quick tier: leave out the tests marked slow (tests/support/tiers.py)",
    )


def _relative(path: Path, is_dir: bool) -> str:
    return path.relative_to(ROOT).as_posix() + ("/" if is_dir else "")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # A directory or module whose tests are all slow is not even imported (Spark, moto,
    # Playwright): collecting it would cost more than the quick tier's own tests.
    if not config.getoption("quick") or ROOT not in collection_path.parents:
        return None
    path = _relative(collection_path, collection_path.is_dir())
    if is_slow_path(path):
        _left_out.append(path)
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        if is_slow(item.nodeid) or starts_a_server(getattr(item, "fixturenames", ()), params):
            item.add_marker(pytest.mark.slow)
            slow.append(item)
    if config.getoption("quick") and slow:
        config.hook.pytest_deselected(items=slow)
        left_out = set(slow)
        items[:] = [item for item in items if item not in left_out]
    if hasattr(config, "workerinput"):
        _in_work_order(items, {unit_of(item.nodeid) for item in slow})


def _in_work_order(items: list[pytest.Item], with_slow_tests: set[str]) -> None:
    # On a worker of several, the order in which workers take the units of work
    # (support/workers.py); every worker sorts alike, as xdist requires. Stable: the tests of a
    # module stay together and in order.
    def key(item: pytest.Item) -> int:
        unit = unit_of(item.nodeid)
        return rank(unit, unit in with_slow_tests)

    items.sort(key=key)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    # `--dist loadfile` (scripts/test), with the groups of support/workers.py.
    if config.getvalue("dist") == "loadfile":
        return GroupedFileScheduling(config, log)
    return None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    faultreport.gather(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    faultreport.print_summary(terminalreporter)


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    if not config.getoption("quick"):
        return None
    return (
        f"quick tier: the slow tests are deselected, and {len(_left_out)} directories and"
        " modules of slow tests only were not collected (tests/support/tiers.py)"
    )
