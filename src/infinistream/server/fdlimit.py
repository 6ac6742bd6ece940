"""How many client connections an agent takes: `max_connections`, and no more than its
open-file limit leaves room for.

Each connection holds a descriptor, and so does each object storage write, the metadata
store's files and sockets, the zone cache's and the monitoring port's connections. An agent
whose connections took every descriptor could no longer write what they publish ("Too many
open files"), so `RESERVED_FILES` are kept for its own use: a connection beyond the cap is
refused as nats-server refuses one beyond `max_connections`, INFO then
-ERR 'maximum connections exceeded'. At start the soft limit is raised to the hard one, as Go's
runtime does for nats-server.
"""

from __future__ import annotations

import logging
import resource
from typing import Final

__all__ = ["RESERVED_FILES", "connection_cap", "raise_open_file_limit"]

log = logging.getLogger(__name__)

RESERVED_FILES: Final = 128


def raise_open_file_limit() -> int:
    """The soft limit on open files, raised to the hard limit when it can be."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open file limit from %d: %s", soft, exc)
    return soft


def connection_cap(max_connections: int, open_files: int) -> int:
    """The connections to take at once: `max_connections`, below `open_files` by the
    reserve (none when `max_connections` is not positive)."""
    cap = max(0, min(max_connections, open_files - RESERVED_FILES))
    if 0 < cap < max_connections:
        log.warning(
            "at most %d client connections (max_connections %d): the open file limit is %d, "
            "and %d files are kept for object storage and metadata",
            cap,
            max_connections,
            open_files,
            RESERVED_FILES,
        )
    return cap
