"""Starting Spark for a pipeline job, and pointing its Python workers at InfiniStream."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Spark's own log lines (log4j2 levels): ERROR and up by default, so that what a job prints is
# its result; `infinistream pipeline JOB --spark-log WARN` sets this variable for the job.
SPARK_LOG_ENV = "INFINISTREAM_SPARK_LOG"
SPARK_LOG_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
QUIET_SPARK_LOG = "ERROR"
_LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")


def spark_log_level() -> str:
    """The level from which Spark's log lines are shown."""
    level = os.environ.get(SPARK_LOG_ENV, "").upper()
    return level if level in SPARK_LOG_LEVELS else QUIET_SPARK_LOG


def logging_options(level: str) -> dict[str, str]:
    """Spark settings that show its log lines from `level` on, and its progress bars only from
    INFO on. They act when the session starts the driver's JVM (a job's own session); the
    JVM prints its first lines before any setLogLevel could quiet them."""
    java = f"-Dlog4j2.configurationFile={_LOG4J2_CONFIG.as_uri()} -Dinfinistream.spark.log={level}"
    verbose = SPARK_LOG_LEVELS.index(level) >= SPARK_LOG_LEVELS.index("INFO")
    return {
        "spark.driver.extraJavaOptions": java,
        "spark.ui.showConsoleProgress": "true" if verbose else "false",
    }


class SparkUnavailable(Exception):
    """Spark could not start (no Java, no pyspark, or the master refused)."""


def spark_session(master: str = "local[*]", app: str = "infinistream") -> SparkSession:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailable(
            "pyspark is not installed: pip install 'infinistream[pipeline]'"
        ) from exc
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise SparkUnavailable("Spark needs Java 17 or newer: apt-get install default-jre-headless")
    level = spark_log_level()
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Small jobs on small machines: don't pay for 200 shuffle partitions.
        .config("spark.sql.shuffle.partitions", "8")
    )
    for key, value in logging_options(level).items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:
        raise SparkUnavailable(f"Spark could not start on master {master}: {exc}") from exc
    session.sparkContext.setLogLevel(level)
    # py4j logs every gateway connection it closes at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    use_workers_python(session)
    return session


def workers_python(master: str) -> str | None:
    """The Python that Spark's workers should run for a job on `master`, None to leave it to
    Spark. Spark starts them with $PYSPARK_PYTHON, else `python3` from PATH, which need not be
    the environment InfiniStream is installed in: in local mode they run this interpreter
    instead. An explicit PYSPARK_PYTHON stands, and a cluster's nodes have their own Python."""
    if "PYSPARK_PYTHON" in os.environ or not master.startswith("local"):
        return None
    return sys.executable


def use_workers_python(spark: SparkSession) -> None:
    """Start `spark`'s Python workers (tasks, data sources) with `workers_python`; a session
    made elsewhere (a caller's, a test's) is pointed as one from `spark_session` is."""
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext here, workers are the server's business
        return
    python = workers_python(str(context.master))
    if python is not None:
        context.pythonExec = python
