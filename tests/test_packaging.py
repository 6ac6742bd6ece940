"""What built wheels carry: the console's page, script and style, and the pipeline's logging
configuration, are package data of the agent's; the benchmark suite is a wheel of its own."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from support.scriptvenv import ROOT


def test_wheel_carries_the_console_files(tmp_path: Path) -> None:
    # Built from a copy, so that the build leaves nothing in the checkout.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("infinistream-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    static = "infinistream/server/monitoring/console/static/"
    assert {static + n for n in ("index.html", "console.js", "console.css")} <= names
    # Spark's logging configuration of the pipeline jobs.
    assert "infinistream/pipeline/log4j2.properties" in names
    # The benchmark suite is a distribution of its own (bench/), not part of the agent's wheel.
    assert not [n for n in names if "bench" in n.split("/")[0]]


def test_the_benchmark_wheel_carries_its_nats_js_script(tmp_path: Path) -> None:
    source = tmp_path / "bench"
    shutil.copytree(
        ROOT / "bench", source, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("infinistream_bench-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert "infinistream_bench/natsjs_load.mjs" in archive.namelist()
