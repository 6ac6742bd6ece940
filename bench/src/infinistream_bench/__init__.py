"""`infinistream bench`: InfiniStream against nats-server, and the object-storage cost model.

Modules, in the order data flows through them:

    cli               the command: `infinistream bench` hands its arguments here
    options           the command's options
    profiles          how long and how hard each workload runs: full, and quick for CI
    protocol          the NATS client protocol as bytes: frames to send, an incremental parser
    control           a small blocking client for the JetStream API and /varz (set-up)
    systems           start and stop nats-server (lazy fsync, sync always, core only), agents
    jobs              what a load-generator worker is asked to do, and what it reports
    connection        one raw NATS connection on asyncio
    loadgen           the raw-protocol side: one coroutine per kind of job
    natspy            the nats-py side: publish, publish_async, pull fetch, as applications do
    natspy_kv         nats-py's Key-Value API: put, get, watch
    natsjs            the nats.js side: node running natsjs_load.mjs
    workers           a pool of load-generator processes that start jobs together
    workloads         the raw-protocol workloads: set up streams, run jobs, make figures
    client_workloads  the real-client workloads (nats-py, nats.js)
    kv_workloads      the Key-Value workloads (nats-py)
    cost              S3 request prices, the monthly bill, a PUT budget's ceiling
    cost_workloads    object requests by PUT budget and rate, and by streams written
    machine           what the run ran on
    table             the comparison table, for the terminal and as markdown
    cost_tables       the cost tables
    plot              the latency distributions as a PNG
    report            docs/benchmarks/results.md, benchmarks.json, the terminal summary
    runner            the command: the order of everything
"""
