"""What a stream config says of where its messages come from and go (mirrors, sources,
subject transforms, republish, placement), checked as nats-server's checkStreamCfg checks it.

InfiniStream serves subject transforms and republish (stream.subject_transform,
stream.republish); it serves none of the others, but a config nats-server itself refuses
gets nats-server's error, in its order, before InfiniStream's own refusal
(`refuse_unsupported`): a client that sends a bad mirror learns what is wrong with it, as it
would from nats-server. The checks that need the origin stream (its subjects, its message
size, cycles through other streams) find no such stream here, as no stream of InfiniStream is
a mirror or has sources."""

from __future__ import annotations

from collections.abc import Callable, Collection

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig, StreamSource
from infinistream.jetstream.subjects import collide, is_literal, is_subset, is_valid_name
from infinistream.jetstream.subjects import is_valid_subject as _is_valid_subject
from infinistream.security.exports import JS_API
from infinistream.stream.republish import check_republish
from infinistream.stream.subject_transform import check_subject_transform

__all__ = ["check_origins", "check_outputs", "refuse_unsupported", "source_identity"]


def _invalid(message: str) -> errors.ApiError:
    return errors.stream_invalid_config(message)


def check_origins(cfg: StreamConfig) -> None:
    """The mirror and source checks, up to the stream's own subjects (checkStreamCfg)."""
    if cfg.mirror is not None:
        _check_mirror(cfg, cfg.mirror)
    if cfg.sources and cfg.allow_msg_schedules:
        raise errors.source_with_msg_schedules()
    _check_sources(cfg)
    # A stream that mirrors or sources itself (nats-server's cycle check, which can find no
    # other stream on the way here).
    for src in cfg.sources or ():
        if src.external is None and src.name == cfg.name and _overlaps(cfg, src.filter_subject):
            raise _invalid("detected cycle")
    if cfg.mirror is not None and cfg.mirror.external is None and cfg.mirror.name == cfg.name:
        raise _invalid("detected cycle")


def _check_mirror(cfg: StreamConfig, mirror: StreamSource) -> None:
    if cfg.first_seq > 0:
        raise errors.mirror_with_first_seq()
    if cfg.subjects:
        raise errors.mirror_with_subjects()
    if cfg.sources:
        raise errors.mirror_with_sources()
    if cfg.allow_msg_counter:
        raise errors.mirror_with_counters()
    if cfg.allow_atomic:
        raise errors.mirror_with_atomic_publish()
    if cfg.allow_batched:
        raise errors.mirror_with_batch_publish()
    if cfg.allow_msg_schedules:
        raise errors.mirror_with_msg_schedules()
    if mirror.consumer is not None and not _consumer_ok(mirror):
        raise errors.mirror_durable_consumer_cfg_invalid()
    if mirror.filter_subject and mirror.subject_transforms:
        raise errors.mirror_multiple_filters_not_allowed()
    if cfg.subject_delete_marker_ttl > 0:
        raise _invalid("subject delete markers forbidden on mirrors")
    transforms = mirror.subject_transforms or []
    for i, tr in enumerate(transforms):
        if tr.src and not _is_valid_subject(tr.src):
            raise errors.mirror_invalid_subject_filter(f"invalid subject {tr.src}")
        if any(j != i and collide(tr.src, other.src) for j, other in enumerate(transforms)):
            raise errors.mirror_overlapping_subject_filters()
    if mirror.external is None:
        if not is_valid_name(mirror.name):
            raise errors.mirror_invalid_stream_name()
    else:
        _check_external(mirror)


def _check_sources(cfg: StreamConfig) -> None:
    names: set[str] = set()
    consumers: set[str] = set()
    for src in cfg.sources or ():
        if not is_valid_name(src.name):
            raise errors.source_invalid_stream_name()
        name = source_identity(src)
        if name in names:
            raise errors.source_duplicate_detected()
        names.add(name)
        transforms = src.subject_transforms or []
        if src.filter_subject and transforms:
            raise errors.source_multiple_filters_not_allowed()
        for tr in transforms:
            if tr.src and not _is_valid_subject(tr.src):
                raise errors.source_invalid_subject_filter(f"invalid subject {tr.src}")
        for i, tr in enumerate(transforms):
            if any(j != i and is_subset(tr.src, o.src) for j, o in enumerate(transforms)):
                raise errors.source_overlapping_subject_filters()
        if src.consumer is not None:
            if not _consumer_ok(src):
                raise errors.source_durable_consumer_cfg_invalid()
            pair = f"{_external_name(src)} {src.consumer.name}"
            if pair in consumers:
                raise errors.source_durable_consumer_duplicate_detected()
            consumers.add(pair)
        if src.external is not None:
            _check_external(src)


