"""The streams half of the JetStream API: create, update, info, list, delete, purge, messages."""

from __future__ import annotations

import base64
import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

import msgspec

from infinistream.consumer.directory import marker_op
from infinistream.consumer.records import push_prefix
from infinistream.consumer.service import ConsumerService
from infinistream.handlers.account_limits import check_stream
from infinistream.jetstream import errors
from infinistream.jetstream.accounts import AccountPolicy
from infinistream.jetstream.api import (
    LIST_LIMIT,
    NAMES_LIMIT,
    TYPE_PREFIX,
    MsgDeleteRequest,
    MsgGetRequest,
    StreamConfig,
    StreamConfigRequest,
    StreamInfoRequest,
    StreamListRequest,
    StreamNamesRequest,
    StreamPurgeRequest,
    decode,
    decode_if_object,
    is_empty_request,
    stream_config_to_wire,
)
from infinistream.jetstream.times import go_time, go_time_or_zero, parse_go_time
from infinistream.jetstream.versioning import as_answered, without_server_keys
from infinistream.metadata.kv import Compare, Delete, DeletePrefix, MetadataStore, Put
from infinistream.stream import records
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.changes import Changes
from infinistream.stream.committer import Committer
from infinistream.stream.config import check_update, normalize, same_config
from infinistream.stream.damage import DamagedMessage
from infinistream.stream.erase import erase_requests, record_erase, request_to_wire
from infinistream.stream.limits import enforce_limits
from infinistream.stream.loader import StreamGone
from infinistream.stream.mirror_runner import MirrorRunner, origin_info
from infinistream.stream.origins import ImportedFrom, refuse_unsupported
from infinistream.stream.purge import purge
from infinistream.stream.reader import MessageReader, StoredMessage
from infinistream.stream.records import (
    StreamRecord,
    StreamState,
    catalog_change,
    catalog_key,
    decode_state,
)
from infinistream.stream.view import StreamView, last_for_filter, seq_from_time

# nats-server's JSMaxSubjectDetails: subjects per page of STREAM.INFO subject details.
MAX_SUBJECT_DETAILS = 100_000
MAX_CATALOG_ATTEMPTS = 32
ERASE_STATUS_TYPE = "io.infinistream.api.v1.stream_erase_status_response"


def _subjects_page(subjects: dict[str, int], offset: int) -> dict[str, int]:
    """The page of subject details at `offset` (nats-server's, by JSMaxSubjectDetails, in
    subject order)."""
    offset = max(offset, 0)
    if offset == 0 and len(subjects) <= MAX_SUBJECT_DETAILS:
        return subjects
    page = sorted(subjects)[offset : offset + MAX_SUBJECT_DETAILS]
    return {subject: subjects[subject] for subject in page}


def stream_state_to_wire(
    state: StreamState,
    consumers: int,
    view: StreamView | None = None,
    req: StreamInfoRequest | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "messages": state.msgs,
        "bytes": state.bytes,
        # A stream that never held a message reports first_seq 0, as nats-server's stores do.
        "first_seq": state.first_seq if state.msgs or state.last_seq else 0,
        "first_ts": go_time_or_zero(state.first_ts),
        "last_seq": state.last_seq,
        "last_ts": go_time_or_zero(state.last_ts),
    }
    if state.num_subjects:
        out["num_subjects"] = state.num_subjects
    if req is not None and view is not None and req.subjects_filter:
        subjects = _subjects_page(view.subjects_matching(req.subjects_filter), req.offset)
        if subjects:
            out["subjects"] = subjects
    if state.num_deleted:
        out["num_deleted"] = state.num_deleted
        if req is not None and view is not None and req.deleted_details:
            out["deleted"] = sorted(t for t in view.tombstones() if t <= state.last_seq)
    out["consumer_count"] = consumers
    return out


