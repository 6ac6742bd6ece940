"""A Spark driver for tests against a cluster: one session on the cluster's master, pipeline jobs
run in it on command, so that a test pays for one application's start rather than one per job.

    python tests/support/clusterdriver.py spark://127.0.0.1:7077

Reads one JSON command a line on stdin and answers each with a line `RESULT {json}` on stdout
(anything else there is Spark's or a job's own output):

    {"job": "compact", "argv": [...store args, job args], "env": {"VAR": "value"}}
        -> {"code": exit code, "output": what the job printed}
    {"read": {data source options}}
        -> {"seqs": [...], "executors": N}

A job runs through `infinistream pipeline`'s own argument parsing and its `main`, with the
session lent where `main` takes one; export runs its library function (its `main` stops the
session it is given); rewrap needs no Spark. `env` is applied before the job parses its
arguments (keys come from the environment, as the jobs role hands them over).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
import traceback
from typing import Any

from infinistream.pipeline.commands import JOBS, add_pipeline_parser
from infinistream.pipeline.datasource import register
from infinistream.pipeline.export import export_stream
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.spark import spark_session

# Jobs whose main takes the session (`spark=`).
LENDS_SESSION = ("compact", "erase", "scan", "tables", "tables-upkeep")


def _job(spark: Any, parser: argparse.ArgumentParser, command: dict[str, Any]) -> dict[str, Any]:
    for name, value in command.get("env", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    job = command["job"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = _run(spark, parser, job, command["argv"])
        except Exception:  # the job's own crash: reported, the driver goes on
            traceback.print_exc()
            code = -1
    return {"code": code, "output": out.getvalue()}


def _run(spark: Any, parser: argparse.ArgumentParser, job: str, argv: list[str]) -> int:
    args = parser.parse_args(["pipeline", job, *argv])
    options = StoreOptions.from_args(args)
    module = importlib.import_module(JOBS[job][0])
    if job in LENDS_SESSION:
        code: int = module.main(args, options, spark=spark)
        return code
    if job == "export":
        print(export_stream(spark, options, args.stream, args.to).summary())
        return 0
    code = module.main(args, options)  # the janitor finds the session active; rewrap needs none
    return code


def _read(spark: Any, options: dict[str, str]) -> dict[str, Any]:
    rows = spark.read.format("infinistream").options(**options).load().select("seq").collect()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    return {"seqs": sorted(r.seq for r in rows), "executors": executors}


def main() -> None:
    spark = spark_session(sys.argv[1], "infinistream-test-driver")
    register(spark)
    parser = argparse.ArgumentParser()
    add_pipeline_parser(parser.add_subparsers(dest="command"))
    print("RESULT " + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if "read" in command:
            result = _read(spark, command["read"])
        else:
            result = _job(spark, parser, command)
        print("RESULT " + json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
