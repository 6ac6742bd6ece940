"""Monitoring: nats-server's HTTP endpoints on the `-m` port, the system account's
`$SYS.REQ.SERVER.*` requests, /metrics and the web console.

One module per endpoint family (varz, jsz, connz, subsz, accountz, cluster, health and its
probes, statsz, metrics), each endpoint a class built in wiring with only what it reads;
`endpoints.py` is the set of them, which `app.py` serves over HTTP and `system.py` to the
system account. `tenant_accounts.py` reads each account's JetStream from its own tenant,
`figures.py` names the parts whose own counters are reported; `console/` is the web console
and its history.
"""
