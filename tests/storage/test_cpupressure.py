"""CpuPressure: whether threads lately waited for a core, from Linux's pressure file."""

from __future__ import annotations

from pathlib import Path

from infinistream.storage.cpupressure import CONTENDED_PERCENT, CpuPressure, read_some_avg10


def test_reads_some_avg10_from_a_pressure_file(tmp_path: Path) -> None:
    path = tmp_path / "cpu"
    path.write_text(
        "some avg10=12.50 avg60=3.00 avg300=1.00 total=7255445460\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert read_some_avg10(str(path)) == 12.5


def test_no_figure_where_the_kernel_has_none(tmp_path: Path) -> None:
    assert read_some_avg10(str(tmp_path / "missing")) is None
    garbled = tmp_path / "garbled"
    garbled.write_text("some avg10=x\n")
    assert read_some_avg10(str(garbled)) is None


def test_contended_above_the_threshold_only() -> None:
    figures = [CONTENDED_PERCENT - 0.5, CONTENDED_PERCENT, 0.0]
    now = [0.0]
    pressure = CpuPressure(read=lambda: figures.pop(0), clock=lambda: now[0], refresh=1.0)
    assert not pressure.contended()
    now[0] = 1.0
    assert pressure.contended()
    now[0] = 2.0
    assert not pressure.contended()


def test_read_at_most_once_per_refresh() -> None:
    reads: list[float] = []

    def read() -> float:
        reads.append(50.0)
        return 50.0

    now = [10.0]
    pressure = CpuPressure(read=read, clock=lambda: now[0], refresh=1.0)
    for _ in range(100):
        assert pressure.contended()
    assert len(reads) == 1
    now[0] = 11.0
    assert pressure.contended()
    assert len(reads) == 2


def test_unknown_pressure_counts_as_contended() -> None:
    """Without the kernel's figure the hold keeps the behaviour safe on a busy machine."""
    assert CpuPressure(read=lambda: None).contended()
