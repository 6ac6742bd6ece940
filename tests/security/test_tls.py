"""TLS for clients, against an agent and nats-server with the same config file: INFO fields,
mutual TLS, bad certificates, plain clients, a handshake that never comes, handshake_first,
and nats.js over TLS."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from certs import Certs, Pair, make_certs

from support.jsclient import run_js
from support.rawnats import RawClient
from support.servers import KINDS, Server, running_server, start_command


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module", params=KINDS)
def mutual(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[Server]:
    """Mutual TLS: a client needs a certificate from the CA."""
    tmp = tmp_path_factory.mktemp(f"mtls-{request.param}")
    conf = tmp / "tls.conf"
    conf.write_text(
        f'tls {{\n  cert_file: "{certs.server.cert}"\n  key_file: "{certs.server.key}"\n'
        f'  ca_file: "{certs.ca}"\n  verify: true\n  timeout: 1\n}}\n'
    )
    with running_server(request.param, tmp / "store", "-c", str(conf)) as srv:
        yield srv


@pytest.fixture(scope="module", params=KINDS)
def first(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[Server]:
    """TLS first: the handshake before INFO."""
    tmp = tmp_path_factory.mktemp(f"first-{request.param}")
    conf = tmp / "first.conf"
    conf.write_text(
        f'tls {{\n  cert_file: "{certs.server.cert}"\n  key_file: "{certs.server.key}"\n'
        "  handshake_first: true\n}\n"
    )
    with running_server(request.param, tmp / "store", "-c", str(conf)) as srv:
        yield srv


async def _gets_connected(port: int, context: ssl.SSLContext) -> bool:
    """Whether nats-py gets a working connection. With TLS 1.3 the client finishes its side
    of the handshake before the server checks the client's certificate, so a refusal (the
    server's alert, then the close) reaches nats-py while it waits for its first PONG: its
    connect raises, or returns a client that is not connected."""
    try:
        nc = await asyncio.wait_for(
            nats.connect(
                f"tls://127.0.0.1:{port}",
                tls=context,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                connect_timeout=5,
            ),
            20,
        )
    except Exception:
        return False
    connected = bool(nc.is_connected)
    await asyncio.wait_for(nc.close(), 10)
    return connected


def client_context(certs: Certs, pair: Pair | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    if pair is not None:
        ctx.load_cert_chain(str(pair.cert), str(pair.key))
    return ctx


async def test_mutual_tls_info_and_a_client_with_a_certificate(
    mutual: Server, certs: Certs
) -> None:
    raw = await RawClient.open(mutual.port)
    try:
        assert raw.info["tls_required"] is True
        assert raw.info["tls_verify"] is True
        assert "tls_available" not in raw.info
    finally:
        await raw.close()
    nc = await nats.connect(
        f"tls://127.0.0.1:{mutual.port}", tls=client_context(certs, certs.client)
    )
    try:
        # A JetStream round trip over the encrypted connection.
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="TLS", subjects=["tls.>"])
        ack = await js.publish("tls.a", b"secret")
        assert (await js.get_msg("TLS", ack.seq)).data == b"secret"
    finally:
        await nc.close()


@pytest.mark.parametrize("which", ["none", "expired", "stranger"])
async def test_clients_without_a_good_certificate_are_refused(
    mutual: Server, certs: Certs, which: str
) -> None:
    pair = {"none": None, "expired": certs.expired, "stranger": certs.stranger}[which]
    assert not await _gets_connected(mutual.port, client_context(certs, pair))
    # The server is still there for a good client.
    nc = await nats.connect(
        f"tls://127.0.0.1:{mutual.port}", tls=client_context(certs, certs.client)
    )
    await nc.flush()
    await nc.close()


async def test_a_plain_client_gets_nothing_after_info(mutual: Server) -> None:
    raw = await RawClient.open(mutual.port)
    try:
        raw.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        # The server expects a TLS handshake: the plain text fails it, and the connection is
        # closed without a PONG (or anything in plain text).
        got = await raw.read_until_closed()
        assert b"PONG" not in got
        assert not got.startswith(b"+OK")
    finally:
        await raw.close()


async def test_a_client_that_never_handshakes_is_closed_others_unaffected(
    mutual: Server, certs: Certs
) -> None:
    silent = await RawClient.open(mutual.port)
    try:
        nc = await nats.connect(
            f"tls://127.0.0.1:{mutual.port}", tls=client_context(certs, certs.client)
        )
        await nc.flush()
        # tls timeout is 1s (nats-server's auth timeout is then 2s): well within 10s.
        await silent.read_until_closed(timeout=10)
        assert nc.is_connected
        await nc.flush()
        await nc.close()
    finally:
        await silent.close()


async def test_handshake_first(first: Server, certs: Certs) -> None:
    nc = await nats.connect(
        f"tls://127.0.0.1:{first.port}", tls=client_context(certs, None), tls_handshake_first=True
    )
    try:
        assert nc._server_info.get("tls_required") is True
        info = await nc.jetstream(timeout=10).account_info()
        assert info.limits is not None
    finally:
        await nc.close()


async def test_handshake_first_server_sends_no_plain_info(first: Server) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", first.port)
    try:
        # No INFO in plain text: the server waits for a ClientHello.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 0.5)
    finally:
        writer.close()


async def test_nats_js_over_mutual_tls(mutual: Server, certs: Certs) -> None:
    run = await run_js(
        "tls_client.mjs",
        f"127.0.0.1:{mutual.port}",
        str(certs.ca),
        str(certs.client.cert),
        str(certs.client.key),
        server_log=mutual.log,
        timeout=60,
    )
    assert run.result == {"echo": "over tls"}


@pytest.mark.parametrize("kind", KINDS)
async def test_tls_flags(kind: str, tmp_path: Path, certs: Certs) -> None:
    flags = ("--tlscert", str(certs.server.cert), "--tlskey", str(certs.server.key))
    with running_server(kind, tmp_path / "store", *flags) as srv:
        raw = await RawClient.open(srv.port)
        try:
            assert raw.info["tls_required"] is True
            assert "tls_verify" not in raw.info
        finally:
            await raw.close()
        nc = await nats.connect(f"tls://127.0.0.1:{srv.port}", tls=client_context(certs, None))
        await nc.flush()
        await nc.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tlsverify",), "TLS Server certificate must be present and valid"),
        (("--tlscert", "{cert}"), "TLS Server private key must be present and valid"),
        (("-c", "{conf}"), "error parsing X509 certificate/key pair"),
    ],
    ids=["no-cert", "no-key", "key-is-not-a-key"],
)
def test_bad_tls_settings_refuse_to_start(
    kind: str, tmp_path: Path, certs: Certs, args: tuple[str, ...], message: str
) -> None:
    conf = tmp_path / "bad.conf"
    # The CA certificate given as the key: not a key at all.
    conf.write_text(f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.ca}" }}\n')
    argv = [a.format(cert=certs.server.cert, conf=conf) for a in args]
    command = [*start_command(kind), "-p", "-1", "-sd", str(tmp_path / "s"), *argv]
    done = subprocess.run(command, capture_output=True, timeout=60, check=False)
    assert done.returncode != 0
    assert message in done.stderr.decode()


@pytest.mark.parametrize("kind", KINDS)
async def test_verify_and_map_takes_the_user_from_the_certificate(
    kind: str, tmp_path: Path, certs: Certs
) -> None:
    conf = tmp_path / "map.conf"
    conf.write_text(
        f'tls {{ cert_file: "{certs.server.cert}", key_file: "{certs.server.key}",\n'
        f'  ca_file: "{certs.ca}", verify_and_map: true }}\n'
        'authorization { users: [ {user: "alice@example.com"} ] }\n'
    )
    with running_server(kind, tmp_path / "store", "-c", str(conf)) as srv:
        url = f"tls://127.0.0.1:{srv.port}"
        # No password: the certificate's email address names the user.
        nc = await asyncio.wait_for(
            nats.connect(url, tls=client_context(certs, certs.client), allow_reconnect=False), 20
        )
        await nc.flush()
        await nc.close()
        # No certificate: the handshake itself fails (verify is on).
        assert not await _gets_connected(srv.port, client_context(certs, None))
