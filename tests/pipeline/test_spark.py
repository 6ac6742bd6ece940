"""Which Python Spark's workers run: this interpreter in local mode, unless told otherwise."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

from infinistream.pipeline.spark import use_workers_python, workers_python


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
