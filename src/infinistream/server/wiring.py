"""Building an agent: every part constructed once, here, with what it depends on passed in.

The order follows the dependencies: the stores, the catalog of streams and the reader of
objects; the clients (who receive what every layer sends); consumers (whose interest the
committer asks about on interest streams); the write buffer (which tells consumers of commits
and pauses clients when behind); the API handlers; the router every connection talks to.
"""

from __future__ import annotations

import os

from infinistream import __version__
from infinistream.consumer.retention import interest_lookup
from infinistream.consumer.service import ConsumerService
from infinistream.consumer.store import ConsumerStore
from infinistream.handlers.consumers import ConsumerApi
from infinistream.handlers.router import JetStreamApi
from infinistream.handlers.streams import StreamApi
from infinistream.metadata import open_metadata
from infinistream.pool import LiveMembers, Member
from infinistream.security.auth import Authenticator
from infinistream.server.agent import Agent
from infinistream.server.clients import Clients
from infinistream.server.membership import Membership
from infinistream.server.monitor import Monitoring, MonitorServer, build_monitor_app
from infinistream.server.monitoring.probes import metadata_probe, object_storage_probe
from infinistream.server.monitoring.system import SystemRequests
from infinistream.server.monitoring.usage import OneGroup
from infinistream.server.reports import Identity, Reports, advertised
from infinistream.server.roles import RoleGate
from infinistream.server.routing import Router
from infinistream.server.zone import build_zone_cache, cache_peers
from infinistream.settings import PUT_BURST, Settings
from infinistream.storage import ObjectStore, SectionCache
from infinistream.stream.batches import AtomicBatches
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.compression import StreamCodecs
from infinistream.stream.damage import DamageLog
from infinistream.stream.erase import EraseDeadline
from infinistream.stream.expiry import Expiry
from infinistream.stream.put_budget import PutBudget
from infinistream.stream.reader import MessageReader
from infinistream.stream.scheduler import Scheduler
from infinistream.stream.sealed_index import SealedIndex
from infinistream.stream.write_buffer import WriteBuffer

WRITE_BUFFER_PRESSURE = "write-buffer"
# Seconds a health probe's object storage request may take (within health.PROBE_TIMEOUT).
PROBE_REQUEST_TIMEOUT = 2.0