def _seq_asked(view: StreamView, req: MsgGetRequest) -> int:
    """The sequence a MSG.GET / DIRECT.GET request names (0: none)."""
    seq = req.seq
    if req.start_time is not None:
        seq = seq_from_time(view, parse_go_time(req.start_time))
    if req.next_by_subj:
        return next(iter(view.live_seqs(seq, req.next_by_subj)), 0)
    if req.last_by_subj:
        return last_for_filter(view, req.last_by_subj)
    return seq


@dataclass
class StoredBytes:
    """An account's streams and their bytes, stored and reserved, by storage type (streams
    asked for memory storage are kept in object storage too, but counted as nats-server counts
    them)."""

    streams: int
    memory: int = 0
    storage: int = 0
    reserved_memory: int = 0
    reserved_storage: int = 0


@dataclass(frozen=True, slots=True)
class _CatalogMarker:
    """The catalog marker as a stream create, update or delete read it: the change compares
    its revision (0: none yet) and puts it again, chained to it (records.catalog_change)."""

    key: str
    revision: int

    def compare(self) -> Compare:
        return Compare(self.key, self.revision)

    def change(self, stream: str) -> Put:
        return Put(self.key, catalog_change(self.revision, stream))


@dataclass(eq=False)
class StreamApi:
    """`$JS.API.STREAM.*` requests, and the reads DIRECT.GET and MSG.GET share."""

    meta: MetadataStore
    catalog: Catalog
    committer: Committer
    reader: MessageReader
    # Stream info counts a stream's consumers; a purge moves them past what is gone.
    consumers: ConsumerService
    server_name: str
    # The JetStream domain infos name ("": none).
    domain: str = ""
    # How long an erase may take before it counts as overdue (0: no deadline).
    erase_deadline_ns: int = 0
    # The account's limits, checked on create and update (none by default).
    policy: AccountPolicy = dataclasses.field(default_factory=AccountPolicy)
    # What this agent's copying of mirrors and sources knows (none: it copies none).
    origins: MirrorRunner | None = None
    # The running NATS servers mirrors and sources may read from, by name.
    upstreams: frozenset[str] = frozenset()
    # The account of this agent an external origin is imported from (none: no imports).
    imported: ImportedFrom | None = None

    def _other_configs(self, name: str) -> list[StreamConfig]:
        return [e.config for n, e in self.catalog.streams.items() if n != name]

    def _check_fits(self, name: str, cfg: StreamConfig, storage: str, *, creating: bool) -> None:
        """Refuse a config whose subjects overlap another stream's, or that the account's
        limits do not allow beside its other streams."""
        if self.catalog.overlapping(cfg) is not None:
            raise errors.stream_subject_overlap()
        check_stream(
            self.policy.limits, cfg, self._other_configs(name), storage=storage, creating=creating
        )

    async def consumers_of(self, stream: str) -> int:
        return await self.consumers.count(stream)

    async def usage(self) -> StoredBytes:
        """How many streams the group has, the bytes they store and those they reserve (their
        `max_bytes`), by storage type, as account info gives them."""
        await self.catalog.refresh()
        entries = list(self.catalog.streams.values())
        items = await self.meta.get_many([e.keys.state for e in entries])
        usage = StoredBytes(streams=len(entries))
        for entry in entries:
            item = items.get(entry.keys.state)
            stored = decode_state(item.value).bytes if item is not None else 0
            reserved = max(entry.config.max_bytes, 0)
            if entry.config.storage == "memory":
                usage.memory += stored
                usage.reserved_memory += reserved
            else:
                usage.storage += stored
                usage.reserved_storage += reserved
        return usage

    # -- create / update / delete ----------------------------------------------------------

    def _decode_config(self, body: bytes) -> StreamConfigRequest:
        # An empty body decodes to an empty config, as in nats-server (whose checks then refuse
        # the missing name); the name is never taken from the subject.
        return decode(body, StreamConfigRequest)

    def _requested_config(self, name: str, body: bytes) -> StreamConfigRequest:
        cfg = self._decode_config(body)
        if cfg.name != name:
            raise errors.stream_mismatch()
        if any(c in name for c in "/\\"):
            raise errors.stream_name_contains_path_separators()
        return cfg

    async def _catalog_marker(self) -> _CatalogMarker:
        key = catalog_key(self.catalog.group)
        item = await self.meta.get(key)
        return _CatalogMarker(key, item.mod_revision if item is not None else 0)

    async def create(self, name: str, body: bytes) -> dict[str, Any]:
        request = self._requested_config(name, body)
        requested = request.config()
        if requested.sealed:
            raise errors.stream_invalid_config("stream configuration for create can not be sealed")
        if requested.mirror_direct and requested.mirror is None:
            raise errors.stream_invalid_config("stream has no mirror but does have mirror direct")
        normalized = normalize(requested, pedantic=request.pedantic)
        for _ in range(MAX_CATALOG_ATTEMPTS):
            marker = await self._catalog_marker()
            # Not forced: every create, update and delete bumps the catalog marker, so an
            # unchanged marker means the catalog is current, and a create costs no listing of
            # every stream (which made creating N streams cost O(N^2)). The txn below compares
            # the marker read above, so a create racing another still fails and retries.
            await self.catalog.refresh()
            cfg = self._with_mirror_direct(normalized, pedantic=request.pedantic)
            existing = self.catalog.streams.get(name)
            if existing is not None:
                if not same_config(existing.config, cfg):
                    raise errors.stream_name_exist()
                response = await self.info_response(name, TYPE_PREFIX + "stream_create_response")
                # nats-server answers an identical re-create with did_create set, too.
                response["did_create"] = True
                return response
            self._check_fits(name, cfg, requested.storage, creating=True)
            refuse_unsupported(cfg, self.upstreams, self.imported)
            keys = self.catalog.keys(name)
            now = time.time_ns()
            uid = os.urandom(8).hex()
            first = cfg.first_seq or 1
            record = StreamRecord(config=cfg, created_ns=now, uid=uid)
            state = StreamState(uid=uid, first_seq=first, last_seq=first - 1)
            result = await self.meta.txn(
                [
                    marker.compare(),
                    Compare(keys.config, 0),
                ],
                [
                    Put(keys.config, records.encode(record)),
                    DeletePrefix(keys.prefix),
                    Put(keys.state, records.encode(state)),
                    marker.change(name),
                ],
            )
            if result.succeeded:
                await self.catalog.refresh()
                response = await self.info_response(name, TYPE_PREFIX + "stream_create_response")
                response["did_create"] = True
                return response
        raise errors.stream_create("stream catalog kept changing, try again")

    def _with_mirror_direct(self, cfg: StreamConfig, *, pedantic: bool) -> StreamConfig:
        """A mirror of a stream of this account takes `mirror_direct` from its origin's
        `allow_direct`, as nats-server's checkStreamCfg sets it (a pedantic request that
        says otherwise is refused); an origin elsewhere leaves it as requested."""
        if cfg.mirror is None or cfg.mirror.external is not None:
            return cfg
        origin = self.catalog.streams.get(cfg.mirror.name)
        if origin is None or origin.config.allow_direct == cfg.mirror_direct:
            return cfg
        if pedantic:
            raise errors.pedantic("origin stream has direct get set, mirror has it disabled")
        return msgspec.structs.replace(cfg, mirror_direct=origin.config.allow_direct)

    async def update(self, name: str, body: bytes) -> dict[str, Any]:
        request = self._decode_config(body)
        requested, pedantic = request.config(), request.pedantic
        # nats-server checks the config itself (checkStreamCfg) before the name in the subject.
        normalize(requested, pedantic=pedantic)
        if requested.name != name:
            raise errors.stream_mismatch()
        for _ in range(MAX_CATALOG_ATTEMPTS):
            marker = await self._catalog_marker()
            await self.catalog.refresh(force=True)
            existing = self.catalog.streams.get(name)
            if existing is None:
                raise errors.stream_not_found()
            cfg = self._with_mirror_direct(
                check_update(existing.config, requested, pedantic=pedantic), pedantic=pedantic
            )
            self._check_fits(name, cfg, requested.storage, creating=False)
            refuse_unsupported(cfg, self.upstreams, self.imported)
            record = StreamRecord(
                config=cfg,
                created_ns=existing.created_ns,
                uid=existing.uid,
                updated_ns=time.time_ns(),
            )
            result = await self.meta.txn(
                [
                    marker.compare(),
                    Compare(existing.keys.config, existing.revision),
                ],
                [
                    Put(existing.keys.config, records.encode(record)),
                    marker.change(name),
                ],
            )
            if result.succeeded:
                await self.catalog.refresh()
                # Tighter limits apply at once, as in nats-server.
                await self.committer.change_stream(name, enforce_limits)
                return await self.info_response(name, TYPE_PREFIX + "stream_update_response")
        raise errors.stream_update("stream catalog kept changing, try again")

    async def delete(self, name: str, body: bytes) -> dict[str, Any]:
        if not is_empty_request(body):
            raise errors.not_empty_request()
        for _ in range(MAX_CATALOG_ATTEMPTS):
            marker = await self._catalog_marker()
            keys = self.catalog.keys(name)
            item = await self.meta.get(keys.config)
            if item is None:
                raise errors.stream_not_found()
            result = await self.meta.txn(
                [
                    marker.compare(),
                    Compare(keys.config, item.mod_revision),
                ],
                # Consumers and everything else of the stream live under its prefix, but for
                # its push consumers' directory entries; the objects it referenced are left
                # for the janitor.
                [
                    Delete(keys.config),
                    DeletePrefix(keys.prefix),
                    DeletePrefix(push_prefix(self.catalog.group, name)),
                    marker_op(self.catalog.group),
                    marker.change(name),
                ],
            )
            if result.succeeded:
                self.catalog.drop_view(name)
                await self.catalog.refresh()
                return {"type": TYPE_PREFIX + "stream_delete_response", "success": True}
        raise errors.stream_delete("stream catalog kept changing, try again")

    # -- info and lists ----------------------------------------------------------------------

    async def info_response(
        self, name: str, kind: str, req: StreamInfoRequest | None = None
    ) -> dict[str, Any]:
        keys = self.catalog.keys(name)
        items = await self.meta.get_many([keys.config, keys.state])
        record_item, state_item = items.get(keys.config), items.get(keys.state)
        if record_item is None or state_item is None:
            raise errors.stream_not_found()
        record = records.decode_record(record_item.value)
        state = decode_state(state_item.value)
        view = None
        if req is not None and (req.subjects_filter or req.deleted_details):
            view = await self.catalog.view(name, state_item)
        response: dict[str, Any] = {"type": kind}
        consumers = await self.consumers_of(name)
        response.update(
            await self.catalog.answer(lambda: self._info(record, state, consumers, view, req))
        )
        response.update(
            await origin_info(self.catalog, self.origins, record.config, state.last_seq)
        )
        if kind != TYPE_PREFIX + "stream_info_response":
            # nats-server names the stream's leader in STREAM.INFO only.
            del response["cluster"]
        if kind == TYPE_PREFIX + "stream_create_response":
            # ... and a lone server's create response leaves the domain out (jsStreamCreate).
            response.pop("domain", None)
        if kind == TYPE_PREFIX + "stream_info_response":
            # StreamInfo responses embed ApiPaged, which nats-server always renders: the page
            # of subject details, where a subjects filter matched any.
            total = 0
            if view is not None and req is not None and req.subjects_filter:
                filt = req.subjects_filter
                total = len(await self.catalog.answer(lambda: view.subjects_matching(filt)))
            if total:
                assert req is not None
                offset = min(max(req.offset, 0), total)
                response.update(total=total, offset=offset, limit=MAX_SUBJECT_DETAILS)
            else:
                response.update(total=0, offset=0, limit=0)
        return response

    def _info(
        self,
        record: StreamRecord,
        state: StreamState,
        consumers: int,
        view: StreamView | None,
        req: StreamInfoRequest | None,
    ) -> dict[str, Any]:
        info: dict[str, Any] = {
            "config": stream_config_to_wire(record.config)
            | {"metadata": as_answered(record.config.metadata)},
            "created": go_time_or_zero(record.created_ns),
            "state": stream_state_to_wire(state, consumers, view, req),
        }
        if self.domain:
            info["domain"] = self.domain
        info["cluster"] = {"leader": self.server_name}
        info["ts"] = go_time(time.time_ns())
        return info

    async def info(self, name: str, body: bytes) -> dict[str, Any]:
        req = decode_if_object(body, StreamInfoRequest)
        return await self.info_response(name, TYPE_PREFIX + "stream_info_response", req)

    async def _sorted_streams(self, subject: str) -> list[StreamEntry]:
        await self.catalog.refresh()
        entries = sorted(self.catalog.streams.values(), key=lambda e: e.name)
        if subject:
            # nats-server lists the streams with a subject that collides with the filter.
            wanted = self.catalog.streams_colliding(subject)
            entries = [e for e in entries if e.name in wanted]
        return entries

    async def names(self, body: bytes) -> dict[str, Any]:
        req = decode_if_object(body, StreamNamesRequest)
        entries = await self._sorted_streams(req.subject)
        # nats-server clamps an offset past the end to the total.
        offset = min(max(req.offset, 0), len(entries))
        page = entries[offset : offset + NAMES_LIMIT]
        return {
            "type": TYPE_PREFIX + "stream_names_response",
            "total": len(entries),
            "offset": offset,
            "limit": NAMES_LIMIT,
            # null for an empty page: nats-server appends to a nil slice (a list starts empty).
            "streams": [e.name for e in page] or None,
        }

    async def list(self, body: bytes) -> dict[str, Any]:
        req = decode_if_object(body, StreamListRequest)
        entries = await self._sorted_streams(req.subject)
        offset = min(max(req.offset, 0), len(entries))
        page = entries[offset : offset + LIST_LIMIT]
        infos = []
        state_items = await self.meta.get_many([e.keys.state for e in page])
        for e in page:
            item = state_items.get(e.keys.state)
            if item is None:
                continue
            record = StreamRecord(config=e.config, created_ns=e.created_ns, uid=e.uid)
            info = self._info(
                record, decode_state(item.value), await self.consumers_of(e.name), None, None
            )
            # As nats-server lists them: no cluster, and the config as stored, without the
            # server's version and level that an info adds (setDynamicStreamMetadata).
            del info["cluster"]
            info["config"]["metadata"] = without_server_keys(info["config"]["metadata"])
            infos.append(info)
        return {
            "type": TYPE_PREFIX + "stream_list_response",
            "total": len(entries),
            "offset": offset,
            "limit": LIST_LIMIT,
            "streams": infos,
        }

    # -- purge and delete ------------------------------------------------------------------

    async def purge(self, name: str, body: bytes, *, erase: bool = False) -> dict[str, Any]:
        req = decode_if_object(body, StreamPurgeRequest)
        if req.seq and req.keep:
            raise errors.bad_request()

        def plan_purge(entry: StreamEntry, changes: Changes) -> int:
            if entry.config.sealed:
                raise errors.stream_sealed()
            if entry.config.deny_purge:
                raise errors.stream_purge_failed("stream purge not permitted")
            purged = purge(changes, req.filter, req.seq, req.keep)
            if erase:
                record_erase(changes, self.catalog.group, name, "purge")
            return purged

        purged = await self.committer.change_stream(name, plan_purge)
        await self.consumers.purged(name)
        return {"type": TYPE_PREFIX + "stream_purge_response", "success": True, "purged": purged}

    async def delete_msg(self, name: str, body: bytes) -> dict[str, Any]:
        if is_empty_request(body):
            raise errors.bad_request()
        req = decode(body, MsgDeleteRequest)
        allowed = False

        def plan_delete(entry: StreamEntry, changes: Changes) -> None:
            nonlocal allowed
            allowed = False
            if entry.config.sealed:
                raise errors.stream_sealed()
            if entry.config.deny_delete:
                raise errors.stream_msg_delete_failed("message delete not permitted")
            allowed = True
            # Outside the live range nats-server's file store fails with its own errors
            # (ErrStoreEOF past the end, ErrStoreMsgNotFound below the start, 0 included);
            # only a deleted sequence inside the range is "sequence not found".
            if req.seq > changes.last_seq:
                raise errors.stream_msg_delete_failed("stream store EOF")
            if req.seq < changes.first_seq:
                raise errors.stream_msg_delete_failed("no message found")
            if not changes.kill(req.seq):
                raise errors.sequence_not_found(req.seq)
            if not req.no_erase:
                # nats-server's secure delete: here, a request that the bytes leave every
                # object (stream/erase.py), committed with the tombstone.
                record_erase(changes, self.catalog.group, name, "delete")

        kind = TYPE_PREFIX + "stream_msg_delete_response"
        try:
            await self.committer.change_stream(name, plan_delete)
        except errors.ApiError as exc:
            if not allowed:
                raise
            # A delete the stream allows but its store fails: nats-server answers it as a
            # served request (sendAPIResponse), so account info counts no error for it.
            return {"type": kind, "error": exc.to_dict()}
        return {"type": kind, "success": True}

    async def erase_status(self, name: str, body: bytes) -> dict[str, Any]:
        """`$JS.API.STREAM.ERASE.STATUS.<stream>` (InfiniStream's extension): the stream's
        erase requests, oldest first, and whether each is complete and when. The requests
        outlive the stream (its objects may still hold the bytes)."""
        if not is_empty_request(body):
            raise errors.not_empty_request()
        requests = await erase_requests(self.meta, self.catalog.group, name)
        await self.catalog.refresh()
        if not requests and name not in self.catalog.streams:
            raise errors.stream_not_found()
        wire = [request_to_wire(r, self.erase_deadline_ns) for _, r in requests]
        return {
            "type": ERASE_STATUS_TYPE,
            "stream": name,
            "total": len(wire),
            "pending": sum(1 for r in wire if r["state"] != "complete"),
            "erasures": wire,
        }

    # -- reading messages ------------------------------------------------------------------

    async def find(self, name: str, req: MsgGetRequest) -> StoredMessage | None:
        """The message a MSG.GET / DIRECT.GET request names, or None; raises DamagedMessage
        if it is damaged, and stream_not_found if the stream does not exist."""

        async def message(view: StreamView) -> StoredMessage | None:
            seq = _seq_asked(view, req)
            return await self.reader.read_message(view, seq) if seq else None

        # One read of metadata brings the catalog's marker and the stream's state with what
        # the view lacks to answer (a page of its index): a cold get costs that and the GET.
        try:
            return await self.catalog.ask(name, message)
        except StreamGone:
            raise errors.stream_not_found() from None

    async def get_msg(self, name: str, body: bytes) -> dict[str, Any]:
        if is_empty_request(body):
            raise errors.bad_request()
        req = decode(body, MsgGetRequest)
        if req.batch > 0 or req.max_bytes > 0:
            raise errors.bad_request()
        if (
            (req.seq > 0 and req.last_by_subj)
            or (
                not req.seq
                and not req.last_by_subj
                and not req.next_by_subj
                and req.start_time is None
            )
            or (req.seq > 0 and req.start_time is not None)
            or (req.start_time is not None and req.last_by_subj)
            or (req.last_by_subj and req.next_by_subj)
        ):
            raise errors.bad_request()
        try:
            msg = await self.find(name, req)
        except DamagedMessage as exc:
            raise errors.stream_store_failed(exc) from None
        if msg is None:
            raise errors.no_message_found()
        message: dict[str, Any] = {"subject": msg.subject, "seq": msg.seq}
        if msg.headers and not req.no_hdr:
            message["hdrs"] = base64.b64encode(msg.headers).decode()
        if msg.data:
            message["data"] = base64.b64encode(msg.data).decode()
        message["time"] = go_time_or_zero(msg.ts)
        return {"type": TYPE_PREFIX + "stream_msg_get_response", "message": message}
