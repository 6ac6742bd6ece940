"""What a run ran on: hardware, kernel, versions, and how busy the machine was."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any


def _first(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    except OSError:
        pass
    return "unknown"


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def filesystem_of(path: Path) -> str:
    """The type of the filesystem holding `path`, from /proc/mounts (longest mount prefix)."""
    best, kind = "", "unknown"
    target = str(path.resolve())
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and target.startswith(parts[1]) and len(parts[1]) > len(best):
            best, kind = parts[1], parts[2]
    return kind


def machine_info(work_dir: Path, nats_server_version: str) -> dict[str, Any]:
    mem_kb = _first("/proc/meminfo", "MemTotal").split()[0]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "cores": os.cpu_count(),
        "ram_gib": round(int(mem_kb) / 1024**2, 1) if mem_kb.isdigit() else None,
        "cpu_model": _first("/proc/cpuinfo", "model name"),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "nats_server": nats_server_version,
        "work_dir": str(work_dir),
        "work_dir_filesystem": filesystem_of(work_dir),
        "load_average_at_start": load_average(),
    }