def build_agent(settings: Settings) -> Agent:
    """An agent on `settings`, its stores open; `Agent.start` makes it serve."""
    s = settings
    if not s.objects or not s.metadata:
        os.makedirs(s.store_dir, exist_ok=True)
    encryption = s.encryption()
    # Index entries (subjects, record lengths) sealed in metadata, and refused clearly when
    # encryption is off but they are sealed.
    meta = SealedIndex(open_metadata(s.metadata_url), encryption)
    objects = ObjectStore.from_url(
        s.objects_url,
        endpoint=s.s3_endpoint,
        region=s.s3_region,
        access_key_id=s.s3_access_key_id,
        secret_access_key=s.s3_secret_access_key,
        timeout=s.s3_timeout,
        retries=s.s3_retries,
    )
    identity = Identity(port=s.port, http_port=s.http_port)
    pool = LiveMembers(identity.server_id, s.zone)
    catalog = Catalog(meta, s.group)
    cache: SectionCache[bytes] = SectionCache(s.cache_bytes)
    damage = DamageLog()
    zone = build_zone_cache(
        s, meta, objects, self_id=identity.server_id, members=cache_peers(pool, s.zone)
    )
    reader = MessageReader(objects, cache, damage, encryption=encryption, zone=zone.cache)
    clients = Clients()

    consumer_store = ConsumerStore(meta, catalog)
    committer = Committer(meta, catalog, interest=interest_lookup(consumer_store))
    consumers = ConsumerService(
        meta,
        catalog,
        consumer_store,
        committer,
        reader,
        clients.send,
        clients.deliver_many,
        clients.distribute,
        clients.has_interest,
        # Every key of the group: a commit of a stream or of a consumer wakes the pumps here.
        meta.watch(f"{s.group}/"),
    )
    write_buffer = WriteBuffer(
        objects,
        committer,
        cache,
        clients.send_acks,
        group=s.group,
        agent_id=identity.agent_id,
        budget=PutBudget(rate=1 / s.put_interval, burst=PUT_BURST),
        batch_bytes=s.batch_bytes,
        on_commit=consumers.streams_committed,
        on_pressure=lambda paused: clients.pause_all(WRITE_BUFFER_PRESSURE, paused),
        codec_of=StreamCodecs(catalog),
        encryption=encryption,
    )

    streams_api = StreamApi(
        meta,
        catalog,
        committer,
        reader,
        consumers,
        server_name=s.server_name,
        erase_deadline_ns=int(s.erase_deadline * 1e9),
    )
    consumers_api = ConsumerApi(meta, catalog, consumers)
    api = JetStreamApi(streams_api, consumers_api, consumers, clients.send)

    reports = Reports(
        s,
        identity,
        clients,
        catalog,
        write_buffer,
        committer,
        consumer_store,
        objects,
        cache,
        damage,
        zone.stats,
        meta,
        streams_api,
        consumers_api,
        api,
        pool,
    )
    jobs = None
    if s.runs_jobs():
        # Jobs role (no jobs named by default): compaction and the janitor on a schedule, one
        # agent per job at a time by lease.
        from infinistream.pipeline.scheduler import JobScheduler

        jobs = JobScheduler(s, meta, holder=f"{s.server_name}/{identity.server_id}")
    # /healthz asks the stores through a second handle on object storage that does not retry,
    # so that a failing store is reported at once, with its error.
    probe_objects = ObjectStore.from_url(
        s.objects_url,
        endpoint=s.s3_endpoint,
        region=s.s3_region,
        access_key_id=s.s3_access_key_id,
        secret_access_key=s.s3_secret_access_key,
        timeout=min(s.s3_timeout, PROBE_REQUEST_TIMEOUT),
        retries=0,
    )
    monitoring = Monitoring(
        reports,
        probes=[
            object_storage_probe(probe_objects),
            metadata_probe(meta),
            # GDPR erase requests not complete within --erase-deadline (none when 0).
            EraseDeadline(meta, s.group, int(s.erase_deadline * 1e9)),
        ],
        accounts=OneGroup(reports),
        jobs=jobs,
    )
    batches = AtomicBatches(catalog, write_buffer, clients.send_acks)
    router = Router(
        clients,
        catalog,
        write_buffer,
        batches,
        consumers,
        api,
        reports.info,
        SystemRequests(monitoring),
        RoleGate(s.roles),
    )

    def local_member() -> Member:
        return Member(
            id=identity.server_id,
            name=s.server_name,
            address=s.client_advertise or f"{advertised(s.host)}:{identity.port}",
            zone=s.zone,
            roles=s.roles,
            version=__version__,
            monitor_address=(
                f"{advertised(s.monitor_host)}:{identity.http_port}" if identity.http_port else None
            ),
            started_ns=int(identity.started * 1e9),
            cache_address=zone.address(),
        )

    membership = Membership(
        meta,
        s.group,
        pool,
        local_member,
        ttl=s.membership_ttl,
        # Connected clients learn of agents that joined or left, as from a nats-server cluster.
        on_change=lambda: clients.inform(reports.info),
    )
    return Agent(
        settings=s,
        identity=identity,
        meta=meta,
        catalog=catalog,
        write_buffer=write_buffer,
        consumers=consumers,
        clients=clients,
        router=router,
        reports=reports,
        expiry=Expiry(meta, catalog, committer, reader, write_buffer),
        scheduler=Scheduler(meta, catalog, committer, reader, write_buffer),
        jobs=jobs,
        zone=zone,
        authenticator=Authenticator(s.auth),
        tls_context=s.tls.context() if s.tls is not None else None,
        # Further health probes (Monitoring) and routes (the web console's) are passed here.
        monitor=MonitorServer(build_monitor_app(monitoring, routes=[])),
        membership=membership,
    )
