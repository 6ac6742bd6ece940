"""Where two accounts' data lands, looked at from outside the agent: every metadata key and
every object of an account under its own group, and an account's messages in its objects
only."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import nats

from support.agentproc import running_agent
from support.storeinspect import stored_objects

CONFIG = """
accounts {
  A: { users: [ {user: a, password: a} ], jetstream: enabled }
  B: { users: [ {user: b, password: b} ], jetstream: enabled }
}
"""


async def test_each_accounts_keys_and_objects_are_under_its_group(tmp_path: Path) -> None:
    store = tmp_path / "store"
    conf = tmp_path / "accounts.conf"
    conf.write_text(CONFIG)
    with running_agent(store, "-c", str(conf), "--linger", "20ms") as agent:
        for user in ("a", "b"):
            nc = await nats.connect(agent.url, user=user, password=user)
            js = nc.jetstream()
            await js.add_stream(name="ORDERS", subjects=["orders.>"])
            await js.publish("orders.x", f"payload-of-{user}".encode())
            await js.pull_subscribe("orders.>", durable="C", stream="ORDERS")
            kv = await js.create_key_value(bucket="cfg")
            await kv.put("k", f"value-of-{user}".encode())
            await nc.close()

    con = sqlite3.connect(store / "meta.db")
    keys = [bytes(k).decode() for (k,) in con.execute("SELECT key FROM kv")]
    con.close()
    groups = {key.split("/", 1)[0] for key in keys}
    assert groups <= {"default@A", "default@B", "default"}
    for group in ("default@A", "default@B"):
        assert f"{group}/streams/ORDERS" in keys
        assert f"{group}/streams/KV_cfg" in keys
        assert any(k.startswith(f"{group}/") and "/C" in k for k in keys)

    for user, group in (("a", "default@A"), ("b", "default@B")):
        objects = {
            key: data
            for key, data in stored_objects(store / "objects").items()
            if key.split("/")[0] == group
        }
        assert objects and all(key.split("/")[1] == "objects" for key in objects)
        data = b"".join(objects.values())
        other = "b" if user == "a" else "a"
        assert f"payload-of-{user}".encode() in data
        assert f"value-of-{user}".encode() in data
        assert f"of-{other}".encode() not in data
        # On disk too: every file under the group's directory (packs included) holds its own
        # payloads and none of the other's.
        files = (store / "objects" / group).rglob("*")
        raw = b"".join(p.read_bytes() for p in files if p.is_file())
        assert f"payload-of-{user}".encode() in raw
        assert f"of-{other}".encode() not in raw
    assert sorted(p.name for p in (store / "objects").iterdir()) == ["default@A", "default@B"]
