"""Building an agent: every part constructed once, here, with what it depends on passed in.

`build_agent` takes the steps in the order of their dependencies: the stores (metadata, object
storage, encryption); reading (the section cache, the zone cache, the message reader); the
tenants, one per account (built when the account is first served, by `_build_tenant`: the
catalog of its streams, consumers, the write buffer, the API handlers, all under the account's
group and delivering to the account's subscribers); the evictions of erased bytes; the jobs
role; monitoring; the router every connection talks to; the pool's membership.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infinistream import __version__
from infinistream.consumer.pull import AdvisorySource
from infinistream.consumer.retention import interest_lookup
from infinistream.consumer.service import ConsumerService
from infinistream.consumer.store import ConsumerStore
from infinistream.handlers.consumers import ConsumerApi
from infinistream.handlers.disabled import JetStreamDisabled
from infinistream.handlers.router import JetStreamApi
from infinistream.handlers.streams import StreamApi
from infinistream.jetstream.accounts import GLOBAL_ACCOUNT, AccountPolicy, account_group
from infinistream.metadata import MetadataStore, open_metadata
from infinistream.metadata.kv import ChangeWatch
from infinistream.pipeline.lease import LeaseHolders
from infinistream.pipeline.options import StoreOptions
from infinistream.pool import LiveMembers, Member
from infinistream.security.auth import Authenticator
from infinistream.server.agent import Agent
from infinistream.server.clients import Clients, Subscribers
from infinistream.server.connection import ClientConnection
from infinistream.server.erase_evictions import EraseEvictions
from infinistream.server.fdlimit import connection_cap, raise_open_file_limit
from infinistream.server.handover import HandoverDelivery, ReplyHandover
from infinistream.server.info import Greeting, Identity, advertised
from infinistream.server.membership import Membership
from infinistream.server.monitoring.accountz import Accountz, Accstatz
from infinistream.server.monitoring.app import MonitorServer, build_monitor_app
from infinistream.server.monitoring.cluster import Cluster
from infinistream.server.monitoring.connz import Connz
from infinistream.server.monitoring.console.history import History
from infinistream.server.monitoring.console.routes import console_routes
from infinistream.server.monitoring.console.sampling import sampler
from infinistream.server.monitoring.endpoints import Endpoints
from infinistream.server.monitoring.figures import AgentFigures
from infinistream.server.monitoring.health import HealthProbe, Healthz, Probes
from infinistream.server.monitoring.jsz import Jsz
from infinistream.server.monitoring.metrics import Metrics
from infinistream.server.monitoring.probes import metadata_probe, object_storage_probe
from infinistream.server.monitoring.process import CpuSampler
from infinistream.server.monitoring.statsz import Statsz
from infinistream.server.monitoring.subsz import Subsz
from infinistream.server.monitoring.system import SystemRequests
from infinistream.server.monitoring.tenant_accounts import TenantAccounts
from infinistream.server.monitoring.usage import LastUsage
from infinistream.server.monitoring.varz import Varz
from infinistream.server.origin_leases import PoolLeases
from infinistream.server.roles import RoleGate
from infinistream.server.routing import Router
from infinistream.server.stalls import StallWatch
from infinistream.server.tenants import (
    ImportedOrigins,
    JetStreamAccount,
    Tenant,
    Tenants,
    jetstream_accounts,
)
from infinistream.server.tracing import LoggedConnection
from infinistream.server.zone import ZoneCacheChannel, build_zone_cache, cache_peers
from infinistream.settings import PUT_BURST, Settings
from infinistream.storage import Encryption, ObjectStore, SectionCache
from infinistream.stream.batches import AtomicBatches
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.compression import StreamCodecs
from infinistream.stream.counters import CounterIncrements
from infinistream.stream.damage import DamageLog
from infinistream.stream.due import DueWakeups
from infinistream.stream.erase import EraseDeadline
from infinistream.stream.expiry import Expiry
from infinistream.stream.fastbatches import FastBatches
from infinistream.stream.index_cache import IndexCache
from infinistream.stream.mirror import MirrorCopier
from infinistream.stream.mirror_runner import MirrorRunner
from infinistream.stream.put_budget import PutBudget
from infinistream.stream.quota import StorageQuota
from infinistream.stream.reader import MessageReader
from infinistream.stream.recorded import recover as recover_commits
from infinistream.stream.republisher import Republisher
from infinistream.stream.scheduler import Scheduler
from infinistream.stream.sealed_index import SealedIndex
from infinistream.stream.sources import SourceCopier
from infinistream.stream.upstream import UpstreamFeeds
from infinistream.stream.write_buffer import WriteBuffer

if TYPE_CHECKING:
    from infinistream.pipeline.scheduler import JobScheduler

WRITE_BUFFER_PRESSURE = "write-buffer"
# Seconds a health probe's object storage request may take (within health.PROBE_TIMEOUT).
PROBE_REQUEST_TIMEOUT = 2.0


def build_agent(settings: Settings) -> Agent:
    """An agent on `settings`, its stores open; `Agent.start` makes it serve."""
    s = settings
    stores = _open_stores(s)
    identity = Identity(port=s.port, http_port=s.http_port)
    pool = LiveMembers(identity.server_id, s.zone)
    reading = _build_reading(s, stores, identity, pool)
    clients = Clients(connection_cap(s.max_connections, raise_open_file_limit()))
    clients.link({account.name: account.imports for account in s.auth.accounts})
    leases = LeaseHolders()
    tenants = _build_tenants(s, stores, reading, clients, identity, leases)
    jobs = _build_jobs(s, stores.meta, identity, tenants, leases)
    monitoring = _build_monitoring(s, stores, reading, identity, pool, clients, tenants, jobs)
    greeting = Greeting(s, identity, pool)
    system_account = s.auth.system_account

    def disabled(account: str) -> JetStreamDisabled:
        return JetStreamDisabled(clients.space(account).send, system=account == system_account)

    router = Router(
        clients,
        tenants,
        disabled,
        greeting.info,
        monitoring.system,
        RoleGate(s.roles),
        domain=s.jetstream_domain,
    )

    async def recover() -> None:
        await recover_commits(stores.meta, stores.objects)

    return Agent(
        settings=s,
        recover=recover,
        identity=identity,
        meta=stores.meta,
        tenants=tenants,
        clients=clients,
        router=router,
        jobs=jobs,
        zone=reading.zone,
        authenticator=Authenticator(s.auth),
        tls_context=s.tls.context() if s.tls is not None else None,
        connection_class=LoggedConnection if s.log.debug or s.log.trace else ClientConnection,
        monitor=monitoring.server,
        membership=_build_membership(
            s, stores.meta, identity, pool, reading.zone, clients, greeting
        ),
        erase_evictions=_build_erase_evictions(s, stores.meta, tenants, reading),
        history=monitoring.history,
        stalls=StallWatch(),
        greeting=greeting,
        leases=leases,
        handover=ReplyHandover(
            stores.meta,
            s.group,
            lambda account: account_group(s.group, account),
            identity.server_id,
        ),
        handover_delivery=HandoverDelivery(
            stores.meta,
            s.group,
            lambda: [
                account_group(s.group, a.name) for a in tenants.accounts.values() if a.jetstream
            ],
            clients,
        ),
    )


@dataclass(frozen=True, eq=False)
class _Stores:
    # Index entries (subjects, record lengths) sealed in metadata, and refused clearly when
    # encryption is off but they are sealed.
    meta: SealedIndex
    objects: ObjectStore
    encryption: Encryption | None


def _open_stores(s: Settings) -> _Stores:
    if not s.objects or not s.metadata:
        os.makedirs(s.store_dir, exist_ok=True)
    encryption = s.encryption()
    meta = SealedIndex(open_metadata(s.metadata_url), encryption)
    objects = _object_store(s, timeout=s.s3_timeout, retries=s.s3_retries)
    return _Stores(meta, objects, encryption)


def _object_store(s: Settings, *, timeout: float, retries: int) -> ObjectStore:
    # The store as the pipeline's jobs open it, with the agent's bounds on one S3 request.
    return StoreOptions.from_settings(s).open_objects(
        timeout=timeout, retries=retries, pack_index=s.pack_index
    )


@dataclass(frozen=True, eq=False)
class _Reading:
    """What reads messages back, shared by every account."""

    cache: SectionCache[bytes]
    damage: DamageLog
    zone: ZoneCacheChannel
    reader: MessageReader
    # One budget for what every account's views read of stream indexes.
    index_cache: IndexCache


def _build_reading(s: Settings, stores: _Stores, identity: Identity, pool: LiveMembers) -> _Reading:
    cache: SectionCache[bytes] = SectionCache(s.cache_bytes)
    damage = DamageLog()
    zone = build_zone_cache(
        s,
        stores.meta,
        stores.objects,
        self_id=identity.server_id,
        members=cache_peers(pool, s.zone),
    )
    reader = MessageReader(
        stores.objects, cache, damage, encryption=stores.encryption, zone=zone.cache
    )
    return _Reading(cache, damage, zone, reader, IndexCache(s.index_cache))


def _build_tenants(
    s: Settings,
    stores: _Stores,
    reading: _Reading,
    clients: Clients,
    identity: Identity,
    leases: LeaseHolders,
) -> Tenants:
    # One budget of PUTs for the agent, whichever account's batch spends it.
    budget = PutBudget(rate=1 / s.put_interval, burst=PUT_BURST)

    built: list[Tenants] = []

    def build_tenant(account: JetStreamAccount) -> Tenant:
        # Mirrors and sources of other accounts reach the others' tenants once all are built.
        others = ImportedOrigins(account.name, lambda: built[0])
        return _build_tenant(s, account, stores, reading, clients, budget, identity, leases, others)

    accounts = jetstream_accounts(s.auth)
    built.append(Tenants(accounts, build_tenant, build_tenant(accounts[GLOBAL_ACCOUNT])))
    return built[0]


def _build_erase_evictions(
    s: Settings, meta: MetadataStore, tenants: Tenants, reading: _Reading
) -> EraseEvictions:
    # Erased bytes leave this agent's caches, whichever agent took the erase: the groups of
    # every account with JetStream (the zone cache holds blocks of accounts not served here),
    # as the config is now (a reload changes them). The watch on the base group's prefix
    # covers every account's group (`base@account`).
    return EraseEvictions(
        meta,
        lambda: [account_group(s.group, a.name) for a in tenants.accounts.values() if a.jetstream],
        [reading.cache, reading.zone.cache.blocks],
        meta.watch(s.group),
    )


def _build_jobs(
    s: Settings, meta: MetadataStore, identity: Identity, tenants: Tenants, leases: LeaseHolders
) -> JobScheduler | None:
    if not s.runs_jobs():
        return None
    # Jobs role (no jobs named by default): compaction and the janitor on a schedule, one
    # agent per job at a time by lease.
    from infinistream.pipeline.scheduler import JobScheduler

    return JobScheduler(
        s,
        meta,
        holder=f"{s.server_name}/{identity.server_id}",
        # Every account with JetStream has a group of its own to compact and clean.
        accounts=tuple(sorted(a.name for a in tenants.accounts.values() if a.jetstream)),
        holders=leases,
    )


@dataclass(frozen=True, eq=False)
class _Monitoring:
    # The HTTP endpoints, /metrics and the web console on the monitoring port.
    server: MonitorServer
    # The system account's $SYS.REQ.SERVER.* requests, which the router hands over.
    system: SystemRequests
    # The console's plots: figures from the endpoints, every few seconds.
    history: History


def _build_monitoring(
    s: Settings,
    stores: _Stores,
    reading: _Reading,
    identity: Identity,
    pool: LiveMembers,
    clients: Clients,
    tenants: Tenants,
    jobs: JobScheduler | None,
) -> _Monitoring:
    default = tenants.default
    figures = AgentFigures(
        default.write_buffer,
        default.committer,
        default.consumer_store,
        stores.objects,
        reading.cache,
        reading.damage,
        reading.zone.stats,
        reading.index_cache,
    )
    # Each account's JetStream, read from its own tenant.
    accounts = TenantAccounts(tenants)
    usage = LastUsage(accounts)
    cpu = CpuSampler()
    requests: Counter[str] = Counter()
    endpoints = Endpoints(
        varz=Varz(s, identity, clients, usage, figures, pool, cpu, requests),
        jsz=Jsz(identity, s.server_name, s.store_dir, accounts, s.jetstream_domain),
        connz=Connz(identity, s, clients),
        subsz=Subsz(identity, s, clients),
        accountz=Accountz(identity, s, clients),
        accstatz=Accstatz(identity, s, clients),
        cluster=Cluster(identity, s.server_name),
        healthz=Healthz(accounts, Probes(_health_probes(s, stores))),
    )
    metrics = Metrics(
        endpoints.varz, endpoints.connz, endpoints.jsz, figures, stores.meta, s.group, jobs
    )
    history = History(sampler(endpoints.varz, endpoints.jsz))
    app = build_monitor_app(
        endpoints, metrics, requests, routes=console_routes(history, s, stores.meta)
    )
    system = SystemRequests(
        s,
        identity,
        endpoints,
        Statsz(identity, s.store_dir, clients, usage, cpu, s.jetstream_domain),
    )
    return _Monitoring(MonitorServer(app), system, history)


def _health_probes(s: Settings, stores: _Stores) -> list[HealthProbe]:
    # /healthz asks the stores through a second handle on object storage that does not retry,
    # so that a failing store is reported at once, with its error.
    probe_objects = _object_store(s, timeout=min(s.s3_timeout, PROBE_REQUEST_TIMEOUT), retries=0)
    return [
        object_storage_probe(probe_objects),
        metadata_probe(stores.meta),
        # GDPR erase requests not complete within --erase-deadline (none when 0).
        EraseDeadline(stores.meta, s.group, int(s.erase_deadline * 1e9)),
    ]


def _build_membership(
    s: Settings,
    meta: MetadataStore,
    identity: Identity,
    pool: LiveMembers,
    zone: ZoneCacheChannel,
    clients: Clients,
    greeting: Greeting,
) -> Membership:
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

    return Membership(
        meta,
        s.group,
        pool,
        local_member,
        ttl=s.membership_ttl,
        # Connected clients learn of agents that joined or left, as from a nats-server cluster.
        on_change=lambda: clients.inform(greeting.info),
    )


def _build_republisher(
    catalog: Catalog, reader: MessageReader, space: Subscribers, changes: ChangeWatch
) -> Republisher:
    """Republish to this agent's subscribers of the account, as a publish is delivered."""

    def deliver(subject: str, headers: bytes, payload: bytes) -> None:
        space.distribute(subject, [(subject, None, headers, payload)])

    return Republisher(catalog, reader, deliver, space.has_interest, changes)


