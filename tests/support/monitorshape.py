"""Comparing the shape of two JSON answers: their keys and value types, field by field.

Values differ between an agent and nats-server (ids, times, counts); shapes must not. A path
names a field as `a.b[].c` (`[]` for the items of a list); `missing_ok` lists fields nats-server
has that the agent leaves out, `extra_ok` fields only the agent has, each for a stated reason.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"  # JSON has one number type (Go writes 2.0 as 2)
    if value is None:
        return "null"
    return type(value).__name__


def differences(
    agent: Any,
    server: Any,
    *,
    missing_ok: frozenset[str] = frozenset(),
    extra_ok: frozenset[str] = frozenset(),
    path: str = "",
) -> list[str]:
    """Where the agent's answer differs in shape from nats-server's."""
    if kind(agent) != kind(server):
        return [f"{path or '.'}: agent {kind(agent)}, nats-server {kind(server)}"]
    out: list[str] = []
    if isinstance(server, dict):
        for key in server.keys() - agent.keys():
            if _join(path, key) not in missing_ok:
                out.append(f"{_join(path, key)}: missing on the agent")
        for key in agent.keys() - server.keys():
            if _join(path, key) not in extra_ok:
                out.append(f"{_join(path, key)}: only on the agent")
        for key in agent.keys() & server.keys():
            out += differences(
                agent[key],
                server[key],
                missing_ok=missing_ok,
                extra_ok=extra_ok,
                path=_join(path, key),
            )
    elif isinstance(server, list) and agent and server:
        # The fullest item of each (optional fields present), so that which item comes first
        # (a connection still closing, say) does not matter.
        out += differences(
            _fullest(agent),
            _fullest(server),
            missing_ok=missing_ok,
            extra_ok=extra_ok,
            path=path + "[]",
        )
    return out


def _fullest(items: list[Any]) -> Any:
    return max(items, key=lambda item: len(item) if isinstance(item, dict) else 0)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def http_get(port: int, path: str) -> tuple[int, str, Any]:
    """Status, Content-Type and body (JSON decoded when it is JSON) of GET `path`."""
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            status, headers, body = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        status, headers, body = exc.code, exc.headers, exc.read()
    content_type = headers.get("Content-Type", "")
    decoded = json.loads(body) if content_type.startswith("application/json") else body.decode()
    return status, content_type, decoded
