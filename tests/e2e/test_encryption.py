"""Encryption at rest through the real agent on the local store: a stream written before
encryption was turned on stays readable, nothing written after it is in clear on disk (the
bytes are scanned), and a missing or wrong key is refused with nats-server's store error. The
same with metadata in etcd: no marker in any value it serves or any file it keeps."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.errors import APIError

from infinistream.metadata import open_metadata
from support.agentpool import running_agents
from support.agentproc import AgentProcess, running_agent
from support.etcdserver import EtcdServer

OLD = b"Pl41nOLDmarker"
NEW = b"S3cr3tNEWmarker"
KEY = "a long random key 6f1d2b9c0e8a4f3d7b5c1e9a2d4f6b8c"


def _encryption_varz(agent: AgentProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/varz", timeout=10) as r:
        encryption: dict[str, Any] = json.load(r)["infinistream"]["encryption"]
    return encryption


def _files_with(root: Path, marker: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and marker in p.read_bytes()]


async def _publish(agent: AgentProcess, marker: bytes, n: int, create: bool = False) -> None:
    nc = await nats.connect(agent.url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        if create:
            await js.add_stream(name="S", subjects=["s.>"], duplicate_window=600)
        m = marker.decode()
        for i in range(n):
            headers = {"X-M": f"{m}{i}", "Nats-Msg-Id": f"{m}-{agent.port}-{i}"}
            ack = await js.publish(f"s.{m}.{i}", marker + b" data", headers=headers)
            assert not ack.duplicate
        # The duplicate window still works on the ids it can no longer read in metadata.
        again = await js.publish(f"s.{m}.0", marker + b" data", headers=headers)
        assert again.duplicate and again.seq == ack.seq
    finally:
        await nc.close()


async def _read(agent: AgentProcess) -> list[tuple[str, bytes]]:
    nc = await nats.connect(agent.url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        info = await js.stream_info("S")
        out = []
        for seq in range(1, info.state.last_seq + 1):
            msg = await js.get_msg("S", seq)
            assert msg.headers is not None and msg.data is not None
            out.append((msg.subject, msg.data))
        return out
    finally:
        await nc.close()


async def _refused(agent: AgentProcess) -> str:
    nc = await nats.connect(agent.url, allow_reconnect=False)
    try:
        with pytest.raises(APIError) as exc:
            await nc.jetstream().get_msg("S", 1)
        assert exc.value.err_code == 10077
        return exc.value.description or ""
    finally:
        await nc.close()


async def test_old_stream_stays_readable_new_data_sealed_wrong_key_refused(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    conf = tmp_path / "enc.conf"
    conf.write_text(f'jetstream {{\n  cipher: aes\n  key: "{KEY}"\n}}\n')

    with running_agent(store) as plain:
        await _publish(plain, OLD, 5, create=True)
    # The scan sees what is in clear: the stream written without encryption is.
    assert _files_with(store / "objects", OLD)

    with running_agent(store, "-c", str(conf), "-m", "-1") as sealed:
        await _publish(sealed, NEW, 5)
        got = await _read(sealed)
        varz = _encryption_varz(sealed)
        assert (varz["enabled"], varz["cipher"], varz["refused_reads"]) == (True, "aes", 0)
        assert KEY not in json.dumps(varz)
    assert [s for s, _ in got] == [f"s.{OLD.decode()}.{i}" for i in range(5)] + [
        f"s.{NEW.decode()}.{i}" for i in range(5)
    ]
    assert all(d.endswith(b" data") for _, d in got)
    assert _files_with(store, NEW) == []

    # No key at all, then a wrong one: refused, never garbage, and said in the log.
    with running_agent(store) as keyless:
        assert "no encryption key" in await _refused(keyless)
    assert "refused" in keyless.log()
    with running_agent(store, "-m", "-1", env={"INFINISTREAM_KEY": "not the key"}) as wrong:
        assert "does not hold" in await _refused(wrong)
        assert _encryption_varz(wrong)["refused_reads"] >= 1
        assert varz["key_id"] not in _encryption_varz(wrong)["key_ids"]
    assert "refused" in wrong.log()

    # The same key through the environment and the default cipher still reads everything:
    # the cipher is recorded with each object.
    with running_agent(store, env={"INFINISTREAM_KEY": KEY}) as again:
        assert await _read(again) == got


async def test_two_agents_on_etcd_leave_no_plaintext_in_its_values_or_files(
    tmp_path: Path,
) -> None:
    etcd = EtcdServer(tmp_path / "etcd", members=1)
    etcd.start()
    try:
        env = {"INFINISTREAM_KEY": KEY}
        with running_agents(tmp_path, metadata=etcd.url, env=env) as (a, b):
            await _publish(a, NEW, 5, create=True)
            await _publish(b, NEW, 5)
            got = await _read(b)
            assert len(got) == 10 and all(NEW.decode() in s for s, _ in got)
        meta = open_metadata(etcd.url)
        try:
            items = await meta.range("")
        finally:
            await meta.close()
        assert any("/sd/S/i/" in item.key for item in items)
        assert [i.key for i in items if NEW in i.key.encode() + i.value] == []
        etcd.stop()  # its WAL and snapshots are flushed: scan them too
        assert _files_with(tmp_path, NEW) == []
    finally:
        etcd.close()


async def test_a_pluggable_key_provider_seals_and_opens(tmp_path: Path) -> None:
    """`--key-provider` plugs in a KeyProvider that is not ours (tests/support/kms_example.py, a
    stand-in for a KMS): the agent seals with its keys and reads back; then the KMS's current
    key changes and the agent reads what the old one sealed."""
    store = tmp_path / "store"
    kms = tmp_path / "kms.json"
    keys = {"k-2026-01": os.urandom(32).hex(), "k-2026-02": os.urandom(32).hex()}
    kms.write_text(json.dumps({"current": "k-2026-01", "keys": keys}))
    tests_dir = str(Path(__file__).resolve().parent.parent)
    env = {
        "KMS_FILE": str(kms),
        "PYTHONPATH": os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]),
    }
    args = ("--key-provider", "support.kms_example:FileKms", "-m", "-1")
    with running_agent(store, *args, env=env) as agent:
        await _publish(agent, NEW, 5, create=True)
        got = await _read(agent)
        assert _encryption_varz(agent)["key_id"] == "k-2026-01"
    assert _files_with(store, NEW) == []
    kms.write_text(json.dumps({"current": "k-2026-02", "keys": keys}))
    with running_agent(store, *args, env=env) as agent:
        assert await _read(agent) == got
        assert _encryption_varz(agent)["key_ids"] == ["k-2026-02", "k-2026-01"]
