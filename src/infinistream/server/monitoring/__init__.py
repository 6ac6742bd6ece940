"""Monitoring: nats-server's HTTP endpoints on the `-m` port, the system account's
`$SYS.REQ.SERVER.*` requests, /metrics and the web console.

One module per endpoint family (varz, jsz, connz, subsz, accountz, cluster, health and its
probes, metrics, system); `app.py` serves them over HTTP; `tenant_accounts.py` reads each
account's JetStream from its own tenant; `console/` is the web console and its history.
"""
