"""-V over TLS: protocol lines are traced in plain text, as nats-server traces them (the
tracing connection reads what TLS has decrypted)."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import nats
import pytest
from certs import Certs, make_certs

from support.agentproc import wait_for
from support.servers import KINDS, running_server
from support.written import written


@pytest.mark.parametrize("kind", KINDS)
async def test_trace_over_tls(kind: str, tmp_path: Path) -> None:
    certs: Certs = make_certs(tmp_path / "certs")
    flags = ("-V", "--tlscert", str(certs.server.cert), "--tlskey", str(certs.server.key))
    with running_server(kind, tmp_path / "store", *flags) as srv:
        context = ssl.create_default_context(cafile=str(certs.ca))
        nc = await nats.connect(f"tls://127.0.0.1:{srv.port}", tls=context, name="tlstrace")
        await nc.publish("over.tls", b"secret payload")
        await written(nc)  # the PUB reached the server (a flush would not prove it)
        await nc.close()
        # The payload is traced on a line after the PUB's: wait for the later one.
        wait_for(lambda: "secret payload" in srv.log())
        text = srv.log()
    client = r'127\.0\.0\.1:\d+ - cid:\d+ - "v[\d.]+:python3:tlstrace"'
    assert re.search(client + r" - <<- \[PUB over\.tls  14\]", text), text
    assert re.search(client + r' - <<- MSG_PAYLOAD: \["secret payload"\]', text), text
