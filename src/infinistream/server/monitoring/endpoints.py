"""nats-server's monitoring endpoints, each built once (in wiring) with what it reads.

The same endpoints answer over HTTP (app.py) and to the system account's `$SYS.REQ.SERVER.*`
requests (system.py); /metrics (metrics.py) and the web console's history read some of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from infinistream.server.monitoring.accountz import Accountz, Accstatz
from infinistream.server.monitoring.cluster import Cluster
from infinistream.server.monitoring.connz import Connz
from infinistream.server.monitoring.health import Healthz
from infinistream.server.monitoring.jsz import Jsz
from infinistream.server.monitoring.subsz import Subsz
from infinistream.server.monitoring.varz import Varz


@dataclass(frozen=True, eq=False)
class Endpoints:
    varz: Varz
    jsz: Jsz
    connz: Connz
    subsz: Subsz
    accountz: Accountz
    accstatz: Accstatz
    # /routez, /gatewayz, /leafz.
    cluster: Cluster
    healthz: Healthz
