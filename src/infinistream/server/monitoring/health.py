"""/healthz: the agent is healthy while every probe says so (nats-server's HealthStatus).

A probe is an async function answering None when healthy, or the reason it is not (the text
of nats-server's `error`). The agent's own probes ask object storage and the metadata store
(probes.py); others are passed in by wiring. Probes run concurrently, each within
PROBE_TIMEOUT, so a store that hangs makes /healthz unavailable rather than slow.

Options as nats-server's: `js-server-only` (the server, not JetStream: no probes),
`js-enabled-only` (JetStream usable: the probes, not the assets), `account`/`stream`/
`consumer` (that asset exists), `details` (every error, typed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from infinistream.server.monitoring import query
from infinistream.server.monitoring.usage import JetStreamAccounts

log = logging.getLogger(__name__)

HealthProbe = Callable[[], Awaitable[str | None]]

PROBE_TIMEOUT = 3.0
# A round of probes answers every /healthz for this long, and concurrent requests share one
# round: a load balancer asking often costs the stores one request a second, not one each.
REUSE_SECONDS = 1.0


class HealthzOptions(msgspec.Struct):
    """nats-server's HealthzOptions, with its JSON names (the $SYS request body)."""

    js_enabled: bool = msgspec.field(default=False, name="js-enabled")
    js_enabled_only: bool = msgspec.field(default=False, name="js-enabled-only")
    js_server_only: bool = msgspec.field(default=False, name="js-server-only")
    js_meta_only: bool = msgspec.field(default=False, name="js-meta-only")
    account: str = ""
    stream: str = ""
    consumer: str = ""
    details: bool = False


def options_from_query(q: Mapping[str, str]) -> HealthzOptions:
    return HealthzOptions(
        js_enabled=query.boolean(q, "js-enabled"),
        js_enabled_only=query.boolean(q, "js-enabled-only"),
        js_server_only=query.boolean(q, "js-server-only"),
        js_meta_only=query.boolean(q, "js-meta-only"),
        details=query.boolean(q, "details"),
        account=query.text(q, "account"),
        stream=query.text(q, "stream"),
        consumer=query.text(q, "consumer"),
    )


class Probes:
    """The health probes, run at most once per REUSE_SECONDS."""

    def __init__(self, probes: Sequence[HealthProbe], reuse_seconds: float = REUSE_SECONDS):
        self.probes = list(probes)
        self.reuse_seconds = reuse_seconds
        self._round: asyncio.Task[list[str]] | None = None
        self._finished = -float("inf")
        self._logged: list[str] = []

    async def failures(self) -> list[str]:
        current = self._round
        fresh = time.monotonic() - self._finished < self.reuse_seconds
        if current is None or (current.done() and not fresh):
            current = self._round = asyncio.get_running_loop().create_task(self._run())
        return list(await asyncio.shield(current))

    async def _run(self) -> list[str]:
        try:
            found = await failures(self.probes)
        finally:
            self._finished = time.monotonic()
        # Said when it changes, not on every request (a load balancer asks all the time).
        if found and found != self._logged:
            log.warning("Healthcheck failed: %s", "; ".join(found))
        elif not found and self._logged:
            log.info("Healthcheck ok again")
        self._logged = found
        return found


async def failures(probes: Sequence[HealthProbe], timeout: float = PROBE_TIMEOUT) -> list[str]:
    """The reasons given by the probes that fail, in their order."""
    results = await asyncio.gather(*(_run(p, timeout) for p in probes))
    return [r for r in results if r is not None]


async def _run(probe: HealthProbe, timeout: float) -> str | None:
    try:
        return await asyncio.wait_for(probe(), timeout)
    except TimeoutError:
        return f"health probe gave no answer within {timeout:g}s"
    except Exception as exc:  # a probe that raises has failed; say how
        return f"health probe failed: {type(exc).__name__}: {exc}"


class _Status:
    def __init__(self, details: bool) -> None:
        self.details = details
        self.body: dict[str, Any] = {"status": "ok"}
        self.code = 200

    def fail(self, code: int, status: str, kind: str, error: str, **where: str) -> None:
        self.code = code
        if self.details:
            self.body.setdefault("errors", []).append({"type": kind, **where, "error": error})
        elif "error" not in self.body:
            self.body.update(status=status, error=error)

    def result(self) -> tuple[int, dict[str, Any]]:
        body = self.body
        if self.details:
            body["status"] = "error" if body.get("errors") else "ok"
        return self.code, {**body, "status_code": self.code}


@dataclass(eq=False)
class Healthz:
    accounts: JetStreamAccounts
    probes: Probes

    async def answer(self, opts: HealthzOptions) -> tuple[int, dict[str, Any]]:
        """The status code and nats-server's HealthStatus (with `status_code`, which the HTTP
        answer leaves out as nats-server does: the HTTP status says it)."""
        return await _healthz(self.accounts, self.probes, opts)


async def _healthz(
    accounts: JetStreamAccounts, probes: Probes, opts: HealthzOptions
) -> tuple[int, dict[str, Any]]:
    status = _Status(opts.details)
    if not opts.account and opts.stream:
        status.fail(
            400, "error", "BAD_REQUEST", '"account" must not be empty when checking stream health'
        )
        return status.result()
    if not opts.stream and opts.consumer:
        status.fail(
            400, "error", "BAD_REQUEST", '"stream" must not be empty when checking consumer health'
        )
        return status.result()
    if opts.js_server_only:
        return status.result()
    for reason in await probes.failures():
        status.fail(503, "unavailable", "JETSTREAM", reason)
    if status.code != 200 or opts.js_enabled_only or opts.js_enabled:
        return status.result()
    if not opts.account:
        return status.result()
    usage = await accounts.usage(opts.account)
    if usage is None:
        status.fail(
            404,
            "unavailable",
            "ACCOUNT",
            f'JetStream account "{opts.account}" not found',
            account=opts.account,
        )
    elif opts.stream:
        where = {"account": opts.account, "stream": opts.stream}
        if opts.stream not in {u.entry.name for u in usage.streams}:
            status.fail(
                404,
                "unavailable",
                "STREAM",
                f'JetStream stream "{opts.stream}" not found on account "{opts.account}"',
                **where,
            )
        elif opts.consumer and opts.consumer not in {
            c["name"] for c in await accounts.consumer_details(opts.account, opts.stream, False)
        }:
            status.fail(
                404,
                "unavailable",
                "CONSUMER",
                f'JetStream consumer "{opts.consumer}" not found for stream "{opts.stream}" '
                f'on account "{opts.account}"',
                consumer=opts.consumer,
                **where,
            )
    return status.result()
