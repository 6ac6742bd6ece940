"""The JVM settings of the tests' Spark drivers: the session's own, and those of the jobs the
tests start as processes (an agent's jobs role, a job killed on purpose).

A test's Spark job is small and short, and the machine has two cores: the JVM's optimizing
compiler (C2) and its G1 collector threads spend more CPU than such a job ever gets back, while a
driver starting (tens of thousands of classes loaded and interpreted) is what each test waits
for. With only the quick compiler (C1) and the serial collector a driver starts sooner and
its first small jobs take no longer. Test time only: these are not settings for a production
job.

The options travel in `SPARK_SUBMIT_OPTS`, which Spark's launcher adds to the driver's JVM
alongside `spark.driver.extraJavaOptions` (where the job's own logging settings are), without
replacing them and without the JVM printing a notice as `JDK_JAVA_OPTIONS` would; on a
standalone cluster, in `spark.executor.extraJavaOptions` for the executors and in
`SPARK_DAEMON_JAVA_OPTS` for the master and workers.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"
DAEMON_OPTS = "SPARK_DAEMON_JAVA_OPTS"


def quick_jvm_env() -> dict[str, str]:
    """Environment variables that start a job's Spark driver with `QUICK_JVM`."""
    return {SUBMIT_OPTS: QUICK_JVM}


def quick_cluster_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env`, a driver's environment for a standalone cluster, with the driver and the
    executors it asks the workers for on `QUICK_JVM`."""
    submit = env.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    executors = shlex.quote(f"spark.executor.extraJavaOptions={QUICK_JVM}")
    return {**env, **quick_jvm_env(), "PYSPARK_SUBMIT_ARGS": f"--conf {executors} {submit}"}


@contextmanager
def quick_jvm(variable: str = SUBMIT_OPTS) -> Iterator[None]:
    """While this process starts a JVM (a Spark session's driver; with `DAEMON_OPTS`, a
    cluster's master and workers): that JVM on `QUICK_JVM`. Only then: the processes started
    later (an agent, a user's shell in the README tests) must not inherit a test setting."""
    before = os.environ.get(variable)
    os.environ[variable] = QUICK_JVM
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = before
