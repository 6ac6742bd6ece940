"""A stream's `subject_transform`: the subject a message is stored under.

nats-server applies the stream's transform to a publish's subject before anything else
(processJetStreamMsg): dedupe, expected-last-subject checks, per-subject limits, consumers'
filters and the stored message all see the mapped subject. A subject the transform's source
does not match is stored as published. The stream still captures publishes by its own
`subjects`; the mapped subject need not be one of them.
"""

from __future__ import annotations

from infinistream.jetstream import errors
from infinistream.jetstream.api import RePublish, StreamConfig, SubjectTransformConfig
from infinistream.jetstream.subjects import is_valid_subject
from infinistream.jetstream.transforms import (
    SubjectTransform,
    TransformError,
    compile_transform,
    validate_mapping,
)


def mapping_of(spec: SubjectTransformConfig | RePublish | None) -> tuple[str, str] | None:
    """(src, dest) of a `{src, dest}` config object; None if there is none."""
    return None if spec is None else (spec.src, spec.dest)


def check_subject_transform(cfg: StreamConfig) -> None:
    """nats-server's checks of `subject_transform` (checkStreamCfg), with its error codes."""
    mapping = mapping_of(cfg.subject_transform)
    if mapping is None:
        return
    src, dest = mapping
    if src and not is_valid_subject(src):
        raise errors.stream_transform_invalid_source(f"invalid subject {src}")
    try:
        validate_mapping(src, dest)
    except TransformError as refused:
        raise errors.stream_transform_invalid_destination(refused) from None


def stream_transform(cfg: StreamConfig) -> SubjectTransform | None:
    """The compiled transform of a stream whose config was checked; None if it has none."""
    mapping = mapping_of(cfg.subject_transform)
    return None if mapping is None else compile_transform(*mapping)


def stored_subject(transform: SubjectTransform | None, subject: str) -> str:
    """The subject a publish is stored under."""
    if transform is None:
        return subject
    mapped = transform.transform(subject)
    return subject if mapped is None else mapped
