"""Building an agent: every part constructed once, here, with what it depends on passed in.

The order follows the dependencies: the stores and the reader of objects; the clients; then
per account (built when the account is first served, by `build_tenant`) the catalog of its
streams, consumers (whose interest the committer asks about on interest streams), the write
buffer (which tells consumers of commits and pauses clients when behind) and the API handlers,
all under the account's group and delivering to the account's subscribers; the router every
connection talks to.
"""

from __future__ import annotations

import os

from infinistream import __version__
from infinistream.consumer.retention import interest_lookup
from infinistream.consumer.service import ConsumerService
from infinistream.consumer.store import ConsumerStore
from infinistream.handlers.consumers import ConsumerApi
from infinistream.handlers.disabled import JetStreamDisabled
from infinistream.handlers.router import JetStreamApi
from infinistream.handlers.streams import StreamApi
from infinistream.jetstream.accounts import GLOBAL_ACCOUNT, AccountPolicy, account_group
from infinistream.metadata import MetadataStore, open_metadata
from infinistream.pool import LiveMembers, Member
from infinistream.security.auth import Authenticator
from infinistream.server.account_usage import TenantAccounts
from infinistream.server.agent import Agent
from infinistream.server.clients import Clients
from infinistream.server.connection import ClientConnection
from infinistream.server.console import console_routes
from infinistream.server.console.sampling import sampler
from infinistream.server.erase_evictions import EraseEvictions
from infinistream.server.history import History
from infinistream.server.membership import Membership
from infinistream.server.monitor import Monitoring, MonitorServer, build_monitor_app
from infinistream.server.monitoring.probes import metadata_probe, object_storage_probe
from infinistream.server.monitoring.system import SystemRequests
from infinistream.server.reports import Identity, Reports, advertised
from infinistream.server.roles import RoleGate
from infinistream.server.routing import Router
from infinistream.server.tenants import JetStreamAccount, Tenant, Tenants, jetstream_accounts
from infinistream.server.tracing import LoggedConnection
from infinistream.server.zone import build_zone_cache, cache_peers
from infinistream.settings import PUT_BURST, Settings
from infinistream.storage import Encryption, ObjectStore, SectionCache
from infinistream.stream.batches import AtomicBatches
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.compression import StreamCodecs
from infinistream.stream.damage import DamageLog
from infinistream.stream.erase import EraseDeadline
from infinistream.stream.expiry import Expiry
from infinistream.stream.index_cache import IndexCache
from infinistream.stream.put_budget import PutBudget
from infinistream.stream.quota import StorageQuota
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
    cache: SectionCache[bytes] = SectionCache(s.cache_bytes)
    # One budget for what every account's views read of stream indexes.
    index_cache = IndexCache(s.index_cache)
    damage = DamageLog()
    zone = build_zone_cache(
        s, meta, objects, self_id=identity.server_id, members=cache_peers(pool, s.zone)
    )
    reader = MessageReader(objects, cache, damage, encryption=encryption, zone=zone.cache)
    clients = Clients()
    # One budget of PUTs for the agent, whichever account's batch spends it.
    budget = PutBudget(rate=1 / s.put_interval, burst=PUT_BURST)

    def build_tenant(account: JetStreamAccount) -> Tenant:
        return _build_tenant(
            s,
            account,
            meta,
            objects,
            cache,
            reader,
            clients,
            budget,
            identity,
            encryption,
            index_cache,
        )

    accounts = jetstream_accounts(s.auth)
    default = build_tenant(accounts[GLOBAL_ACCOUNT])
    tenants = Tenants(accounts, build_tenant, default)
    # Erased bytes leave this agent's caches, whichever agent took the erase: the groups of
    # every account with JetStream (the zone cache holds blocks of accounts not served here),
    # as the config is now (a reload changes them). The watch on the base group's prefix
    # covers every account's group (`base@account`).
    erase_evictions = EraseEvictions(
        meta,
        lambda: [account_group(s.group, a.name) for a in tenants.accounts.values() if a.jetstream],
        [cache, zone.cache.blocks],
        meta.watch(s.group),
    )
    reports = Reports(
        s,
        identity,
        clients,
        default.catalog,
        default.write_buffer,
        default.committer,
        default.consumer_store,
        objects,
        cache,
        damage,
        zone.stats,
        meta,
        default.streams,
        default.consumers_api,
        default.api,
        pool,
    )

    system_account = s.auth.system_account

    def disabled(account: str) -> JetStreamDisabled:
        return JetStreamDisabled(clients.space(account).send, system=account == system_account)

    jobs = None
    if s.runs_jobs():
        # Jobs role (no jobs named by default): compaction and the janitor on a schedule, one
        # agent per job at a time by lease.
        from infinistream.pipeline.scheduler import JobScheduler

        jobs = JobScheduler(
            s,
            meta,
            holder=f"{s.server_name}/{identity.server_id}",
            # Every account with JetStream has a group of its own to compact and clean.
            accounts=tuple(sorted(a.name for a in accounts.values() if a.jetstream)),
        )
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
        # Each account's JetStream, read from its own tenant.
        accounts=TenantAccounts(tenants),
        jobs=jobs,
    )
    # The web console's plots: figures from the monitoring endpoints, every few seconds.
    history = History(sampler(monitoring))
    router = Router(
        clients,
        tenants,
        disabled,
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
        tenants=tenants,
        clients=clients,
        router=router,
        reports=reports,
        jobs=jobs,
        zone=zone,
        authenticator=Authenticator(s.auth),
        tls_context=s.tls.context() if s.tls is not None else None,
        connection_class=LoggedConnection if s.log.debug or s.log.trace else ClientConnection,
        # Further health probes (Monitoring) and routes (the web console's) are passed here.
        monitor=MonitorServer(
            build_monitor_app(monitoring, routes=console_routes(monitoring, history))
        ),
        membership=membership,
        erase_evictions=erase_evictions,
        history=history,
    )


def _build_tenant(
    s: Settings,
    account: JetStreamAccount,
    meta: MetadataStore,
    objects: ObjectStore,
    cache: SectionCache[bytes],
    reader: MessageReader,
    clients: Clients,
    budget: PutBudget,
    identity: Identity,
    encryption: Encryption | None,
    index_cache: IndexCache,
) -> Tenant:
    """One account's JetStream: every part bound to its group and its subscribers."""
    group = account_group(s.group, account.name)
    # Shared by everything that holds the account to its limits: a reload changes them here.
    policy = AccountPolicy(account.limits)
    space = clients.space(account.name)
    catalog = Catalog(meta, group, index_cache, reader.segment)
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
    )
    pressure = f"{WRITE_BUFFER_PRESSURE}:{account.name}"
    write_buffer = WriteBuffer(
        objects,
        committer,
        cache,
        space.send_acks,
        group=group,
        agent_id=identity.agent_id,
        budget=budget,
        batch_bytes=s.batch_bytes,
        on_commit=consumers.streams_committed,
        on_pressure=lambda paused: clients.pause_all(pressure, paused),
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
        policy=policy,
        erase_deadline_ns=int(s.erase_deadline * 1e9),
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
        expiry=Expiry(meta, catalog, committer, reader, write_buffer),
        scheduler=Scheduler(meta, catalog, committer, reader, write_buffer),
        quota=StorageQuota(policy, catalog, write_buffer),
    )
