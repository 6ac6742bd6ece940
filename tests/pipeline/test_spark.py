"""Which Python Spark's workers run: this interpreter in local mode, unless told otherwise;
and what Spark logs: errors only, unless asked for more."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infinistream.pipeline.spark import (
    SPARK_LOG_ENV,
    logging_options,
    spark_log_level,
    use_workers_python,
    workers_python,
)


def test_local_workers_run_this_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert workers_python("local[*]") == sys.executable
    assert workers_python("local-cluster[2,1,1024]") == sys.executable
    # A cluster's nodes have their own Python.
    assert workers_python("spark://head:7077") is None
    assert workers_python("yarn") is None
    # An explicit choice stands.
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3")
    assert workers_python("local[*]") is None


def test_a_session_is_pointed_at_its_workers_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    local = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]", pythonExec="python3"))
    cluster = SimpleNamespace(sparkContext=SimpleNamespace(master="yarn", pythonExec="python3"))
    use_workers_python(local)  # type: ignore[arg-type]
    use_workers_python(cluster)  # type: ignore[arg-type]
    assert local.sparkContext.pythonExec == sys.executable
    assert cluster.sparkContext.pythonExec == "python3"

    class Connect:
        @property
        def sparkContext(self) -> Any:
            raise RuntimeError("no SparkContext in Spark Connect")

    use_workers_python(Connect())  # type: ignore[arg-type]


def test_spark_logs_errors_only_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPARK_LOG_ENV, raising=False)
    assert spark_log_level() == "ERROR"
    monkeypatch.setenv(SPARK_LOG_ENV, "warn")
    assert spark_log_level() == "WARN"
    monkeypatch.setenv(SPARK_LOG_ENV, "chatty")
    assert spark_log_level() == "ERROR"


@pytest.mark.parametrize(("level", "progress"), [("ERROR", "false"), ("INFO", "true")])
def test_the_drivers_jvm_logs_at_the_level(level: str, progress: str) -> None:
    options = logging_options(level)
    java = options["spark.driver.extraJavaOptions"].split()
    config = Path(java[0].removeprefix("-Dlog4j2.configurationFile=file://"))
    assert f"-Dinfinistream.spark.log={level}" in java
    # The configuration ships with the package; Spark's shell logger is set in it, or Spark
    # would print that it sets it to WARN.
    assert "PythonGatewayServer" in config.read_text()
    assert options["spark.ui.showConsoleProgress"] == progress
