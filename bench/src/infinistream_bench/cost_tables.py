"""The object-storage cost tables: requests and the monthly bill by PUT budget and publish
rate, and by how many streams the traffic is spread over."""

from __future__ import annotations

from typing import Any

from infinistream_bench.table import Row, Table, num

BUDGET_COLUMNS = (
    ("rate", "publish rate"),
    ("budget", "PUT budget"),
    ("puts", "PUT/s"),
    ("max_puts", "PUT/s ceiling"),
    ("per_put", "msgs per PUT"),
    ("gets", "GET/s"),
    ("bill", "$/month at S3 prices"),
    ("p50", "ack p50 (ms)"),
    ("p99", "ack p99 (ms)"),
    ("acked", "acked / offered"),
)

SPREAD_COLUMNS = (
    ("streams", "streams"),
    ("msgs", "msgs"),
    ("puts", "PUT/s"),
    ("gets", "GET/s"),
    ("lists", "LIST/s"),
    ("deletes", "DELETE/s"),
    ("puts_mb", "PUT per MB written"),
    ("bytes", "object bytes per payload byte"),
    ("gets_mb", "GET per MB read (cold)"),
    ("write_bill", "$/month writing"),
    ("read_bill", "$/month reading all once"),
)


def budget_label(results: dict[str, Any], key: str) -> str:
    budget = results["workloads"]["put_budget"]["results"][key]
    where = "the local default" if key == "infinistream" else "the S3 default"
    return f"{budget['linger_ms']:g} ms ({where})"


def budget_table(results: dict[str, Any]) -> Table:
    """One row per publish rate and budget, the rates in order so that each budget's row sits
    under the other's."""
    b = results["workloads"]["put_budget"]["results"]
    rates = [row["rate"] for row in next(iter(b.values()))["results"]]
    rows: list[Row] = []
    for i, rate in enumerate(rates):
        for key, budget in b.items():
            r = budget["results"][i]
            share = f"{100 * r['acked_fraction']:.1f}%"
            if r.get("overloaded_at_s"):
                share += " (overloaded)"
            rows.append(
                Row(
                    f"{rate:,} msg/s x {budget['payload']:,} B",
                    {
                        "budget": budget_label(results, key),
                        "puts": num(r["per_s"]["puts"]),
                        "max_puts": num(r["max_puts_per_s"]),
                        "per_put": num(r["messages_per_put"]),
                        "gets": num(r["per_s"]["gets"] + r["per_s"]["heads"]),
                        "bill": f"${r['monthly_usd']:,.2f}",
                        "p50": num(r["p50_ms"]),
                        "p99": num(r["p99_ms"]),
                        "acked": share,
                    },
                )
            )
    return Table(BUDGET_COLUMNS, rows)


def spread_table(results: dict[str, Any]) -> Table:
    rows: list[Row] = []
    for r in results["workloads"]["cost"]["results"]:
        ps = r["per_s"]
        rows.append(
            Row(
                f"{r['streams']:,}",
                {
                    "msgs": f"{r['messages']:,}",
                    "puts": num(ps["puts"]),
                    "gets": num(ps["gets"] + ps["heads"]),
                    "lists": num(ps["lists"]),
                    "deletes": num(ps["deletes"]),
                    "puts_mb": num(r["puts_per_mb_written"]),
                    "bytes": num(r["object_bytes_per_payload_byte"]),
                    "gets_mb": num(r["gets_per_mb_read"]),
                    "write_bill": f"${r['monthly_write_usd']:,.2f}",
                    "read_bill": f"${r['monthly_read_usd']:,.2f}",
                },
            )
        )
    return Table(SPREAD_COLUMNS, rows)
