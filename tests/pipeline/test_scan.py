"""`infinistream pipeline scan` lists the damaged messages of real stores, and only those."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from infinistream.pipeline.commands import add_pipeline_parser, run_pipeline
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.scan import EXIT_CLEAN, EXIT_DAMAGED
from support.agentproc import AgentProcess
from support.storeinspect import damage_object, record_of, remove_object


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    """`infinistream pipeline scan ARGV` in this process (on the session's Spark)."""
    parser = argparse.ArgumentParser()
    add_pipeline_parser(parser.add_subparsers(dest="command"))
    code = run_pipeline(parser.parse_args(["pipeline", "scan", *argv]))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def store_args(options: StoreOptions) -> list[str]:
    return ["--objects", options.objects, "--metadata", options.metadata]


async def fill(nc: Client) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="A", subjects=["a.>"])
    await js.add_stream(name="B", subjects=["b.>"])
    for i in range(1, 11):
        await asyncio.gather(js.publish(f"a.{i}", b"a%d" % i), js.publish(f"b.{i}", b"b%d" % i))
    await js.delete_msg("A", 7)


def flip(store_dir: Path, stream: str, seq: int) -> dict[str, Any]:
    key, offset, length = record_of(store_dir / "meta.db", stream, seq)
    damage_object(store_dir / "objects", key, offset + length - 1, 0x01)
    return {"stream": stream, "seq": seq, "obj": key, "offset": offset}


async def test_a_clean_store_has_nothing_to_list(
    spark: Any, agent: AgentProcess, nc: Client, options: StoreOptions, capsys: Any
) -> None:
    await fill(nc)
    code, lines, err = await asyncio.to_thread(cli, capsys, *store_args(options))
    assert (code, lines) == (EXIT_CLEAN, [])
    assert "scan: 2 streams" in err and "19 messages checked: 0 damaged" in err


async def test_damaged_messages_are_listed_with_where_and_why(
    spark: Any, agent: AgentProcess, nc: Client, options: StoreOptions, store_dir: Path, capsys: Any
) -> None:
    await fill(nc)
    agent.kill()
    damaged = [flip(store_dir, "A", 3), flip(store_dir, "B", 10)]
    flip(store_dir, "A", 7)  # deleted: not served, so not listed
    code, lines, err = await asyncio.to_thread(cli, capsys, *store_args(options), "--json")
    assert code == EXIT_DAMAGED
    assert [json.loads(line) for line in lines] == [
        {**d, "reason": "record checksum mismatch"} for d in damaged
    ]
    assert "19 messages checked: 2 damaged" in err
    # One stream; and lines for people.
    code, lines, _ = await asyncio.to_thread(cli, capsys, *store_args(options), "--stream", "B")
    key, offset = damaged[1]["obj"], damaged[1]["offset"]
    assert (code, lines) == (
        EXIT_DAMAGED,
        [f"damaged: stream B seq 10 object {key} offset {offset}: record checksum mismatch"],
    )


async def test_a_deleted_object_is_listed_message_by_message(
    spark: Any, agent: AgentProcess, nc: Client, options: StoreOptions, store_dir: Path, capsys: Any
) -> None:
    await fill(nc)
    agent.kill()
    key, _, _ = record_of(store_dir / "meta.db", "B", 4)
    remove_object(store_dir / "objects", key)
    code, lines, _ = await asyncio.to_thread(cli, capsys, *store_args(options), "--json")
    assert code == EXIT_DAMAGED
    found = [json.loads(line) for line in lines]
    assert {(d["stream"], d["obj"], d["reason"]) for d in found} == {
        (s, key, "object missing") for s in {d["stream"] for d in found}
    }
    assert ("B", 4) in {(d["stream"], d["seq"]) for d in found}


async def test_an_unknown_stream_fails_the_scan(
    spark: Any, agent: AgentProcess, nc: Client, options: StoreOptions, capsys: Any
) -> None:
    await fill(nc)
    code, lines, err = await asyncio.to_thread(
        cli, capsys, *store_args(options), "--stream", "NOPE"
    )
    assert (code, lines) == (1, [])
    assert "no stream 'NOPE'" in err
