"""No answer to a hostile request carries a Python exception or a file path.

The requests of the hostile-client cases, sent over one connection, and everything the server
answers collected and searched: Python exception names (`ValueError`, `RecursionError`, ...),
tracebacks, source files and paths. Runs against an agent and nats-server.
"""

from __future__ import annotations

import json
import re

import nats
from test_hostile_headers import MALFORMED, headers

from support.rawnats import CONNECT_HEADERS, RawClient, hpub, pub
from support.servers import Server

SAFETY_NET = 30.0
FILTER = "r." + ".".join([">"] * 40)
PYTHONISH = re.compile(
    rb"Traceback|[A-Z][a-z]+(Error|Exception)\b|\.py\b|File \"|/tmp/|/work/|/home/|/usr/|\[Errno"
)


def deep(fields: bytes, depth: int) -> bytes:
    return b"{" + fields + b',"x":' + b"[" * depth + b"]" * depth + b"}"


async def test_no_answer_names_python_or_a_path(server: Server) -> None:
    nc = await nats.connect(server.url)
    js = nc.jetstream(timeout=SAFETY_NET)
    await js.add_stream(
        name="H",
        subjects=["h.>"],
        allow_msg_ttl=True,
        allow_rollup_hdrs=True,
        allow_msg_schedules=True,
    )
    await js.add_consumer("H", durable_name="C")
    await nc.close()
    raw = await RawClient.open(server.port)
    raw.send(CONNECT_HEADERS + b"SUB _R.> 1\r\n")
    requests = [
        hpub("h.a", headers(lines), b"x", f"_R.h{n}") for n, (lines, _) in enumerate(MALFORMED)
    ]
    requests += [
        pub("$JS.API.STREAM.INFO.H", deep(b'"name":"H"', 20_000), "_R.info"),
        pub("$JS.API.CONSUMER.CREATE.H", deep(b'"name":"D"', 20_000), "_R.create"),
        pub("$JS.API.CONSUMER.MSG.NEXT.H.C", deep(b'"batch":1', 20_000), "_R.next"),
        pub("$JS.API.STREAM.MSG.GET.H", json.dumps({"seq": int("9" * 400)}).encode(), "_R.get"),
        pub(
            "$JS.API.STREAM.INFO.H",
            json.dumps({"subjects_filter": FILTER}).encode(),
            "_R.filter",
        ),
        # Longer than uint64, shorter than the control line.
        pub(f"$JS.ACK.H.C.1.{'9' * 1000}.1.0.0", b"", "_R.ack"),
    ]
    answers = b""
    for request in requests:
        raw.send(request)
        answers += await raw.ping(timeout=SAFETY_NET)
    answers += await raw.read_for(3.0)  # API answers may follow the PONG
    # Every request with an answer got one (the ack to nothing delivered is not answered).
    for reply in [f"_R.h{n}" for n in range(len(MALFORMED))] + [
        "_R.info",
        "_R.create",
        "_R.next",
        "_R.get",
        "_R.filter",
    ]:
        assert f" {reply} ".encode() in answers, reply
    assert not PYTHONISH.search(answers), PYTHONISH.search(answers)
    assert await raw.ping(timeout=SAFETY_NET) == b""
    await raw.close()
