"""`infinistream bench`: InfiniStream against nats-server, and the object-storage cost model.

Modules, in the order data flows through them:

    options     the command's options (all `infinistream serve` imports of this package)
    protocol    the NATS client protocol as bytes: frames to send, an incremental parser
    control     a small blocking client for the JetStream API and /varz (set-up, not measured)
    systems     start and stop nats-server (lazy fsync, sync always, core only) and agents
    jobs        what a load-generator worker is asked to do, and what it reports
    connection  one raw NATS connection on asyncio
    loadgen     the measured side: one coroutine per kind of job
    workers     a pool of load-generator processes that start jobs together
    workloads   each workload: set up streams, run jobs, turn results into figures
    cost        S3 request prices and the monthly bill
    machine     what the run ran on
    table       the one table, for the terminal and as markdown
    plot        the latency distributions as a PNG
    report      docs/benchmarks.md and benchmarks.json
    runner      the command: quick and full profiles, the order of everything
"""
