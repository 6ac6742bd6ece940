"""Outbound connections to running NATS servers ("upstreams"), from which a stream here can
mirror or source a stream (moving in from nats-server without downtime, docs/migration.md).

A mirror or source names an upstream by the API prefix of its `external`: `$JS.<name>.API`
is the JetStream API of upstream `<name>` (on that server, its own `api`: `$JS.API` unless it
is set, `$JS.<domain>.API` for a server in a JetStream domain).

    infinistream {
      upstreams {
        hub {
          url: "nats://hub.example.com:4222"
          user: "mover", password: "secret"      # or token, or creds: "/path/user.creds"
          tls { ca_file: "ca.pem", cert_file: "client.pem", key_file: "client-key.pem" }
          api: "$JS.API"
        }
      }
    }

On the command line: `--upstream hub=nats://user:password@hub.example.com:4222`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from infinistream.security.exports import JS_API

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_KEYS = ("url", "user", "password", "token", "creds", "tls", "api")
_TLS_KEYS = ("ca_file", "cert_file", "key_file")


@dataclass(frozen=True, slots=True)
class Upstream:
    name: str
    url: str
    user: str = ""
    password: str = ""
    token: str = ""
    creds: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    # The JetStream API prefix on the upstream server.
    api: str = JS_API

    @property
    def external_api(self) -> str:
        """The `external.api` of a mirror or source that reads from this upstream."""
        return f"$JS.{self.name}.API"


def upstream_named(external_api: str, upstreams: dict[str, Upstream]) -> Upstream | None:
    """The upstream an `external.api` prefix names; None if it names none."""
    parts = external_api.split(".")
    if len(parts) != 3 or parts[0] != "$JS" or parts[2] != "API":
        return None
    return upstreams.get(parts[1])


def _check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"upstream name {name!r}: letters, digits, '_' and '-' only")
    return name


def parse_upstreams(block: Any) -> dict[str, Upstream]:
    """The `upstreams { name { ... } }` block."""
    if not isinstance(block, dict):
        raise ValueError("upstreams: expected a block { name { url: ... } }")
    out: dict[str, Upstream] = {}
    for name, spec in block.items():
        if not isinstance(spec, dict):
            raise ValueError(f"upstream {name}: expected a block {{ url: ... }}")
        unknown = [k for k in spec if k not in _KEYS]
        if unknown:
            raise ValueError(f"upstream {name}: unknown field {unknown[0]!r}")
        if not spec.get("url"):
            raise ValueError(f"upstream {name}: url is required")
        tls = spec.get("tls") or {}
        if not isinstance(tls, dict) or any(k not in _TLS_KEYS for k in tls):
            raise ValueError(f"upstream {name}: tls takes {', '.join(_TLS_KEYS)}")
        out[name] = Upstream(
            name=_check_name(name),
            url=str(spec["url"]),
            user=str(spec.get("user", "")),
            password=str(spec.get("password", "")),
            token=str(spec.get("token", "")),
            creds=str(spec.get("creds", "")),
            ca_file=str(tls.get("ca_file", "")),
            cert_file=str(tls.get("cert_file", "")),
            key_file=str(tls.get("key_file", "")),
            api=str(spec.get("api", JS_API)),
        )
    return out


def parse_upstream_flag(text: str) -> Upstream:
    """`--upstream NAME=URL`."""
    name, sep, url = text.partition("=")
    if not sep or not url:
        raise ValueError(f"--upstream {text!r}: expected NAME=URL")
    return Upstream(name=_check_name(name), url=url)
