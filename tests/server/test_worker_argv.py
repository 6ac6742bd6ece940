"""The command lines `serve --workers N` starts its workers with."""

from __future__ import annotations

from infinistream.server.workers import worker_argv


def flag(argv: list[str], name: str) -> str | None:
    """The last value of `name` (later flags win)."""
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]
    return values[-1] if values else None


def test_each_worker_is_a_cache_agent_on_a_port_of_its_own() -> None:
    given = ["--cache-port", "7422"]
    ports = [flag(worker_argv(given, i, 4222, 7422), "--cache-port") for i in range(3)]
    assert ports == ["7422", "7423", "7424"]


def test_any_free_cache_port_stays_so() -> None:
    assert flag(worker_argv([], 1, 4222, 0), "--cache-port") is None
