"""Raw JetStream API requests, for tests that compare exact answers (codes, err_codes, texts)."""

from __future__ import annotations

import json
from typing import Any

from nats.aio.client import Client

API = "$JS.API."


async def api(nc: Client, subject: str, body: Any = b"", timeout: float = 10) -> dict[str, Any]:
    """The JSON answer to `$JS.API.<subject>`; a body that is not bytes is sent as JSON."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    msg = await nc.request(API + subject, body, timeout=timeout)
    return json.loads(msg.data)  # type: ignore[no-any-return]


def error(resp: dict[str, Any]) -> tuple[int, int, str]:
    """(code, err_code, description) of a refusal; fails if the request was not refused."""
    err = resp.get("error")
    assert err is not None, resp
    return (err["code"], err["err_code"], err["description"])


def status(msg: Any) -> tuple[str, str]:
    """(status code, description) of a status message as nats-py reads it ("" if none)."""
    headers = msg.headers or {}
    return headers.get("Status", ""), headers.get("Description", "")
