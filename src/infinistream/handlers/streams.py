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
    StreamInfoRequest,
    StreamNamesRequest,
    StreamPurgeRequest,
    decode,
    stream_config_to_wire,
)
from infinistream.jetstream.times import go_time, go_time_or_zero, parse_go_time
from infinistream.metadata.kv import Compare, Delete, DeletePrefix, MetadataStore, Put
from infinistream.stream import records
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.changes import Changes
from infinistream.stream.committer import Committer
from infinistream.stream.config import check_update, normalize
from infinistream.stream.damage import DamagedMessage
from infinistream.stream.erase import erase_requests, record_erase, request_to_wire
from infinistream.stream.limits import enforce_limits
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
        subjects = view.subjects_matching(req.subjects_filter)
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

    def reserved(self) -> int:
        """The bytes the account's streams reserve (their `max_bytes`), for account info."""
        return sum(max(e.config.max_bytes, 0) for e in self.catalog.streams.values())

    async def consumers_of(self, stream: str) -> int:
        return await self.consumers.count(stream)

    async def usage(self) -> tuple[int, int]:
        """How many streams the group has, and the bytes they store (for account info)."""
        await self.catalog.refresh()
        keys = [e.keys.state for e in self.catalog.streams.values()]
        items = await self.meta.get_many(keys)
        return len(self.catalog.streams), sum(decode_state(i.value).bytes for i in items.values())

    # -- create / update / delete ----------------------------------------------------------

    def _decode_config(self, body: bytes) -> StreamConfig:
        # An empty body decodes to an empty config, as in nats-server (whose checks then refuse
        # the missing name); the name is never taken from the subject.
        try:
            cfg: StreamConfig = decode(body, StreamConfig)
        except msgspec.DecodeError as exc:
            raise errors.invalid_json(exc) from None
        _check_enums(cfg)
        return cfg

    def _requested_config(self, name: str, body: bytes) -> StreamConfig:
        cfg = self._decode_config(body)
        if cfg.name != name:
            raise errors.stream_mismatch()
        if any(c in name for c in "/\\"):
            raise errors.stream_name_contains_path_separators()
        return cfg

    async def create(self, name: str, body: bytes) -> dict[str, Any]:
        requested = self._requested_config(name, body)
        if requested.sealed:
            raise errors.stream_invalid_config("stream configuration for create can not be sealed")
        cfg = normalize(requested)
        for _ in range(MAX_CATALOG_ATTEMPTS):
            marker = await self.meta.get(catalog_key(self.catalog.group))
            # Not forced: every create, update and delete bumps the catalog marker, so an
            # unchanged marker means the catalog is current, and a create costs no listing of
            # every stream (which made creating N streams cost O(N^2)). The txn below compares
            # the marker read above, so a create racing another still fails and retries.
            await self.catalog.refresh()
            existing = self.catalog.streams.get(name)
            if existing is not None:
                if existing.config != cfg:
                    raise errors.stream_name_exist()
                response = await self.info_response(name, TYPE_PREFIX + "stream_create_response")
                # nats-server answers an identical re-create with did_create set, too.
                response["did_create"] = True
                return response
            self._check_fits(name, cfg, requested.storage, creating=True)
            keys = self.catalog.keys(name)
            now = time.time_ns()
            uid = os.urandom(8).hex()
            first = cfg.first_seq or 1
            record = StreamRecord(config=cfg, created_ns=now, uid=uid)
            state = StreamState(uid=uid, first_seq=first, last_seq=first - 1)
            result = await self.meta.txn(
                [
                    Compare(catalog_key(self.catalog.group), marker.mod_revision if marker else 0),
                    Compare(keys.config, 0),
                ],
                [
                    Put(keys.config, records.encode(record)),
                    DeletePrefix(keys.prefix),
                    Put(keys.state, records.encode(state)),
                    Put(
                        catalog_key(self.catalog.group),
                        catalog_change(marker.mod_revision if marker else 0, name),
                    ),
                ],
            )
            if result.succeeded:
                await self.catalog.refresh()
                response = await self.info_response(name, TYPE_PREFIX + "stream_create_response")
                response["did_create"] = True
                return response
        raise errors.stream_create("stream catalog kept changing, try again")

    async def update(self, name: str, body: bytes) -> dict[str, Any]:
        requested = self._decode_config(body)
        # nats-server checks the config itself (checkStreamCfg) before the name in the subject.
        normalize(requested)
        if requested.name != name:
            raise errors.stream_mismatch()
        for _ in range(MAX_CATALOG_ATTEMPTS):
            marker = await self.meta.get(catalog_key(self.catalog.group))
            await self.catalog.refresh(force=True)
            existing = self.catalog.streams.get(name)
            if existing is None:
                raise errors.stream_not_found()
            cfg = check_update(existing.config, requested)
            self._check_fits(name, cfg, requested.storage, creating=False)
            record = StreamRecord(config=cfg, created_ns=existing.created_ns, uid=existing.uid)
            result = await self.meta.txn(
                [
                    Compare(catalog_key(self.catalog.group), marker.mod_revision if marker else 0),
                    Compare(existing.keys.config, existing.revision),
                ],
                [
                    Put(existing.keys.config, records.encode(record)),
                    Put(
                        catalog_key(self.catalog.group),
                        catalog_change(marker.mod_revision if marker else 0, name),
                    ),
                ],
            )
            if result.succeeded:
                await self.catalog.refresh()
                # Tighter limits apply at once, as in nats-server.
                await self.committer.change_stream(name, enforce_limits)
                return await self.info_response(name, TYPE_PREFIX + "stream_update_response")
        raise errors.stream_update("stream catalog kept changing, try again")

    async def delete(self, name: str, body: bytes) -> dict[str, Any]:
        if not _is_empty_request(body):
            raise errors.not_empty_request()
        for _ in range(MAX_CATALOG_ATTEMPTS):
            marker = await self.meta.get(catalog_key(self.catalog.group))
            keys = self.catalog.keys(name)
            item = await self.meta.get(keys.config)
            if item is None:
                raise errors.stream_not_found()
            result = await self.meta.txn(
                [
                    Compare(catalog_key(self.catalog.group), marker.mod_revision if marker else 0),
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
                    Put(
                        catalog_key(self.catalog.group),
                        catalog_change(marker.mod_revision if marker else 0, name),
                    ),
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
        if kind != TYPE_PREFIX + "stream_info_response":
            # nats-server names the stream's leader in STREAM.INFO only.
            del response["cluster"]
        if kind == TYPE_PREFIX + "stream_create_response":
            # ... and a lone server's create response leaves the domain out (jsStreamCreate).
            response.pop("domain", None)
        if req is not None and req.subjects_filter:
            # nats-server pages subject details by JSMaxSubjectDetails.
            total = len(response["state"].get("subjects", {}))
            response.update(total=total, offset=0, limit=MAX_SUBJECT_DETAILS)
        elif kind == TYPE_PREFIX + "stream_info_response":
            # StreamInfo responses embed ApiPaged, which nats-server always renders.
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
            "config": stream_config_to_wire(record.config),
            "created": go_time_or_zero(record.created_ns),
            "state": stream_state_to_wire(state, consumers, view, req),
        }
        if self.domain:
            info["domain"] = self.domain
        info["cluster"] = {"leader": self.server_name}
        info["ts"] = go_time(time.time_ns())
        return info

    async def info(self, name: str, body: bytes) -> dict[str, Any]:
        req = _decode_request(body, StreamInfoRequest)
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
        req = _decode_request(body, StreamNamesRequest)
        entries = await self._sorted_streams(req.subject)
        # nats-server clamps an offset past the end to the total.
        offset = min(max(req.offset, 0), len(entries))
        page = entries[offset : offset + NAMES_LIMIT]
        return {
            "type": TYPE_PREFIX + "stream_names_response",
            "total": len(entries),
            "offset": offset,
            "limit": NAMES_LIMIT,
            "streams": [e.name for e in page],
        }

    async def list(self, body: bytes) -> dict[str, Any]:
        req = _decode_request(body, StreamNamesRequest)
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
            del info["cluster"]  # as nats-server lists them
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
        req = _decode_request(body, StreamPurgeRequest)
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
        if not body:
            raise errors.bad_request()
        req = _decode_request(body, MsgDeleteRequest)

        def plan_delete(entry: StreamEntry, changes: Changes) -> None:
            if entry.config.sealed:
                raise errors.stream_sealed()
            if entry.config.deny_delete:
                raise errors.stream_msg_delete_failed("message delete not permitted")
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

        await self.committer.change_stream(name, plan_delete)
        return {"type": TYPE_PREFIX + "stream_msg_delete_response", "success": True}

    async def erase_status(self, name: str, body: bytes) -> dict[str, Any]:
        """`$JS.API.STREAM.ERASE.STATUS.<stream>` (InfiniStream's extension): the stream's
        erase requests, oldest first, and whether each is complete and when. The requests
        outlive the stream (its objects may still hold the bytes)."""
        if not _is_empty_request(body):
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
        if it is damaged."""
        view = await self.catalog.view(name)
        if view is None:
            raise errors.stream_not_found()
        seq = await self.catalog.answer(lambda: _seq_asked(view, req))
        if not seq:
            return None
        return await self.catalog.answer_async(lambda: self.reader.read_message(view, seq))

    async def get_msg(self, name: str, body: bytes) -> dict[str, Any]:
        if not body:
            raise errors.bad_request()
        req = _decode_request(body, MsgGetRequest)
        if req.start_time is not None:
            # A time.Time in nats-server's request: one that does not parse is bad JSON.
            try:
                parse_go_time(req.start_time)
            except ValueError as exc:
                raise errors.invalid_json(exc) from None
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
        await self.catalog.refresh()
        if name not in self.catalog.streams:
            raise errors.stream_not_found()
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


_ENUMS = {
    "retention": ("limits", "interest", "workqueue"),
    "discard": ("old", "new"),
    "storage": ("file", "memory"),
    "persist_mode": ("", "default", "async"),
}


def _check_enums(cfg: StreamConfig) -> None:
    """Unknown enum values fail to decode in nats-server: invalid JSON (10025), its text."""
    for field, allowed in _ENUMS.items():
        value = getattr(cfg, field)
        if value not in allowed:
            raw = msgspec.json.encode(value).decode()
            quoted = '"' + raw.replace("\\", "\\\\").replace('"', '\\"') + '"'
            raise errors.invalid_json(f"can not unmarshal {quoted}")
    if cfg.compression not in ("none", "s2"):
        raise errors.invalid_json("unknown compression algorithm")


def _is_empty_request(body: bytes) -> bool:
    """nats-server's isEmptyRequest: nothing, or a JSON object with no fields."""
    if not body.strip():
        return True
    try:
        value = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return False
    return isinstance(value, dict) and not value


def _decode_request(body: bytes, kind: type[Any]) -> Any:
    try:
        return decode(body, kind)
    except msgspec.DecodeError as exc:
        raise errors.invalid_json(exc) from None
