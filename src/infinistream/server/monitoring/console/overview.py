"""The console's figures that no nats-server endpoint has: the object-storage bill, and the
state of compaction and the janitor (the jobs role's last runs and current leases)."""

from __future__ import annotations

import time
from typing import Any

from infinistream.metadata.kv import MetadataStore
from infinistream.pipeline.lease import read_lease
from infinistream.pipeline.scheduler import read_last_run
from infinistream.pipeline.tables.lag import table_lags
from infinistream.pool.members import JOBS as JOBS_ROLE
from infinistream.server.monitoring.console.history import History
from infinistream.settings import JOBS, Settings, parse_jobs
from infinistream.storage.pricing import (
    PRICES_TEXT,
    SECONDS_PER_MONTH,
    STORAGE_PRICE_GB_MONTH,
    monthly_storage_cost,
    request_cost,
)

REQUESTS = ("puts", "gets", "heads", "lists", "deletes")


def _requests_cost(counts: dict[str, float]) -> float:
    return request_cost(**{k: int(counts.get(k, 0)) for k in REQUESTS})


def cost(history: History, settings: Settings) -> dict[str, Any]:
    """This agent's object requests at S3 prices: the bill so far, and a month at the rate of
    the history's window (the average from its first sample to its last); and a month of
    keeping what the streams hold now."""
    samples = list(history.samples)
    billed = settings.objects_url.startswith("s3://")
    out: dict[str, Any] = {
        "billed": billed,
        "prices": f"{PRICES_TEXT}; storage ${STORAGE_PRICE_GB_MONTH} per GB-month",
        "so_far": 0.0,
        "monthly": 0.0,
        "storage_monthly": 0.0,
    }
    if not samples:
        return out
    first, last = samples[0], samples[-1]
    out["so_far"] = _requests_cost(last.counters)
    out["storage_monthly"] = monthly_storage_cost(int(last.gauges.get("bytes", 0)))
    elapsed = last.at - first.at
    if elapsed > 0:
        window = {
            k: max(last.counters.get(k, 0.0) - first.counters.get(k, 0.0), 0.0) for k in REQUESTS
        }
        out["rates"] = {k: n / elapsed for k, n in window.items()}
        out["monthly"] = _requests_cost(window) / elapsed * SECONDS_PER_MONTH
        out["window_seconds"] = elapsed
    return out


async def jobs(meta: MetadataStore, settings: Settings) -> dict[str, Any]:
    """Compaction and the janitor in this agent's group: who ran each last, how it ended, and
    who holds its lease now (a run in progress)."""
    now_ns = time.time_ns()
    here = parse_jobs(settings.jobs)
    out = []
    for job in JOBS:
        last = await read_last_run(meta, settings.group, job)
        lease = await read_lease(meta, settings.group, job)
        running = lease is not None and not lease.expired(now_ns)
        out.append(
            {
                "job": job,
                "here": job in here,
                "running": {
                    "holder": lease.record.holder,
                    "since": lease.record.acquired_ns / 1e9,
                }
                if running and lease is not None
                else None,
                "last": {
                    "holder": last.holder,
                    "started": last.started_ns / 1e9,
                    "finished": last.finished_ns / 1e9,
                    "exit_code": last.exit_code,
                    "summary": last.summary,
                }
                if last is not None
                else None,
            }
        )
    tables = [
        {
            "table": lag.table,
            "stream": lag.stream,
            "messages": lag.messages,
            "seconds": lag.seconds,
            "committed": lag.committed_ns / 1e9,
        }
        for lag in await table_lags(meta, settings.group)
    ]
    # In the jobs role (the agents table's roles) is not the same as scheduling jobs (--jobs):
    # the page says which of the two this agent lacks.
    return {
        "interval": settings.jobs_interval if settings.runs_jobs() else None,
        "role": JOBS_ROLE in settings.roles,
        "jobs": out,
        "tables": tables,
    }
