"""Which file a path names, asked without reading the file's times."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from infinistream.storage.fileid import file_id, file_id_at


def test_a_path_names_the_file_open_there(tmp_path: Path) -> None:
    path = tmp_path / "pack"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert file_id_at(str(path)) == file_id(fd)
        st = os.stat(path)
        assert file_id_at(str(path)) == (st.st_dev, st.st_ino)
    finally:
        os.close(fd)


def test_a_file_renamed_over_the_path_is_another(tmp_path: Path) -> None:
    path, other = tmp_path / "pack", tmp_path / "other"
    path.write_bytes(b"x")
    other.write_bytes(b"y")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.replace(other, path)
        assert file_id_at(str(path)) != file_id(fd)
    finally:
        os.close(fd)


def test_a_link_is_followed(tmp_path: Path) -> None:
    path, link = tmp_path / "pack", tmp_path / "link"
    path.write_bytes(b"x")
    link.symlink_to(path)
    assert file_id_at(str(link)) == file_id_at(str(path))


def test_no_file_raises_what_stat_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        file_id_at(str(tmp_path / "missing"))
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(NotADirectoryError):
        file_id_at(str(tmp_path / "file" / "below"))


def test_asking_leaves_the_times_unseen(tmp_path: Path) -> None:
    """Once its times are seen, Linux stamps a file's next write with the time of that write,
    read from the fine clock; unseen, with a coarse clock's (ticking every few milliseconds),
    mostly earlier than a moment taken just before the write. A question that read the times
    would make every write below stamp a time at or after that moment."""
    path = tmp_path / "pack"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        earlier = 0
        for n in range(50):
            os.fstat(fd)  # seen: the next write takes a fine time, and the mark goes
            os.pwrite(fd, b"a", n)
            file_id_at(str(path))
            moment = time.time_ns()
            os.pwrite(fd, b"b", n)
            if os.fstat(fd).st_mtime_ns < moment:
                earlier += 1
        assert earlier > 0
    finally:
        os.close(fd)
