"""A real Spark standalone cluster on this machine, for the tables benchmark and the pipeline's
cluster tests: a master and workers started from pyspark's own install (`bin/spark-class
org.apache.spark.deploy.master.Master` and `...worker.Worker`), on loopback, with small memory,
each worker in a work directory of its own.

    cluster = SparkCluster(tmp_dir, workers=2)
    cluster.start()          # returns once every worker has registered with the master
    cluster.master_url       # "spark://127.0.0.1:PORT", for --master
    cluster.stop()

Executors started by the workers are other JVMs and other Python processes than the driver:
they share nothing with it but what the job hands them (its tasks), the object store and the
metadata store. The Python they run is the driver's $PYSPARK_PYTHON (`cluster.env()` sets it
to this interpreter, as a cluster's nodes would have the project's environment installed).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
WORKER_MEMORY = "1g"
# What a job asks of each executor: it must fit a worker.
EXECUTOR_MEMORY = "512m"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SparkCluster:
    root: Path
    workers: int = 2
    cores: int = 1
    port: int = 0
    ui_port: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.root / "logs"),
            SPARK_WORKER_DIR=str(self.root / name),
            SPARK_NO_DAEMONIZE="1",
        )
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        return env

    def _spawn(self, name: str, cls: str, *args: str) -> None:
        (self.root / name).mkdir(parents=True, exist_ok=True)
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        proc = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), cls, *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(name),
            cwd=self.root / name,
            start_new_session=True,
        )
        log.close()
        self.processes.append(proc)

    def start(self, timeout: float = 180.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_port(), free_port()
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port),
        )  # fmt: skip
        for i in range(self.workers):
            self._spawn(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", WORKER_MEMORY,
                "--webui-port", str(free_port()), "--work-dir", str(self.root / f"worker{i}"),
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.processes):
                break
            if self.alive_workers() == self.workers:
                return
            time.sleep(0.5)
        logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in self.root.glob("*.log"))
        self.stop()
        raise RuntimeError(f"the Spark cluster did not come up in {timeout:.0f}s:\n{logs}")

    def state(self) -> dict[str, Any]:
        """The master's state (its web UI's JSON): workers, running and completed apps."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            state: dict[str, Any] = json.load(r)
            return state

    def alive_workers(self) -> int:
        try:
            workers = self.state().get("workers", [])
        except OSError:
            return 0
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def completed_apps(self) -> list[dict[str, Any]]:
        apps: list[dict[str, Any]] = self.state().get("completedapps", [])
        return apps

    def env(self) -> dict[str, str]:
        """The environment of a driver run against this cluster: executors run this Python,
        ask for what a worker has, and print no progress bars."""
        env = dict(os.environ)
        env["PYSPARK_PYTHON"] = sys.executable
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env["PYSPARK_SUBMIT_ARGS"] = (
            f"--conf spark.executor.memory={EXECUTOR_MEMORY} "
            "--conf spark.ui.showConsoleProgress=false pyspark-shell"
        )
        return env

    def stop(self) -> None:
        """Stop every process, with the executors the workers started (their process groups)."""
        for proc in reversed(self.processes):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in self.processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.processes.clear()
