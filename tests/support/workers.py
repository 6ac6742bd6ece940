"""Which tests share one worker when the suite runs on several (pytest-xdist), and in what order
the workers take them.

`./scripts/test` runs the suite on three worker processes with `--dist loadfile`: a module is
a unit of work, which whichever worker is free takes whole, so a module's fixtures (one agent
for the module, nats-server beside it) start once. Every worker has its own session fixtures
(etcd, moto, a Spark session) and its own temporary directories, and every server a test starts
listens on a free port, so modules need not be kept apart. A group of `GROUPS` is one unit of
several modules, for what cannot be shared or should not be started on every worker:

- the fault suite makes network namespaces and nftables rules, runs agents under strace, and
  holds Jepsen-style runs whose counts mean most when two of them do not fight for the same
  two cores: one worker runs them in turn;
- the pipeline tests share one Spark session (a JVM of a gigabyte or more and its two local
  executor threads): one worker starts it, rather than every worker a JVM of its own.

Workers take the units in the order of `rank`: the groups and the modules of `LONG` first, the
longest units by far, then the modules with slow tests (tests/support/tiers.py), then the quick
ones, which fill the gaps at the end, so that no long unit starts last. `-n 0` runs everything
in one process in the order of the files.
"""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling

# A directory (ending in "/") or a module, from the repository root, and its group.
GROUPS: tuple[tuple[str, str], ...] = (
    ("tests/fault/", "fault"),
    ("tests/pipeline/", "spark"),
)

# Modules of minutes each (fresh virtualenvs, pip installs, every benchmark system): started
# last, any of them would hold up the end of the run.
LONG: tuple[str, ...] = ("tests/test_readme.py", "tests/test_packaging.py", "tests/bench/")


def group_of(nodeid: str) -> str | None:
    """The group of the test `nodeid` (as pytest names it, from the repository root), or None."""
    for prefix, group in GROUPS:
        if nodeid.startswith(prefix):
            return group
    return None


def unit_of(nodeid: str) -> str:
    """The unit of work the test `nodeid` is part of: its group, or else its module."""
    return group_of(nodeid) or nodeid.split("::", 1)[0]


def rank(unit: str, has_slow_tests: bool) -> int:
    """Where a unit comes in the order workers take them: the lower, the sooner."""
    if unit in {group for _, group in GROUPS} or unit.startswith(LONG):
        return 0
    return 1 if has_slow_tests else 2


class GroupedFileScheduling(LoadFileScheduling):  # type: ignore[misc]
    """xdist's `loadfile`, with the modules of a group in one unit."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
