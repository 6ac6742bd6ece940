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
        (f"publish -> ack, {e['rate']:,} msg/s offered", e["results"]) for e in w["publish_latency"]
    ]
    e2e = w["e2e_latency"]
    panels.append((f"publish -> delivery, {e2e['rate']:g} msg/s", e2e["results"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.4), squeeze=False)
    for ax, (title, per_system) in zip(axes[0], panels, strict=True):
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