def _stream_api(
    s: Settings,
    meta: MetadataStore,
    catalog: Catalog,
    committer: Committer,
    reader: MessageReader,
    consumers: ConsumerService,
    policy: AccountPolicy,
    origins: MirrorRunner,
    others: ImportedOrigins,
) -> StreamApi:
    return StreamApi(
        meta,
        catalog,
        committer,
        reader,
        consumers,
        server_name=s.server_name,
        domain=s.jetstream_domain,
        policy=policy,
        erase_deadline_ns=int(s.erase_deadline * 1e9),
        origins=origins,
        upstreams=frozenset(s.upstreams),
        imported=others.account_of,
    )


def _build_origins(
    s: Settings,
    catalog: Catalog,
    committer: Committer,
    reader: MessageReader,
    write_buffer: WriteBuffer,
    leases: PoolLeases,
    counters: CounterIncrements,
    others: ImportedOrigins,
) -> MirrorRunner:
    """Mirrors and sources: copied by the agent holding each stream's lease, from this group
    or from the upstreams configured."""
    feeds = UpstreamFeeds(s.upstreams) if s.upstreams else None
    origins = MirrorRunner(
        catalog,
        MirrorCopier(catalog, committer, reader, write_buffer, feeds, others),
        SourceCopier(catalog, reader, write_buffer, feeds, counters, others),
        leases,
    )
    if feeds is not None:
        feeds.wake = origins.wake
    return origins


