"""Account exports and imports as typed specs, the permission checks nats-server makes of them
at start, and the subjects an import maps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infinistream.natsconf import loads
from infinistream.security.config import parse_auth
from infinistream.security.exports import Export, Import, service_route, stream_route
from infinistream_bench.systems import nats_server_binary

LINKED = """
accounts {
  A: {
    jetstream: enabled
    exports: [
      {service: "$JS.API.CONSUMER.>", accounts: [B], response_type: stream}
      {stream: "deliver.>", accounts: [B]}
      {service: "svc.*.req", account_token_position: 2}
      {stream: "public.>"}
    ]
  }
  B: {
    jetstream: enabled
    imports: [
      {service: {account: A, subject: "$JS.API.CONSUMER.>"}, to: "JS.A.API.CONSUMER.>"}
      {stream: {account: A, subject: "deliver.>"}}
      {stream: {account: A, subject: "public.>"}, prefix: "from.a"}
      {service: {account: A, subject: "svc.B.req"}}
    ]
  }
}
"""


def test_exports_and_imports_are_kept_as_typed_specs() -> None:
    auth = parse_auth(loads(LINKED))
    a, b = auth.account("A"), auth.account("B")
    assert a is not None and b is not None
    assert a.exports == (
        Export("$JS.API.CONSUMER.>", True, ("B",), "streamed"),
        Export("deliver.>", False, ("B",)),
        Export("svc.*.req", True, None, "singleton", 2),
        Export("public.>", False),
    )
    assert b.imports == (
        Import("A", "$JS.API.CONSUMER.>", "JS.A.API.CONSUMER.>", service=True),
        Import("A", "deliver.>", "deliver.>", service=False),
        Import("A", "public.>", "from.a.public.>", service=False),
        Import("A", "svc.B.req", "svc.B.req", service=True),
    )


def test_an_import_maps_its_subjects() -> None:
    auth = parse_auth(loads(LINKED))
    b = auth.account("B")
    assert b is not None
    assert service_route(b.imports, "JS.A.API.CONSUMER.CREATE.S") == (
        "A",
        "$JS.API.CONSUMER.CREATE.S",
    )
    assert service_route(b.imports, "svc.B.req") == ("A", "svc.B.req")
    assert service_route(b.imports, "JS.A.API.STREAM.INFO.S") is None
    assert stream_route(b.imports, "A", "public.x.y") == "from.a.public.x.y"
    assert stream_route(b.imports, "A", "deliver.M.1") == "deliver.M.1"
    assert stream_route(b.imports, "C", "deliver.M.1") is None
    assert stream_route(b.imports, "A", "private.x") is None


# Each refused by nats-server at start; the agent refuses it with the same words.
REFUSED = {
    "not-exported": """accounts {
  A: { exports: [{service: "$JS.API.CONSUMER.>"}] }
  B: { imports: [{service: {account: A, subject: "$JS.API.STREAM.>"}, to: "JS.A.>"}] }
}""",
    "not-allowed": """accounts {
  A: { exports: [{stream: "orders.>", accounts: [C]}] }
  B: { imports: [{stream: {account: A, subject: "orders.>"}}] }
  C: {}
}""",
    "wider-than-export": """accounts {
  A: { exports: [{stream: "orders.new"}] }
  B: { imports: [{stream: {account: A, subject: "orders.>"}}] }
}""",
    "token-position": """accounts {
  A: { exports: [{service: "svc.*.req", account_token_position: 2}] }
  B: { imports: [{service: {account: A, subject: "svc.C.req"}}] }
}""",
    "no-such-account": """accounts {
  B: { imports: [{service: {account: Q, subject: "x"}}] }
}""",
    "bad-response-type": """accounts {
  A: { exports: [{service: "x", response_type: many}] }
}""",
    "prefix-and-to": """accounts {
  A: { exports: [{stream: "x.>"}] }
  B: { imports: [{stream: {account: A, subject: "x.>"}, prefix: p, to: "y.>"}] }
}""",
    "response-on-stream": """accounts {
  A: { exports: [{stream: "x", response_type: single}] }
}""",
    "exports-not-array": """accounts {
  A: { exports: {service: "x"} }
}""",
}


# nats-server checks an import's keys in the order it walks a Go map, which is random: it
# refuses `prefix` with `to` only when it reads `to` after both `stream` and `prefix` (one
# walk in three). Its verdict is taken from the first of these runs that refuses; the chance
# that thirty walks all miss it is below one in 100,000.
MAP_ORDER_TRIES = {"prefix-and-to": 30}


def _first_error(command: list[str], conf: Path, tries: int = 1) -> tuple[str, str]:
    """The line and the message of the first error: "<program>: <file>:<line>:<col>:
    <message>" (nats-server counts the column of the file's first key from 0)."""
    for _ in range(tries):
        done = subprocess.run([*command, "-t", "-c", str(conf)], capture_output=True, text=True)
        if done.returncode != 0:
            break
    assert done.returncode != 0, done.stderr
    first = done.stderr.strip().splitlines()[0].split(": ", 1)[1]
    where, message = first.split(": ", 1)
    return where.split(":")[1], message


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_bad_import_or_export_refuses_the_config_as_nats_server(
    name: str, tmp_path: Path
) -> None:
    conf = tmp_path / f"{name}.conf"
    conf.write_text(REFUSED[name] + "\n")
    theirs = _first_error([nats_server_binary()], conf, tries=MAP_ORDER_TRIES.get(name, 1))
    ours = _first_error([sys.executable, "-m", "infinistream", "serve"], conf)
    assert ours == theirs


def test_a_valid_config_with_links_is_valid_for_both(tmp_path: Path) -> None:
    conf = tmp_path / "linked.conf"
    conf.write_text(LINKED)
    for command in ([nats_server_binary()], [sys.executable, "-m", "infinistream", "serve"]):
        done = subprocess.run([*command, "-t", "-c", str(conf)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
