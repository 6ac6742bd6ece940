"""The etcd backend on a cluster run as production runs it: HTTPS with client certificates
(`--client-cert-auth`) and etcd authentication. Tokens that expire, a user whose role is
revoked, a password changed, a client certificate that expires while the store is in use: each
fails calls with a `MetadataError` in words, and the store recovers by itself once the
credentials are fixed (a password file, a certificate file replaced in place).

The contract suite runs over TLS and authentication too (the etcd-tls-auth backend)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
import pytest

from infinistream.metadata import MetadataError, MetadataStore, Put, open_metadata
from infinistream.metadata.etcd import EtcdMetadataStore
from infinistream.metadata.etcd_access import CHECK_INTERVAL, EtcdAccess
from support.agentpool import running_agents
from support.agentproc import AgentProcess
from support.etcdserver import EtcdServer, free_port
from support.etcdtls import EtcdTls

# Seconds an etcd simple token lives here: tests see one expire.
TOKEN_TTL = 2


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> EtcdTls:
    return EtcdTls.make(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory, tls: EtcdTls) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd"), tls=tls, auth_token_ttl=TOKEN_TTL)
    server.start()
    try:
        server.enable_auth()
        yield server
    finally:
        server.close()


@pytest.fixture
async def user_store(
    etcd: EtcdServer, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[str, MetadataStore]]:
    """A user of its own for the test (role "<user>-role"), and a store logged in as it."""
    user = request.node.name.replace("_", "-")[5:40]
    etcd.add_user(user, f"{user}-role")
    store = open_metadata(etcd.url_as(user))
    yield user, store
    await store.close()


def words_only(error: MetadataError) -> str:
    """The error's text, checked to be words: no traceback, no Python exception's repr."""
    text = str(error)
    for python in ("Traceback", "Error(", "Exception", "<"):
        assert python not in text, text
    return text


async def test_a_store_logs_in_and_a_token_that_expired_is_replaced(
    user_store: tuple[str, MetadataStore],
) -> None:
    _, store = user_store
    assert (await store.txn([], [Put("k", b"1")])).succeeded
    # Past the token's life: the next calls log in again by themselves, a txn included.
    await asyncio.sleep(TOKEN_TTL + 1.5)
    assert (await store.txn([], [Put("k", b"2")])).succeeded
    item = await store.get("k")
    assert item is not None and item.value == b"2"
    await asyncio.sleep(TOKEN_TTL + 1.5)
    watch = store.watch("w/")
    try:
        await watch.wait(0.1)  # opens it (and logs in again)
        await asyncio.sleep(0.5)
        await store.txn([], [Put("w/1", b"x")])
        assert await watch.wait(10)
    finally:
        await watch.close()


async def test_a_revoked_role_is_refused_until_granted_again(
    etcd: EtcdServer, user_store: tuple[str, MetadataStore]
) -> None:
    user, store = user_store
    await store.txn([], [Put("r", b"1")])
    etcd.revoke(f"{user}-role")
    with pytest.raises(MetadataError) as refused_write:
        await store.txn([], [Put("r", b"2")])
    assert "HTTP 403: etcdserver: permission denied" in words_only(refused_write.value)
    with pytest.raises(MetadataError) as refused_read:
        await store.get("r")
    assert "permission denied" in words_only(refused_read.value)
    etcd.grant(f"{user}-role")
    item = await store.get("r")
    assert item is not None and item.value == b"1"


async def test_a_changed_password_fails_the_login_until_the_file_is_fixed(
    etcd: EtcdServer, user_store: tuple[str, MetadataStore]
) -> None:
    user, store = user_store
    await store.revision()
    etcd.set_password(user, "n3w-Secret")
    # etcd drops the tokens of a user whose password changes.
    with pytest.raises(MetadataError) as refused:
        await store.revision()
    text = words_only(refused.value)
    assert f"etcd authentication of user {user!r} failed" in text
    assert "invalid user ID or password" in text
    assert "n3w-Secret" not in text  # never the password
    etcd.password_files[user].write_text("n3w-Secret\n")
    assert await store.revision() > 0


async def test_a_client_certificate_that_expires_and_is_renewed(
    etcd: EtcdServer, tls: EtcdTls, tmp_path: Path
) -> None:
    # The store's own copy of the client certificate, so the other tests keep theirs.
    mine = tls.client.__class__(tmp_path / "client.pem", tmp_path / "client-key.pem")
    tls.issue(mine, "agents", lifetime=4)
    etcd.add_user("expiring", "expiring-role")
    access = EtcdAccess(
        ca_file=str(tls.ca),
        cert_file=str(mine.cert),
        key_file=str(mine.key),
        user="expiring",
        password_file=str(etcd.password_files["expiring"]),
    )
    store = EtcdMetadataStore([f"https://{e}" for e in etcd.endpoints], access=access, timeout=5)
    try:
        assert (await store.txn([], [Put("c", b"1")])).succeeded
        await asyncio.sleep(4.5)
        # A member restart (or any new connection) needs a handshake: refused now.
        etcd.stop()
        etcd.start()
        with pytest.raises(MetadataError) as refused:
            await store.get("c")
        assert "TLS: sslv3 alert bad certificate" in words_only(refused.value)
        # The operator renews it in place; the next connection presents the new one.
        tls.issue(mine, "agents")
        await asyncio.sleep(CHECK_INTERVAL + 0.1)
        item = await store.get("c")
        assert item is not None and item.value == b"1"
    finally:
        await store.close()


async def test_tls_and_login_mistakes_are_said_in_words(
    etcd: EtcdServer, tls: EtcdTls, tmp_path: Path
) -> None:
    endpoints = ",".join(etcd.endpoints)
    # No client certificate: etcd ends the handshake.
    store = open_metadata(f"etcd+https://{endpoints}?cacert={tls.ca}&timeout=5")
    with pytest.raises(MetadataError) as no_cert:
        await store.revision()
    assert "TLS: " in words_only(no_cert.value)
    await store.close()
    # A CA that did not sign the members' certificate.
    other = EtcdTls.make(tmp_path / "other")
    store = open_metadata(
        f"etcd+https://{endpoints}?cacert={other.ca}&cert={tls.client.cert}"
        f"&key={tls.client.key}&timeout=5"
    )
    with pytest.raises(MetadataError) as untrusted:
        await store.revision()
    assert "TLS: the member's certificate is not trusted" in words_only(untrusted.value)
    await store.close()
    # A missing file, and a user etcd does not know.
    store = open_metadata(
        f"etcd+https://{endpoints}?cacert={tls.ca}&cert={tmp_path}/none.pem&key={tls.client.key}"
    )
    with pytest.raises(MetadataError, match="cannot load the client certificate"):
        await store.revision()
    await store.close()
    (tmp_path / "pw").write_text("secret\n")
    store = open_metadata(
        f"etcd+https://{endpoints}?cacert={tls.ca}&cert={tls.client.cert}&key={tls.client.key}"
        f"&user=nobody&password_file={tmp_path}/pw"
    )
    with pytest.raises(MetadataError) as unknown:
        await store.revision()
    assert "etcd authentication of user 'nobody' failed" in words_only(unknown.value)
    await store.close()


def test_url_options_are_checked() -> None:
    with pytest.raises(ValueError, match="needs both cert and key"):
        open_metadata("etcd+https://h:2379?cert=/c.pem")
    with pytest.raises(ValueError, match="needs both a user and a password"):
        open_metadata("etcd://h:2379?user=agent")
    with pytest.raises(ValueError, match=r"password=\*\*\*") as both:
        open_metadata("etcd://h:2379?user=a&password=hunter2&password_file=/p")
    assert "hunter2" not in str(both.value)
    store = open_metadata("etcd+https://h:2379?cacert=/ca.pem&user=a&password=hunter2")
    assert "hunter2" not in repr(store)


def healthz(agent: AgentProcess) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/healthz", timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_an_agent_whose_role_is_revoked_fails_cleanly_and_recovers(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    etcd.add_user("revoked-agent", "revoked-agents")
    url = etcd.url_as("revoked-agent")
    with running_agents(tmp_path, "-m", str(free_port()), metadata=url, count=1) as (agent,):
        nc = await nats.connect(agent.url)
        try:
            js = nc.jetstream(timeout=20)
            await js.add_stream(name="S", subjects=["s.>"])
            assert (await js.publish("s.1", b"before")).seq == 1
            assert healthz(agent)[0] == 200
            etcd.revoke("revoked-agents")
            # The publish is refused with the JetStream error; etcd's words go to the log and
            # /healthz, not to the client.
            with pytest.raises(nats.js.errors.APIError) as refused:
                await js.publish("s.1", b"while revoked")
            assert refused.value.code == 503 and refused.value.err_code == 10077
            assert refused.value.description == "metadata commit failed"
            # /healthz reuses a probe's answer for a moment: until it has asked again.
            _, body = until_health(agent, 503)
            assert "permission denied" in json.dumps(body)
            assert until_text(agent, "Healthcheck failed")
            assert "permission denied (gRPC code 7)" in agent.log()
            # Granted again: the next publish is stored, /healthz is ok, nothing restarted.
            etcd.grant("revoked-agents")
            ack = await js.publish("s.1", b"after")
            assert ack.seq == 2
            until_health(agent, 200)
        finally:
            await nc.close()
        assert "Traceback" not in agent.log()


def until_text(agent: AgentProcess, text: str) -> bool:
    """Until the agent's log has `text` (the safety net fails the test)."""
    deadline = time.monotonic() + 60
    while text not in agent.log():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def until_health(agent: AgentProcess, status: int) -> tuple[int, dict[str, Any]]:
    """Until /healthz answers `status` (the safety net fails the test)."""
    deadline = time.monotonic() + 60
    while (answer := healthz(agent))[0] != status:
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)
    return answer
