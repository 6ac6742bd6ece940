"""The benchmark table's real-client rows: a ratio between two client-bound runs says so."""

from __future__ import annotations

from infinistream_bench.table import _client_compare


def _result(rate: float, cores: float) -> dict[str, float]:
    return {"msgs_per_s": rate, "mb_per_s": rate / 1e6, "client_cpu_cores": cores}


def test_a_ratio_of_two_client_bound_runs_says_client_bound() -> None:
    row = _client_compare(
        "nats-py publish_async",
        {"nats_lazy": _result(20_000, 0.98), "infinistream": _result(19_000, 0.97)},
    )
    assert row.cells["ratio_lazy"] == "0.95x (client-bound)"


def test_a_ratio_where_one_client_had_time_to_spare_is_a_plain_ratio() -> None:
    row = _client_compare(
        "nats-py publish",
        {
            "nats_lazy": _result(20_000, 0.95),
            "nats_always": _result(2_000, 0.95),
            "infinistream": _result(10_000, 0.4),
        },
    )
    assert (row.cells["ratio_lazy"], row.cells["ratio_always"]) == ("0.5x", "5.00x")
