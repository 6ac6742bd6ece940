"""The latency distributions of every system as one PNG (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

SYSTEMS = (
    ("nats_lazy", "nats-server, lazy fsync", "tab:blue"),
    ("nats_always", "nats-server, sync always", "tab:orange"),
    ("infinistream", "InfiniStream", "tab:green"),
)
TICKS = (50, 90, 99, 99.9, 99.99)


def nines(p: float) -> float:
    """Percentile on a 'nines' axis: 90 -> 1, 99 -> 2, 99.9 -> 3."""
    return -math.log10(1 - p / 100) if p < 100 else math.nan


def plot_latency(results: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w = results["workloads"]
    panels = [
        (f"{label}, one at a time", w["clients"][key]["results"])
        for key, label in (
            ("nats_py_publish", "nats-py await js.publish()"),
            ("nats_js_publish", "nats.js await js.publish()"),
        )
        if w["clients"][key]["results"]
    ]
    panels += [
        (f"publish -> ack, {e['rate']:,} msg/s offered", e["results"]) for e in w["publish_latency"]
    ]
    e2e = w["e2e_latency"]
    panels.append((f"publish -> delivery, {e2e['rate']:g} msg/s", e2e["results"]))
    watch = w["kv"]["rows"]["kv_watch"]
    rate = next((r["rate"] for r in watch["results"].values()), 0)
    panels.append((f"nats-py KV put -> watcher, {rate:g} puts/s", watch["results"]))
    columns = 3
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.4 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (title, per_system) in zip(flat, panels, strict=False):
        for key, label, color in SYSTEMS:
            if key not in per_system:
                continue
            curve = [(p, ms) for p, ms in per_system[key]["curve_ms"] if p < 100]
            ax.plot(
                [nines(p) for p, _ in curve],
                [max(ms, 1e-3) for _, ms in curve],
                marker=".",
                color=color,
                label=label,
            )
        ax.set_title(title, fontsize=10)
        ax.set_yscale("log")
        ax.set_xticks([nines(p) for p in TICKS], [f"p{p:g}" for p in TICKS])
        ax.set_xlabel("percentile")
        ax.set_ylabel("latency (ms, log scale)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    machine = results["machine"]
    fig.suptitle(
        f"Latency distributions ({machine['cores']} cores, {machine['cpu_model']}, "
        f"{machine['date']})",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
