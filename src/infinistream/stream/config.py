"""Stream configuration: defaults, validation and update rules, with nats-server's error texts."""

from __future__ import annotations

import msgspec

from infinistream.jetstream import errors
from infinistream.jetstream.api import (
    DEFAULT_DUPLICATE_WINDOW_NS,
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    MAX_NAME_LEN,
    StreamConfig,
)
from infinistream.jetstream.durations import SECOND_NS
from infinistream.jetstream.subjects import (
    SubjectIndex,
    collide,
    is_subset,
    is_valid_name,
    is_valid_subject,
)
from infinistream.jetstream.versioning import (
    stream_required_level,
    with_required_level,
    without_versioning,
)
from infinistream.stream.origins import check_origins, check_outputs
from infinistream.stream.records import MAX_START_SEQ

_MS_100 = 100_000_000
_RETENTIONS = ("limits", "interest", "workqueue")
_DISCARDS = ("old", "new")
_STORAGES = ("file", "memory")
_COMPRESSIONS = ("none", "s2")
_API_NAMESPACES = ("$JS.>", "$JSC.>", "$NRG.>")


def _invalid(message: str) -> errors.ApiError:
    return errors.stream_invalid_config(message)


def normalize(config: StreamConfig, *, pedantic: bool = False) -> StreamConfig:
    """Fill defaults and check a requested config the way nats-server's checkStreamCfg does,
    in its order, with its errors (a pedantic request is refused where a default would be
    filled in). What nats-server accepts and InfiniStream does not serve is refused later,
    by `origins.refuse_unsupported`, so that a config nats-server refuses gets its error."""
    if not is_valid_name(config.name):
        raise _invalid("stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(config.name) > MAX_NAME_LEN:
        raise _invalid(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if len(config.description) > MAX_DESCRIPTION_LEN:
        raise _invalid(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    stored_metadata = with_required_level(config.metadata, stream_required_level(config))
    metadata_len = sum(len(k) + len(v) for k, v in stored_metadata.items())
    if metadata_len > MAX_METADATA_LEN:
        raise _invalid(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")
    if config.retention not in _RETENTIONS:
        raise _invalid("invalid retention")
    if config.discard not in _DISCARDS:
        raise _invalid("invalid discard policy")
    if config.compression not in _COMPRESSIONS:
        raise _invalid("invalid compression")
    if config.storage not in _STORAGES:
        raise _invalid("invalid storage type")
    if config.num_replicas > 5:
        raise _invalid("maximum replicas is 5")
    if config.num_replicas < 0:
        raise errors.replicas_count_cannot_be_negative()

    # Object storage replicates and persists every stream the same way, whatever was asked;
    # the config says what was asked, as nats-server's does, replicas as a cluster keeps them.
    cfg = msgspec.structs.replace(
        config,
        subjects=list(config.subjects),
        num_replicas=config.num_replicas or 1,
        metadata=stored_metadata,
    )
    _limits(cfg, pedantic)
    _duplicates(cfg, pedantic)
    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise _invalid("roll-ups require the purge permission")
    if cfg.allow_msg_counter:
        _check_counter(cfg)
    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise _invalid("discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise _invalid("discard new per subject requires max msgs per subject > 0")
    if cfg.first_seq < 0:
        raise _invalid("first sequence can not be negative")
    if cfg.first_seq > MAX_START_SEQ:
        raise _invalid(f"first sequence can not be larger than {MAX_START_SEQ}")
    _markers_and_schedules(cfg, pedantic)
    if cfg.persist_mode == "async":
        # Every write is durable before it is acknowledged whatever the mode: async can only
        # ask for less, so it is accepted, with nats-server's rules.
        if config.storage != "file":
            raise _invalid("async persist mode is only supported on file storage")
        if config.num_replicas > 1:
            raise _invalid("async persist mode is not supported on replicated streams")
        if cfg.allow_atomic:
            raise _invalid("async persist mode is not supported with atomic batch publish")
    elif cfg.persist_mode == "default":
        cfg.persist_mode = ""  # the zero value, as nats-server keeps it
    check_origins(cfg)
    if not cfg.subjects:
        if cfg.mirror is None and not cfg.sources:
            cfg.subjects = [cfg.name]
    elif cfg.mirror is not None:
        raise errors.mirror_with_subjects()
    _check_subjects(cfg.subjects, no_ack=cfg.no_ack, replicas=cfg.num_replicas)
    check_outputs(cfg, pedantic=pedantic)
    if cfg.sealed:
        _apply_sealed(cfg)
    return cfg


def _limits(cfg: StreamConfig, pedantic: bool) -> None:
    """Unset or meaningless limits are none (-1); pedantic requests must say so."""
    for field in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
        value = getattr(cfg, field)
        if value == 0 or value < -1:
            if pedantic and value < -1:
                raise errors.pedantic(f"{field} must be set to -1")
            setattr(cfg, field, -1)
    if cfg.max_age < 0:
        raise _invalid("max age can not be negative")
    if cfg.max_age != 0 and cfg.max_age < _MS_100:
        raise _invalid("max age needs to be >= 100ms")


def _duplicates(cfg: StreamConfig, pedantic: bool) -> None:
    """The duplicate window: two minutes by default, never longer than max_age."""
    if cfg.duplicate_window == 0 and cfg.mirror is None and not cfg.sources:
        window = DEFAULT_DUPLICATE_WINDOW_NS
        if 0 < cfg.max_age < window:
            if pedantic:
                raise errors.pedantic("duplicate window cannot be bigger than max age")
            window = cfg.max_age
        cfg.duplicate_window = window
    if cfg.duplicate_window < 0:
        raise _invalid("duplicates window can not be negative")
    if cfg.max_age != 0 and cfg.duplicate_window > cfg.max_age:
        raise _invalid("duplicates window can not be larger then max age")
    if 0 < cfg.duplicate_window < _MS_100:
        raise _invalid("duplicates window needs to be >= 100ms")


def _check_counter(cfg: StreamConfig) -> None:
    """What a counter stream may not be: every message is an increment on its subject's last
    value, so nothing may drop or refuse messages by other rules (stream.counters)."""
    if cfg.discard == "new":
        raise _invalid("counter stream cannot use discard new")
    if cfg.allow_msg_ttl:
        raise _invalid("counter stream cannot use message TTLs")
    if cfg.allow_msg_schedules:
        raise _invalid("counter stream cannot use message schedules")
    if cfg.retention != "limits":
        raise _invalid("counter stream can only use limits retention")


def _markers_and_schedules(cfg: StreamConfig, pedantic: bool) -> None:
    """What delete markers and schedules need is turned on (refused when pedantic)."""
    if cfg.subject_delete_marker_ttl > 0:
        if cfg.subject_delete_marker_ttl < SECOND_NS:
            raise _invalid("subject delete marker TTL must be at least 1 second")
        if not cfg.allow_msg_ttl:
            if pedantic:
                raise _invalid("subject delete marker cannot be set if message TTLs are disabled")
            cfg.allow_msg_ttl = True
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise _invalid("subject delete marker cannot be set if roll-ups are disabled")
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False
    elif cfg.subject_delete_marker_ttl < 0:
        raise _invalid("subject delete marker TTL must not be negative")
    if cfg.allow_msg_schedules:
        if cfg.discard == "new":
            raise _invalid("message scheduling cannot use discard new")
        # A schedule replaces the one before it by a rollup.
        if not cfg.allow_rollup_hdrs:
            if pedantic:
                raise _invalid("message scheduling cannot be set if roll-ups are disabled")
            cfg.allow_rollup_hdrs, cfg.deny_purge = True, False


def _check_subjects(subjects: list[str], *, no_ack: bool, replicas: int) -> None:
    """nats-server's subject checks, in its order: each subject in turn, then whether it
    overlaps with one after it (the first such, as its pairwise loop finds it). A stream
    without acks may capture everything (with one replica) and the API's subjects.

    The overlaps are found with a subject tree of the stream's subjects, so a stream with
    100,000 subjects is checked in moments, not in 5 billion comparisons.
    """
    later: SubjectIndex[int] = SubjectIndex()
    for i, subject in enumerate(subjects):
        if is_valid_subject(subject):
            later.insert(subject, i)
    seen: set[str] = set()
    for i, subject in enumerate(subjects):
        if not is_valid_subject(subject):
            raise _invalid("invalid subject")
        if subject in seen:
            raise _invalid("duplicate subjects detected")
        seen.add(subject)
        if subject == ">":
            if not no_ack:
                raise _invalid("capturing all subjects requires no-ack to be true")
            if replicas != 1:
                raise _invalid("capturing all subjects requires replicas of 1")
        if not no_ack:
            _check_api_overlap(subject)
        other = min((j for j in later.colliding(subject) if j > i), default=None)
        if other is not None:
            raise _invalid(f'subject "{subject}" overlaps with "{subjects[other]}"')


def _check_api_overlap(subject: str) -> None:
    # Streams made before these rules may hold $JS.EVENT.> and $SYS.ACCOUNT.>: allowed still.
    for namespace in _API_NAMESPACES:
        if collide(subject, namespace) and not is_subset(subject, "$JS.EVENT.>"):
            raise _invalid("subjects that overlap with jetstream api require no-ack to be true")
    if collide(subject, "$SYS.>") and not is_subset(subject, "$SYS.ACCOUNT.>"):
        raise _invalid("subjects that overlap with system api require no-ack to be true")


def _apply_sealed(cfg: StreamConfig) -> None:
    cfg.max_age = 0
    cfg.discard = "new"
    cfg.deny_delete = True
    cfg.deny_purge = True
    cfg.allow_rollup_hdrs = False


def check_update(old: StreamConfig, new: StreamConfig, *, pedantic: bool = False) -> StreamConfig:
    """Normalize `new` and check it may replace `old` (nats-server's configUpdateCheck)."""
    cfg = normalize(new, pedantic=pedantic)
    if cfg.name != old.name:
        raise _invalid("stream configuration name must match original")
    if cfg.storage != old.storage:
        raise _invalid("stream configuration update can not change storage type")
    if cfg.retention != old.retention and "workqueue" in (old.retention, cfg.retention):
        raise _invalid(
            "stream configuration update can not change retention policy to/from workqueue"
        )
    if not cfg.sealed and old.sealed:
        raise _invalid("stream configuration update can not unseal a sealed stream")
    if not cfg.deny_delete and old.deny_delete:
        raise _invalid("stream configuration update can not cancel deny message deletes")
    if not cfg.deny_purge and old.deny_purge:
        raise _invalid("stream configuration update can not cancel deny purge")
    # A mirror's config stays as it is; removing it makes the mirror a stream of its own.
    if cfg.mirror is not None and cfg.mirror != old.mirror:
        raise errors.stream_mirror_not_updatable()
    if old.allow_msg_ttl and not cfg.allow_msg_ttl:
        raise _invalid("message TTL status can not be disabled")
    if cfg.allow_msg_counter != old.allow_msg_counter:
        raise _invalid("stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not cfg.allow_msg_schedules:
        raise _invalid("message schedules can not be disabled")
    if old.persist_mode != cfg.persist_mode:
        raise _invalid("stream configuration update can not change persist mode")
    # nats-server keeps the original first_seq when an update leaves it unset; one it sets
    # is kept in the config and changes nothing stored (2.15 no longer refuses it).
    cfg.first_seq = new.first_seq or old.first_seq
    return cfg


def same_config(a: StreamConfig, b: StreamConfig) -> bool:
    """Whether two configs are equal but for their versioning metadata (an identical create
    of a stream made by an earlier release, which stored no required level)."""
    return msgspec.structs.replace(
        a, metadata=without_versioning(a.metadata)
    ) == msgspec.structs.replace(b, metadata=without_versioning(b.metadata))