def _build_tenant(
    s: Settings,
    account: JetStreamAccount,
    stores: _Stores,
    reading: _Reading,
    clients: Clients,
    budget: PutBudget,
    identity: Identity,
    leases: LeaseHolders,
    others: ImportedOrigins,
) -> Tenant:
    """One account's JetStream: every part bound to its group and its subscribers."""
    meta, objects, reader = stores.meta, stores.objects, reading.reader
    group = account_group(s.group, account.name)
    # Shared by everything that holds the account to its limits: a reload changes them here.
    policy = AccountPolicy(account.limits)
    space = clients.space(account.name)
    catalog = Catalog(meta, group, reading.index_cache, reader.segment)
    consumer_store = ConsumerStore(meta, catalog)
    committer = Committer(meta, catalog, interest=interest_lookup(consumer_store))
    consumers = ConsumerService(
        meta,
        catalog,
        consumer_store,
        committer,
        reader,
        space.send,
        space.deliver_many,
        space.distribute,
        space.has_interest,
        # Every key of the account's group: a commit of a stream or of a consumer wakes the
        # pumps here.
        meta.watch(f"{group}/"),
        advisory=AdvisorySource(account.name, s.jetstream_domain),
        drained=space.drained,
    )
    republisher = _build_republisher(catalog, reader, space, meta.watch(f"{group}/"))
    # Expiry and schedules run when due; commits here and by other agents re-arm them.
    due_wakeups = DueWakeups(meta.watch(f"{group}/"))

    def committed(streams: list[str]) -> None:
        consumers.streams_committed(streams)
        due_wakeups.committed(streams)
        republisher.committed(streams)
        origins.committed(streams)

    pressure = f"{WRITE_BUFFER_PRESSURE}:{account.name}"
    # Answers to fast batch messages are their batch's to turn into flow acks.
    fast_batches = FastBatches(catalog, space.send_acks, s.jetstream_domain)
    write_buffer = WriteBuffer(
        objects,
        committer,
        reading.cache,
        fast_batches.acks,
        group=group,
        agent_id=identity.agent_id,
        budget=budget,
        batch_bytes=s.batch_bytes,
        on_commit=committed,
        on_pressure=lambda paused: clients.pause_all(pressure, paused),
        codec_of=StreamCodecs(catalog),
        encryption=stores.encryption,
        directories=s.index_format >= 2,
        domain=s.jetstream_domain,
    )
    fast_batches.bind(write_buffer)
    counters = CounterIncrements(catalog, reader, write_buffer, space.send_acks)
    write_buffer.on_counter = counters.settled
    origin_leases = PoolLeases(meta, group, identity.server_id, leases)
    origins = _build_origins(
        s, catalog, committer, reader, write_buffer, origin_leases, counters, others
    )
    streams_api = _stream_api(
        s, meta, catalog, committer, reader, consumers, policy, origins, others
    )
    consumers_api = ConsumerApi(meta, catalog, consumers, policy=policy)
    return Tenant(
        account=account.name,
        group=group,
        policy=policy,
        space=space,
        consumers_api=consumers_api,
        catalog=catalog,
        committer=committer,
        consumer_store=consumer_store,
        consumers=consumers,
        write_buffer=write_buffer,
        streams=streams_api,
        api=JetStreamApi(streams_api, consumers_api, consumers, space.send),
        batches=AtomicBatches(catalog, write_buffer, space.send_acks),
        fast_batches=fast_batches,
        due_wakeups=due_wakeups,
        expiry=Expiry(meta, catalog, committer, reader, write_buffer, due_wakeups),
        scheduler=Scheduler(meta, catalog, committer, reader, write_buffer, due_wakeups),
        quota=StorageQuota(policy, catalog, write_buffer),
        republisher=republisher,
        counters=counters,
        origins=origins,
    )
