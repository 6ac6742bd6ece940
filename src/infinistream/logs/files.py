"""The log file of `-l FILE`, rotated as nats-server rotates it.

With a size limit (`--log_size_limit`, `logfile_size_limit`), the write that takes the file
past it renames the file to `FILE.YYYY.MM.DD.HH.MM.SS.NNNNNNNNN` and starts a new one whose
first line says where the backup went; with `logfile_max_num`, only that many files are kept
(the live one and the newest backups), the oldest backups removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from pathlib import Path

# nats-server's file permissions for log files (logger/log.go defaultLogPerms).
LOG_PERMS = 0o640
_BACKUP_STAMP = re.compile(r"\.\d{4}\.\d{2}\.\d{2}\.\d{2}\.\d{2}\.\d{2}\.\d{9}$")


class LogFile(logging.Handler):
    def __init__(self, path: str, *, size_limit: int = 0, max_files: int = 0) -> None:
        super().__init__()
        self.path = Path(path)
        self.size_limit = size_limit
        self.max_files = max_files
        self._fd = self._open()
        self._size = os.fstat(self._fd).st_size

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, LOG_PERMS)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._write(self.format(record))
            if self.size_limit > 0 and self._size > self.size_limit:
                self._rotate(record)
        except Exception:
            self.handleError(record)

    def _write(self, line: str) -> None:
        data = (line + "\n").encode("utf-8", "backslashreplace")
        os.write(self._fd, data)
        self._size += len(data)

    def _rotate(self, record: logging.LogRecord) -> None:
        now = time.time_ns()
        stamp = time.strftime("%Y.%m.%d.%H.%M.%S", time.localtime(now // 1_000_000_000))
        backup = f"{self.path}.{stamp}.{now % 1_000_000_000:09d}"
        os.close(self._fd)
        os.rename(self.path, backup)
        self._fd = self._open()
        self._size = 0
        note = logging.makeLogRecord(
            {
                "name": record.name,
                "levelno": logging.INFO,
                "levelname": "INFO",
                "msg": 'Rotated log, backup saved as "%s"',
                "args": (backup,),
            }
        )
        self._write(self.format(note))
        if self.max_files > 0:
            self._purge()

    def _purge(self) -> None:
        """Keep the newest `max_files - 1` backups (their names sort by time)."""
        backups = sorted(
            p
            for p in self.path.parent.iterdir()
            if p.name.startswith(self.path.name + ".") and _BACKUP_STAMP.search(p.name)
        )
        for old in backups[: max(len(backups) - (self.max_files - 1), 0)]:
            try:
                old.unlink()
            except OSError as exc:
                self._write(f"unable to remove backup log file {old}: {exc}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        super().close()
