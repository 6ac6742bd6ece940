"""The nats.js side of the benchmark: finding node and the packages, and the script itself
against a real nats-server (the whole bench runs it again in test_bench_smoke)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from infinistream_bench import natsjs
from infinistream_bench.control import ControlClient
from infinistream_bench.systems import NatsServer, nats_server_binary

CHECKOUT_MODULES = Path(__file__).resolve().parents[2] / "tests" / "js" / "node_modules"


def _found() -> natsjs.NatsJs:
    found = natsjs.find(str(CHECKOUT_MODULES))
    # scripts/test installs node and tests/js/node_modules: a reason here is a failure.
    assert isinstance(found, natsjs.NatsJs), found
    return found


def test_finds_node_and_the_checkouts_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    found = natsjs.find()
    assert isinstance(found, natsjs.NatsJs), found
    assert found.modules == CHECKOUT_MODULES
    assert found.node_version.startswith("v") and found.version.startswith("3.")


def test_missing_packages_say_where_they_were_looked_for(tmp_path: Path) -> None:
    reason = natsjs.find(str(tmp_path))
    assert isinstance(reason, str)
    assert str(tmp_path) in reason and "npm ci --prefix tests/js" in reason


def test_missing_node_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no node on it
    reason = natsjs.find(str(CHECKOUT_MODULES))
    assert isinstance(reason, str) and reason.startswith("node is not installed")


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    work = tmp_path_factory.mktemp("natsjs")
    server = NatsServer("nats_lazy", "nats-server", work, "lazy", nats_server_binary())
    server.start()
    yield server
    server.stop()


@pytest.mark.timeout(120)
def test_publishes_and_fetches_against_nats_server(nats_server: NatsServer) -> None:
    js = _found()
    url = f"nats://127.0.0.1:{nats_server.port}"
    with ControlClient(nats_server.port) as c:
        c.add_stream("JS", ["js.x"])
    started: list[bool] = []
    common = {"url": url, "subject": "js.x", "payload_size": 64, "warmup": 0.05}
    one = js.run({**common, "mode": "publish", "duration": 0.3}, 60, lambda: started.append(True))
    assert started == [True]
    # Every publish after the warm-up is timed; those of the warm-up are acked, not timed.
    assert one["errors"] == 0 and one["acked"] >= len(one["latencies"]) > 0
    assert one["rate"] > 0 and all(x > 0 for x in one["latencies"])
    many = js.run({**common, "mode": "publish_async", "duration": 0.3, "window": 100}, 60)
    assert many["errors"] == 0 and many["in_flight_limit"] == 100 and many["rate"] > 0
    with ControlClient(nats_server.port) as c:
        stored = c.stream_messages("JS")
        assert stored == one["acked"] + many["acked"]
        c.add_consumer("JS", "R")
    spec = {"url": url, "mode": "fetch", "stream": "JS", "durable": "R", "batch": 50}
    read = js.run({**spec, "messages": stored}, 60)
    assert read["messages"] == stored and read["errors"] == [] and read["seconds"] > 0


@pytest.mark.timeout(120)
def test_a_failure_is_an_error_with_the_reason(nats_server: NatsServer) -> None:
    js = _found()
    url = f"nats://127.0.0.1:{nats_server.port}"
    spec = {"url": url, "mode": "fetch", "stream": "NONE", "durable": "R", "batch": 1}
    with pytest.raises(natsjs.NatsJsError, match="StreamNotFoundError: stream not found"):
        js.run({**spec, "messages": 1}, 60)
