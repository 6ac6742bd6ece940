"""nats-server's log line: `[pid] 2026/11/25 04:31:32.339248 [INF] message`.

The pid prefix is always there; the time only with `logtime` (the default), in local time
unless `logtime_utc`. Labels are nats-server's, coloured as it colours them when writing to a
terminal.
"""

from __future__ import annotations

import logging
import os
import time

# nats-server's Tracef level, below DEBUG: protocol lines, logged by `-V`.
TRACE = 5
logging.addLevelName(TRACE, "TRACE")

LABELS = {
    TRACE: "TRC",
    logging.DEBUG: "DBG",
    logging.INFO: "INF",
    logging.WARNING: "WRN",
    logging.ERROR: "ERR",
    logging.CRITICAL: "FTL",
}
# nats-server's colours (logger/log.go setColoredLabelFormats).
COLOURS = {"TRC": "33", "DBG": "36", "INF": "32", "WRN": "0;93", "ERR": "31", "FTL": "31"}


def label(levelno: int, colour: bool = False) -> str:
    """`[INF] ` for INFO: the nearest label at or below the level."""
    text = "FTL"
    for level in sorted(LABELS):
        if levelno >= level:
            text = LABELS[level]
    if colour:
        return f"[\x1b[{COLOURS[text]}m{text}\x1b[0m] "
    return f"[{text}] "


class NatsFormatter(logging.Formatter):
    def __init__(self, *, logtime: bool = True, utc: bool = False, colour: bool = False) -> None:
        super().__init__()
        self.logtime = logtime
        self.utc = utc
        self.colour = colour

    def format(self, record: logging.LogRecord) -> str:
        # os.getpid() per line, not once: `--workers` forks processes that log on their own.
        parts = [f"[{os.getpid()}] "]
        if self.logtime:
            clock = time.gmtime if self.utc else time.localtime
            stamp = time.strftime("%Y/%m/%d %H:%M:%S", clock(record.created))
            micros = int((record.created % 1) * 1_000_000)
            parts.append(f"{stamp}.{micros:06d} ")
        parts.append(label(record.levelno, self.colour))
        parts.append(record.getMessage())
        if record.exc_info:
            exc = record.exc_info[1]
            if getattr(exc, "said_in_words", False):
                # An error whose message says it all (a store that refuses or cannot be
                # reached): loops that retry log it each time, a traceback would be noise.
                parts.append(f": {exc}")
            else:
                parts.append("\n" + self.formatException(record.exc_info))
        return "".join(parts)
