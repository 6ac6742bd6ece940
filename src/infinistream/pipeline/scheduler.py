"""The jobs role: an agent that runs its group's pipeline jobs on a schedule.

An agent started with `--jobs` (or `infinistream { jobs: true }`) wakes every `jobs_interval`
and, for each job in turn, tries to take the job's lease in metadata. Only the agent that gets
it runs the job, as a subprocess (`python -m infinistream pipeline JOB ...` with the agent's
store options and the lease's fence on its command line), so a job's Spark driver never shares
the agent's process or event loop. While the job runs the lease is renewed; if a renewal finds
the lease taken over, the job is stopped (its fenced commits would fail anyway). When it ends the
lease is released, the run recorded (`{group}/jobs/{job}/last`: who, when, exit code, summary)
and its summary line logged. One job at a time per agent; a job that some agent ran less than
an interval ago is not run again, so N agents in the jobs role do not run it N times as often.
Each account with JetStream is a group of its own: every job runs for each of them in turn
(`--account`), under that group's lease.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shlex
import signal
import sys
import time
from dataclasses import dataclass

import msgspec

from infinistream.jetstream.accounts import GLOBAL_ACCOUNT, account_group
from infinistream.metadata.kv import MetadataError, MetadataStore, Put
from infinistream.pipeline.lease import (
    DEFAULT_TTL,
    Fence,
    Lease,
    LeaseHolders,
    LeaseLost,
    acquire,
    fenced,
    release,
    renew,
)
from infinistream.pipeline.spark import workers_python
from infinistream.pipeline.tables.config import CATALOG_ENV
from infinistream.settings import Settings, parse_jobs
from infinistream.storage.keys import KEY_ENV, PREV_KEY_ENV

log = logging.getLogger(__name__)

# How long a job gets to stop after SIGTERM before SIGKILL.
STOP_TIMEOUT = 10.0
_TAIL_LINES = 20


@dataclass(frozen=True)
class JobRun:
    job: str
    exit_code: int
    seconds: float
    fence: Fence
    summary: str | None
    lease_lost: bool
    tail: tuple[str, ...]


def job_command(
    job: str,
    settings: Settings,
    fence: Fence,
    python: str = sys.executable,
    account: str = GLOBAL_ACCOUNT,
) -> list[str]:
    """The command line that runs `job` against the agent's stores (the group of `account`),
    fenced by `fence`."""
    argv = [python, "-m", "infinistream", "pipeline", job]
    argv += ["--objects", settings.objects_url, "--metadata", settings.metadata_url]
    argv += ["--group", settings.group, "--master", settings.jobs_master]
    if account != GLOBAL_ACCOUNT:
        argv += ["--account", account]
    if settings.s3_endpoint:
        argv += ["--s3-endpoint", settings.s3_endpoint]
    if settings.s3_region:
        argv += ["--s3-region", settings.s3_region]
    if settings.cipher:
        argv += ["--cipher", settings.cipher]
    if settings.key_provider:
        argv += ["--key-provider", settings.key_provider]
    argv += fence.args()
    if job == "janitor":
        argv += ["--grace", f"{round(settings.janitor_grace * 1000)}ms"]
    if job in ("tables", "tables-upkeep") and settings.tables_location:
        argv += ["--location", settings.tables_location]
    if job == "tables":
        argv += shlex.split(settings.tables_args)
    return argv


def job_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    # Credentials travel by environment, never on a command line others can read in ps.
    if settings.s3_access_key_id:
        env["AWS_ACCESS_KEY_ID"] = settings.s3_access_key_id
    if settings.s3_secret_access_key:
        env["AWS_SECRET_ACCESS_KEY"] = settings.s3_secret_access_key
    # So do encryption keys.
    if settings.key:
        env[KEY_ENV] = settings.key
    if settings.prev_keys:
        env[PREV_KEY_ENV] = "\n".join(settings.prev_keys)
    # And the tables' catalog URL, which may hold a password (every job may need it: the
    # erase job rewrites the tables too).
    if settings.tables_catalog:
        env[CATALOG_ENV] = settings.tables_catalog
    # Spark's Python workers must find this installation, not whatever `python3` is on PATH.
    python = workers_python(settings.jobs_master)
    if python is not None:
        env["PYSPARK_PYTHON"] = python
    # Spark's console progress bars are noise in an agent's log.
    env.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class LastRun(msgspec.Struct, kw_only=True):
    """The last run of a job in the group, by whichever agent ran it."""

    holder: str
    started_ns: int
    finished_ns: int
    exit_code: int
    summary: str


_encode_last = msgspec.msgpack.Encoder().encode
_decode_last = msgspec.msgpack.Decoder(LastRun).decode


def last_run_key(group: str, job: str) -> str:
    return f"{group}/jobs/{job}/last"


async def read_last_run(meta: MetadataStore, group: str, job: str) -> LastRun | None:
    item = await meta.get(last_run_key(group, job))
    return _decode_last(item.value) if item is not None else None


def _ago(ns: int) -> str:
    return f"{(time.time_ns() - ns) / 1e9:.0f}s"


class JobScheduler:
    def __init__(
        self,
        settings: Settings,
        meta: MetadataStore,
        holder: str,
        *,
        lease_ttl: float = DEFAULT_TTL,
        python: str = sys.executable,
        accounts: tuple[str, ...] = (GLOBAL_ACCOUNT,),
        holders: LeaseHolders | None = None,
    ) -> None:
        self.settings = settings
        # The accounts whose groups the jobs run for, in turn.
        self.accounts = accounts
        self.meta = meta
        self.holder = holder
        self.jobs = parse_jobs(settings.jobs)
        self.interval = settings.jobs_interval
        self.lease_ttl = lease_ttl
        self.python = python
        self.running: str | None = None
        self.last: dict[str, JobRun] = {}
        # Runs of each job by this agent, by outcome ("ok", "failed"), for /metrics.
        self.runs: collections.Counter[tuple[str, str]] = collections.Counter()
        # The agent leaving the pool stops the loop: a running job is stopped and its lease
        # released (run_job's finally), so another agent of the jobs role takes it at once.
        self.holders = holders if holders is not None else LeaseHolders()
        self.holders.register(f"jobs {holder}", self.hand_over)
        self._loop_task: asyncio.Task[None] | None = None

    async def hand_over(self) -> None:
        """Stop: no new lease; the job running (if any) stopped and its lease released."""
        task = self._loop_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def run(self) -> None:
        """Until the agent leaves: every interval, each job whose lease this agent gets."""
        log.info(
            "Jobs role: %s every %gs (holder %s)", ", ".join(self.jobs), self.interval, self.holder
        )
        self._loop_task = asyncio.current_task()
        while not self.holders.leaving:
            await asyncio.sleep(self.interval)
            for job in self.jobs:
                for account in self.accounts:
                    try:
                        await self.run_job(job, account)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("job %s of account %s could not run", job, account)

    async def run_job(self, job: str, account: str = GLOBAL_ACCOUNT) -> JobRun | None:
        """Run `job` for `account` once if it is due and its lease free; None if not."""
        if self.holders.leaving:
            return None  # the agent is leaving the pool: the other agents take the jobs
        group = account_group(self.settings.group, account)
        try:
            lease = await acquire(self.meta, group, job, self.holder, self.lease_ttl)
            # Under the lease, the record of the last run (by any agent) is settled: with many
            # agents in the jobs role a job still runs about once per interval, not once each.
            last = await read_last_run(self.meta, group, job) if lease is not None else None
        except MetadataError as exc:
            log.warning("job %s: cannot take its lease: %s", job, exc)
            return None
        if lease is None:
            log.debug("job %s: lease held by another agent", job)
            return None
        held = [lease]
        try:
            if last is not None and time.time_ns() - last.finished_ns < self.interval * 1e9:
                log.debug("job %s: ran %s ago, not due yet", job, _ago(last.finished_ns))
                return None
            self.running = job
            started_ns = time.time_ns()
            result = await self._run_leased(job, account, held)
            record = LastRun(
                holder=self.holder,
                started_ns=started_ns,
                finished_ns=time.time_ns(),
                exit_code=result.exit_code,
                summary=result.summary or "",
            )
            with contextlib.suppress(Exception):  # only a record: a lost lease may refuse it
                await fenced(self.meta, held[0].fence).txn(
                    [], [Put(last_run_key(group, job), _encode_last(record))]
                )
        finally:
            self.running = None
            # Also when cancelled (the agent stopping): the next agent need not wait out the TTL.
            with contextlib.suppress(Exception):
                await release(self.meta, held[0])
        self.last[job if account == GLOBAL_ACCOUNT else f"{job}@{account}"] = result
        self.runs[(job, "ok" if result.exit_code == 0 else "failed")] += 1
        self._log_result(result)
        return result

    async def _run_leased(self, job: str, account: str, held: list[Lease]) -> JobRun:
        fence = held[0].fence
        argv = job_command(job, self.settings, fence, self.python, account)
        log.info("job %s: starting (fence %s)", job, fence)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=job_env(self.settings),
            # Its own process group: stopping the job stops its Spark JVM too.
            start_new_session=True,
        )
        tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        summary: list[str] = []
        reader = asyncio.create_task(self._read_output(job, proc, tail, summary))
        lost = False
        try:
            while True:
                try:
                    await asyncio.wait_for(proc.wait(), timeout=self.lease_ttl / 4)
                    break
                except TimeoutError:
                    pass
                try:
                    held[0] = await renew(self.meta, held[0], self.lease_ttl)
                except LeaseLost as exc:
                    log.error("job %s: %s; stopping it", job, exc)
                    lost = True
                    await _stop(proc)
                    break
                except MetadataError as exc:
                    # The fence still protects commits if the lease lapses meanwhile.
                    log.warning("job %s: lease renewal failed: %s", job, exc)
        finally:
            if proc.returncode is None:
                await _stop(proc)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(reader, timeout=STOP_TIMEOUT)
        return JobRun(
            job=job,
            exit_code=proc.returncode if proc.returncode is not None else -1,
            seconds=time.monotonic() - started,
            fence=fence,
            summary=summary[-1] if summary else None,
            lease_lost=lost,
            tail=tuple(tail),
        )

    async def _read_output(
        self,
        job: str,
        proc: asyncio.subprocess.Process,
        tail: collections.deque[str],
        summary: list[str],
    ) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if not line:
                continue
            tail.append(line)
            # Jobs end with a summary line that starts with their name ("janitor summary: ...",
            # "compact: done in ..."); progress lines before it are only worth a debug log.
            if line.startswith(job):
                summary[:] = [line]
            log.debug("job %s: %s", job, line)

    def _log_result(self, result: JobRun) -> None:
        if result.exit_code == 0:
            log.info(
                "job %s finished in %.1fs: %s",
                result.job,
                result.seconds,
                result.summary or "(no summary)",
            )
            return
        log.warning(
            "job %s failed in %.1fs (exit code %d)%s:\n  %s",
            result.job,
            result.seconds,
            result.exit_code,
            ", lease lost" if result.lease_lost else "",
            "\n  ".join(result.tail[-8:]) or "(no output)",
        )


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the job's process group, SIGKILL it if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), timeout=STOP_TIMEOUT)
            return
        except TimeoutError:
            continue
