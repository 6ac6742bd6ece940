"""Starting Spark for a pipeline job."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkUnavailable(Exception):
    """Spark could not start (no Java, no pyspark, or the master refused)."""


def spark_session(master: str = "local[*]", app: str = "infinistream") -> SparkSession:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailable(
            "pyspark is not installed: pip install 'infinistream[pipeline]'"
        ) from exc
    # Executors must run this interpreter, the one that can import infinistream; without this
    # Spark starts whatever `python3` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise SparkUnavailable("Spark needs Java 17 or newer: apt-get install default-jre-headless")
    try:
        session = (
            SparkSession.builder.master(master)
            .appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            # Small jobs on small machines: don't pay for 200 shuffle partitions.
            .config("spark.sql.shuffle.partitions", "8")
            .getOrCreate()
        )
    except Exception as exc:
        raise SparkUnavailable(f"Spark could not start on master {master}: {exc}") from exc
    session.sparkContext.setLogLevel("ERROR")
    return session
