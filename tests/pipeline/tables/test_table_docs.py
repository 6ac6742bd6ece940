"""docs/tables.md works as written: after the quick start's publish, `pipeline tables -sd
./infinistream-data` makes the table, and the page's Python snippet (pyiceberg, then DuckDB over
its Arrow data) prints the message, run as is from the directory that holds the store."""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nats
import pytest

from infinistream.pipeline.commands import add_pipeline_parser
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.tables import job
from support.agentproc import running_agent
from support.scriptvenv import ROOT

PAGE = ROOT / "docs" / "tables.md"

pytestmark = pytest.mark.timeout(300)


def _snippets(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", PAGE.read_text(), re.M | re.S)


async def test_the_page_snippet_reads_the_quick_start_message(spark: Any, tmp_path: Path) -> None:
    store = tmp_path / "infinistream-data"
    with running_agent(store, "--linger", "20ms") as agent:
        nc = await nats.connect(agent.url)
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        await js.publish("orders.new", b"hello")
        await nc.close()

    # The page's command, with the session's Spark lent to it.
    command = _snippets("sh")[0].strip()
    assert command == "./scripts/pipeline tables -sd ./infinistream-data"
    parser = argparse.ArgumentParser()
    add_pipeline_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["pipeline", "tables", "-sd", str(store)])
    code = await asyncio.to_thread(job.main, args, StoreOptions.from_args(args), spark=spark)
    assert code == 0

    snippet = _snippets("python")[0]
    script = tmp_path / "query.py"
    script.write_text(snippet)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[(1, 'orders.new', b'hello')]\n"
    assert "prints\n`[(1, 'orders.new', b'hello')]`" in PAGE.read_text()
