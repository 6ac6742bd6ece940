"""The durable-speed rows of `infinistream bench --targets`: ratios within a round, each round
reported, and what each system runs."""

from __future__ import annotations

from pathlib import Path

from infinistream_bench.systems import NatsServer, nats_server_binary
from infinistream_bench.targets import ROWS, _rows_of, render, render_round


def round_of(lazy: float, always: float, agent: float) -> dict[str, dict[str, float]]:
    return {
        "nats_lazy": {"nats_py_seq_p50": lazy, "raw_128_512": 100_000.0},
        "nats_always": {"nats_py_seq_p50": always},
        "infinistream": {"nats_py_seq_p50": agent, "raw_128_512": 50_000.0 * lazy},
    }


def test_each_round_is_a_ratio_to_its_own_baseline() -> None:
    rounds = [round_of(0.1, 0.5, 0.5), round_of(0.2, 1.0, 2.0), round_of(0.1, 0.4, 0.2)]
    text = render({"rounds": rounds}, ["nats_py_seq_p50", "raw_128_512"])
    # The sequential publisher against nats-server's fsync per write, every round.
    assert "[infinistream / nats_always, lower is better]: 1.00x / 2.00x / 0.50x" in text
    assert "(median 1.00x)" in text
    # Throughput against nats-server's default.
    assert "[infinistream / nats_lazy, higher is better]: 0.05x / 0.10x / 0.05x" in text
    assert "1 conn x 128 B, 512 in flight" in render_round(rounds[0], ["raw_128_512"])


def test_nats_server_syncing_every_write_runs_only_the_rows_it_is_the_baseline_of(
    tmp_path: Path,
) -> None:
    rows = [key for key, _, _ in ROWS]
    binary = nats_server_binary()
    always = NatsServer("nats_always", "always", tmp_path / "a", "always", binary)
    lazy = NatsServer("nats_lazy", "lazy", tmp_path / "l", "lazy", binary)
    assert _rows_of(always, rows) == ["nats_py_seq_p50", "nats_js_seq_p50"]
    assert _rows_of(lazy, rows) == rows