def _consumer_ok(src: StreamSource) -> bool:
    """A mirror's or source's durable consumer as nats-server accepts one."""
    consumer = src.consumer
    assert consumer is not None
    deliver = consumer.deliver_subject
    return (
        is_valid_name(consumer.name)
        and is_literal(deliver)
        and _is_valid_subject(deliver)
        and src.opt_start_seq == 0
        and src.opt_start_time is None
        and not src.filter_subject
    )


def _check_external(src: StreamSource) -> None:
    external = src.external
    assert external is not None
    if external.deliver and not _is_publish_subject(external.deliver):
        raise errors.stream_invalid_external_delivery_subj(external.deliver)
    if external.api:
        if not _is_publish_subject(external.api):
            raise _invalid(
                f'stream external api prefix "{external.api}" must be a valid subject without'
                " wildcards"
            )
        if collide(external.api, JS_API):
            raise errors.stream_external_api_overlap(external.api, JS_API)


def _is_publish_subject(subject: str) -> bool:
    return _is_valid_subject(subject) and is_literal(subject)


def _external_name(src: StreamSource) -> str:
    return src.name + (":" + src.external.api if src.external is not None else "")


def source_identity(src: StreamSource) -> str:
    """What makes two sources the same source (composeIName)."""
    name = _external_name(src)
    if src.consumer is not None:
        name += ":C=" + src.consumer.name
    transforms = src.subject_transforms or []
    if transforms:
        source = "\f".join(t.src or ">" for t in transforms)
        destination = "\f".join(t.dest or ">" for t in transforms)
    else:
        source, destination = src.filter_subject or ">", ">"
    return f"{name} {source} {destination}"


def _overlaps(cfg: StreamConfig, filter_subject: str) -> bool:
    return not filter_subject or any(collide(s, filter_subject) for s in cfg.subjects)


def check_outputs(cfg: StreamConfig, *, pedantic: bool) -> None:
    """The subject transform, republish and placement checks, after the subjects'. An empty
    republish source becomes `>`, an empty placement none, as in nats-server."""
    check_subject_transform(cfg)
    check_republish(cfg, pedantic=pedantic)
    placement = cfg.placement
    if placement is not None and not (placement.cluster or placement.tags or placement.preferred):
        cfg.placement = None
    elif placement is not None and placement.preferred:
        raise _invalid("preferred server not permitted in placement")


# The account an external origin is imported from (None: the account's imports reach none).
ImportedFrom = Callable[[StreamSource, bool], str | None]


def _external(
    src: StreamSource | None,
    upstreams: Collection[str],
    imported: ImportedFrom | None,
    mirror: bool,
) -> bool:
    """Whether an origin is in another account or domain that is neither an upstream (whose
    `external.api` is `$JS.<upstream>.API`) nor an account of this agent the stream's account
    imports it from, or is read through a consumer of its own."""
    if src is None:
        return False
    if src.consumer is not None:
        return True
    if src.external is None:
        return False
    parts = src.external.api.split(".")
    if len(parts) == 3 and parts[0] == "$JS" and parts[2] == "API" and parts[1] in upstreams:
        return False
    return imported is None or imported(src, mirror) is None


def refuse_unsupported(
    cfg: StreamConfig, upstreams: Collection[str] = (), imported: ImportedFrom | None = None
) -> None:
    """What nats-server accepts but InfiniStream does not do is refused, never silently ignored:
    after every check nats-server makes, so that a config it refuses gets its error.
    `mirror_direct` alone does nothing without a mirror (a create refuses it, an update does
    not, as in nats-server), and a mirror is refused."""
    unsupported = {
        "mirror from another account or domain": _external(cfg.mirror, upstreams, imported, True),
        "sources from another account or domain": any(
            _external(s, upstreams, imported, False) for s in cfg.sources or ()
        ),
        "placement": cfg.placement is not None,
        "no_ack": cfg.no_ack,
    }
    names = [name for name, used in unsupported.items() if used]
    if names:
        raise _invalid(f"{', '.join(names)} not supported by InfiniStream")
