"""The console's figures that no nats-server endpoint has: the object-storage bill, and the
state of compaction and the janitor (the jobs role's last runs and current leases)."""

from __future__ import annotations

import time
from typing import Any

from infinistream.metadata.kv import MetadataStore
from infinistream.pipeline.lease import read_lease
from infinistream.pipeline.scheduler import read_last_run
from infinistream.server.history import History
from infinistream.settings import JOBS, Settings, parse_jobs
from infinistream.storage.prices import PRICES_TEXT, SECONDS_PER_MONTH, monthly_request_bill

REQUESTS = ("puts", "gets", "heads", "lists", "deletes")


def cost(history: History, settings: Settings) -> dict[str, Any]:
    """This agent's object requests at S3 prices: the bill so far, and a month at the rate of
    the history's window (the average from its first sample to its last)."""
    samples = list(history.samples)
    billed = settings.objects_url.startswith("s3://")
    out: dict[str, Any] = {"billed": billed, "prices": PRICES_TEXT, "so_far": 0.0, "monthly": 0.0}
    if not samples:
        return out
    last = samples[-1].counters
    totals = {k: last.get(k, 0.0) for k in REQUESTS}
    # Requests priced once each: the monthly formula on the totals, taken as a rate, over the
    # seconds of that month.
    out["so_far"] = monthly_request_bill(totals) / SECONDS_PER_MONTH
    first = samples[0]
    elapsed = samples[-1].at - first.at
    if elapsed > 0:
        rates = {
            k: max(last.get(k, 0.0) - first.counters.get(k, 0.0), 0.0) / elapsed for k in REQUESTS
        }
        out["rates"] = rates
        out["monthly"] = monthly_request_bill(rates)
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
    return {"interval": settings.jobs_interval if here else None, "jobs": out}
