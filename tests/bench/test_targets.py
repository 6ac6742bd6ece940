"""The durable-speed rows of `infinistream bench --targets`: ratios within a round, each round
reported, and what each system runs."""

from __future__ import annotations

from pathlib import Path

from infinistream_bench.systems import NatsServer, nats_server_binary
from infinistream_bench.targets import (
    ROWS,
    _in_turn,
    _rows_of,
    _systems,
    markdown,
    render,
    render_round,
    unmeasurable,
)


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


def test_the_results_section_gives_every_round_and_the_median_ratio() -> None:
    rounds = [round_of(0.1, 0.5, 0.5), round_of(0.2, 1.0, 2.0), round_of(0.1, 0.4, 0.2)]
    machine = {
        "date": "2026-11-27 12:00:00 UTC",
        "cores": 2,
        "nats_server": "2.15.1",
        "load_average_at_start": [3.0, 2.0, 1.0],
        "load_average_at_end": [4.0, 3.0, 2.0],
    }
    results = {"machine": machine, "rounds": rounds, "problems": ["round 2, x: failed"]}
    text = markdown(results, ["nats_py_seq_p50", "raw_128_512"], 3, [])
    lines = text.splitlines()
    assert lines[0] == "## Durable speed: agent against nats-server, round by round"
    assert "`infinistream bench --targets 3`" in text and "shared" in text
    header = next(line for line in lines if line.startswith("| row |"))
    assert header == (
        "| row | round | nats_lazy | nats_always | infinistream | infinistream ratio |"
    )
    seq = [line for line in lines if line.startswith("| nats-py `await js.publish()`")]
    # Each round: the three systems' figures, the agent's ratio to `always` in that round.
    assert seq == [
        "| nats-py `await js.publish()` one at a time, p50 ms | 1 | 0.1 | 0.5 | 0.5 | 1.00x |",
        "| nats-py `await js.publish()` one at a time, p50 ms | 2 | 0.2 | 1 | 2 | 2.00x |",
        "| nats-py `await js.publish()` one at a time, p50 ms | 3 | 0.1 | 0.4 | 0.2 | 0.50x |",
    ]
    medians = [line for line in lines if "| median |" in line]
    assert medians == [
        "| (lower is better) | median |  |  |  | 1.00x |",
        "| (higher is better) | median |  |  |  | 0.05x |",
    ]
    # nats-server syncing every write has no throughput figure: an empty cell, no ratio.
    raw = "| raw publish, 1 conn x 128 B, 512 in flight, msg/s | 1 | 100,000 |  | 5,000 | 0.05x |"
    assert raw in lines
    assert "- round 2, x: failed" in lines


def test_the_two_agents_swap_places_every_other_round(tmp_path: Path) -> None:
    systems = _systems(tmp_path, nats_server_binary(), str(tmp_path / "before"))
    order = [[s.key for s in _in_turn(systems, n)] for n in range(3)]
    assert order[0] == order[2] == ["nats_lazy", "nats_always", "infinistream", "baseline"]
    assert order[1] == ["nats_lazy", "nats_always", "baseline", "infinistream"]
    alone = _systems(tmp_path, nats_server_binary(), None)
    assert _in_turn(alone, 1) == alone


def test_a_row_whose_client_is_missing_is_reported_not_left_blank() -> None:
    missing = "the nats.js packages are not in /nowhere"
    (problem,) = unmeasurable(["nats_py_seq_p50", "nats_js_seq_p50"], missing)
    assert missing in problem and "nats.js row is not measured" in problem
    assert unmeasurable(["nats_py_seq_p50"], missing) == []
