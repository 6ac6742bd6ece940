"""`infinistream bench`: InfiniStream against nats-server, and the object-storage cost model.

Modules, in the order data flows through them:

    protocol   the NATS client protocol as bytes: frames to send, an incremental parser
    control    a small blocking client for the JetStream API and /varz (set-up, not measured)
    systems    start and stop nats-server (lazy fsync, sync always, core only) and agents
    loadgen    the measured side: asyncio connections speaking raw NATS, one job per kind
    workers    a pool of load-generator processes that start jobs together
    workloads  each workload: set up streams, run jobs, turn results into figures
    cost       S3 request prices and the monthly bill
    machine    what the run ran on
    report     the one table (terminal and markdown), the JSON, docs/benchmarks.md
    plot       the latency distributions as a PNG
    runner     the command: options, quick and full profiles, the order of everything
"""
