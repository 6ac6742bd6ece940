"""The two tiers of the suite: which tests the quick tier leaves out.

`./scripts/test` runs every test (CI runs it). `./scripts/test --quick`, for while you work,
runs those not marked `slow` (`pytest -m "not slow"`): the unit and protocol tests, and enough
end-to-end tests to start real agents and drive them with nats-py and nats.js, in under three
minutes. tests/conftest.py marks a test `slow` when its id starts with an entry of `SLOW`: a
directory (ending in "/"), a module, or one test of a module (with all its parameters). The
entries come from measured durations (`pytest --durations=0` over the whole suite);
docs/development.md says how to measure them again. Marking only selects: nothing is skipped,
and the full run includes every marker.
"""

from __future__ import annotations

SLOW: tuple[str, ...] = (
    # Jepsen-style runs of agents under injected faults: minutes.
    "tests/fault/",
)


def is_slow(nodeid: str) -> bool:
    """Whether the test `nodeid` (as pytest names it, from the repository root) is slow."""
    for entry in SLOW:
        if entry.endswith("/"):
            if nodeid.startswith(entry):
                return True
        elif nodeid == entry or nodeid.startswith((entry + "::", entry + "[")):
            return True
    return False
