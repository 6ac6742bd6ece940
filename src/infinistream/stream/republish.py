"""A stream's `republish` (ADR-28): its config rules and the message a commit republishes.

Once a message is committed, a stream with `republish` publishes it again to the subject its
`src`/`dest` transform maps the stored subject to, with headers that say where it came from:
`Nats-Stream`, `Nats-Subject`, `Nats-Sequence`, `Nats-Time-Stamp` and `Nats-Last-Sequence`
(the subject's previous sequence, 0 if none), after the message's own headers; with
`headers_only` the body is left out and `Nats-Msg-Size` gives its size. Who delivers it is
stream.republisher's job; the rules and the wire form are here.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.jetstream.subjects import FWC, collide, is_valid_subject
from infinistream.jetstream.times import go_time
from infinistream.jetstream.transforms import SubjectTransform, TransformError, compile_transform
from infinistream.stream.subject_transform import mapping_of


@dataclass(frozen=True, slots=True)
class RepublishRule:
    """A stream's compiled republish."""

    transform: SubjectTransform
    headers_only: bool

    def destination(self, subject: str) -> str | None:
        """Where a message stored under `subject` is republished; None if nowhere (not
        matched by `src`, or mapped to a subject no one can publish to)."""
        dest = self.transform.transform(subject)
        if dest is None or not is_valid_subject(dest, allow_wildcards=False):
            return None
        return dest


def check_republish(cfg: StreamConfig, *, pedantic: bool = False) -> None:
    """nats-server's checks of `republish` (checkStreamCfg), in its order; fills an empty
    `src` with `>`, and the implicit republish of a transform's subjects (both refused when
    `pedantic`)."""
    republish = cfg.republish
    if republish is None:
        return
    src, dest = republish.src, republish.dest
    if not src:
        if pedantic:
            raise errors.pedantic("republish source can not be empty")
        src = FWC
    transform = mapping_of(cfg.subject_transform)
    # Republishing everything to the same subjects would feed the stream itself, unless a
    # transform stores it under other subjects: then its destination is what is republished.
    if (
        dest == FWC
        and src == FWC
        and transform is not None
        and len(cfg.subjects) == 1
        and transform[0] == cfg.subjects[0]
    ):
        if pedantic:
            raise errors.pedantic("implicit republish based on subject transform")
        src = dest = transform[1]
    if any(collide(dest, subject) for subject in cfg.subjects):
        raise errors.stream_invalid_config(
            "stream configuration for republish destination forms a cycle"
        )
    try:
        compile_transform(src, dest)
    except TransformError:
        raise errors.stream_invalid_config(
            f"stream configuration for republish with transform from '{src}' to '{dest}' not valid"
        ) from None
    cfg.republish = msgspec.structs.replace(republish, src=src, dest=dest)


def republish_rule(cfg: StreamConfig) -> RepublishRule | None:
    """The compiled republish of a checked config; None if it republishes nothing."""
    republish = cfg.republish
    if republish is None:
        return None
    transform = compile_transform(republish.src, republish.dest)
    if transform is None:
        return None
    return RepublishRule(transform, republish.headers_only)


def republished_headers(
    headers: bytes,
    *,
    stream: str,
    subject: str,
    seq: int,
    ts: int,
    last_seq: int,
    msg_size: int | None,
) -> bytes:
    """The republished message's headers: its own (if any), then the republish headers;
    `msg_size` for a headers-only republish."""
    lines = (
        f"Nats-Stream: {stream}\r\nNats-Subject: {subject}\r\nNats-Sequence: {seq}\r\n"
        f"Nats-Time-Stamp: {go_time(ts)}\r\nNats-Last-Sequence: {last_seq}\r\n"
    )
    if msg_size is not None:
        lines += f"Nats-Msg-Size: {msg_size}\r\n"
    head = headers[:-2] if headers else b"NATS/1.0\r\n"
    return head + lines.encode() + b"\r\n"
