"""/healthz: the agent is healthy while every probe says so.

A probe is an async function answering None when healthy, or the reason it is not (the text
nats-server's `error` field carries). Probes run concurrently, each within PROBE_TIMEOUT.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

HealthProbe = Callable[[], Awaitable[str | None]]

PROBE_TIMEOUT = 3.0


async def failures(probes: Sequence[HealthProbe], timeout: float = PROBE_TIMEOUT) -> list[str]:
    """The reasons given by the probes that fail, in their order."""
    results = await asyncio.gather(*(_run(p, timeout) for p in probes))
    return [r for r in results if r is not None]


async def _run(probe: HealthProbe, timeout: float) -> str | None:
    try:
        return await asyncio.wait_for(probe(), timeout)
    except TimeoutError:
        return f"health probe timed out after {timeout:g}s"
    except Exception as exc:  # a probe that raises is a failed probe, said as such
        return f"health probe failed: {exc}"


def status(errors: list[str]) -> tuple[int, dict[str, Any]]:
    """nats-server's HealthStatus: ok, or unavailable with the first error."""
    if not errors:
        return 200, {"status": "ok"}
    return 503, {"status": "unavailable", "status_code": 503, "error": errors[0]}
