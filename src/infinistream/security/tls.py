"""The client `tls { ... }` block and nats-server's --tls flags: a server-side SSLContext
(nats-server's server/opts.go parseTLS and GenTLSConfig).

nats-server sends INFO in plain text, then the client and the server upgrade the connection
to TLS; with `handshake_first` the TLS handshake comes first and INFO follows inside it.
Clients that do not speak TLS are refused (the handshake fails and the connection closes),
and with `verify` a client must present a certificate signed by `ca_file`.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infinistream.natsconf import ConfigError, key_position, parse_duration

# nats-server's TLS_TIMEOUT: how long a client has to finish the handshake.
DEFAULT_TLS_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
class TlsSpec:
    cert_file: str
    key_file: str
    ca_file: str | None = None
    # Require a client certificate signed by ca_file (mutual TLS).
    verify: bool = False
    # Also take the user from the certificate (its emails, DNS names, then subject).
    verify_and_map: bool = False
    timeout: float = DEFAULT_TLS_TIMEOUT
    handshake_first: bool = False

    def context(self) -> ssl.SSLContext:
        """The server-side context; ConfigError (with nats-server's words) if a file is bad."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        # nats-server: TLS 1.2 at least.
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"error parsing X509 certificate/key pair: {_reason(exc)}") from exc
        if self.ca_file is not None:
            try:
                ctx.load_verify_locations(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"failed to parse root ca certificate: {_reason(exc)}") from exc
        elif self.verify:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        ctx.verify_mode = ssl.CERT_REQUIRED if self.verify else ssl.CERT_NONE
        return ctx


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc)


_BOOL_KEYS = ("verify", "verify_and_map")
_FILE_KEYS = ("cert_file", "key_file", "ca_file")


def parse_tls(
    block: Any, *, path: str | None = None, where: Mapping[str, Any] | None = None
) -> TlsSpec:
    """The top-level `tls` block; ConfigError for what nats-server refuses, or we do not
    support (refused rather than silently dropped)."""

    def error(mapping: Mapping[str, Any], key: str, message: str) -> ConfigError:
        line, column = key_position(mapping, key)
        return ConfigError(message, line=line, column=column, path=path)

    if not isinstance(block, Mapping):
        raise error(where or {}, "tls", "error parsing tls config, expected a map")
    files: dict[str, str] = {}
    flags = {"verify": False, "verify_and_map": False}
    timeout = DEFAULT_TLS_TIMEOUT
    handshake_first = False
    for key, value in block.items():
        k = key.lower()
        if k in _FILE_KEYS:
            if not isinstance(value, str):
                raise error(block, key, f"error parsing tls config, expected '{k}' to be filename")
            files[k] = value
        elif k in _BOOL_KEYS:
            if not isinstance(value, bool):
                raise error(block, key, f"error parsing tls config, expected '{k}' to be a boolean")
            flags[k] = value
        elif k == "timeout":
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise error(block, key, "error parsing tls config, 'timeout' wrong type")
            try:
                timeout = parse_duration(value)
            except ValueError as exc:
                raise error(block, key, f"error parsing tls config, 'timeout' {exc}") from None
        elif k in ("handshake_first", "first", "immediate"):
            if isinstance(value, bool):
                handshake_first = value
            elif isinstance(value, str) and value.lower() in ("true", "on", "false", "off"):
                handshake_first = value.lower() in ("true", "on")
            elif isinstance(value, str):
                # "auto" and a fallback delay let plain-INFO clients in after a wait: not
                # supported here.
                raise error(block, key, f'field "{key}" value "{value}" is not supported')
            else:
                raise error(
                    block,
                    key,
                    f'field "{key}" should be a boolean or a string, got {type(value).__name__}',
                )
        else:
            raise error(block, key, f'error parsing tls config, unknown field "{key}"')
    if "cert_file" in files and "key_file" not in files:
        raise error(where or {}, "tls", "missing 'key_file' in TLS configuration")
    if "key_file" in files and "cert_file" not in files:
        raise error(where or {}, "tls", "missing 'cert_file' in TLS configuration")
    if "cert_file" not in files:
        raise error(where or {}, "tls", "TLS Server certificate must be present and valid")
    spec = TlsSpec(
        cert_file=files["cert_file"],
        key_file=files["key_file"],
        ca_file=files.get("ca_file"),
        verify=flags["verify"] or flags["verify_and_map"],
        verify_and_map=flags["verify_and_map"],
        timeout=timeout if timeout > 0 else DEFAULT_TLS_TIMEOUT,
        handshake_first=handshake_first,
    )
    try:
        spec.context()
    except ConfigError as exc:
        raise error(where or {}, "tls", exc.message) from None
    return spec


def certificate_names(der: bytes | None) -> list[str]:
    """The names verify_and_map tries as a user, in nats-server's order: email addresses,
    DNS names, then the subject as an RFC 4514 string (Go's pkix.Name.String)."""
    if not der:
        return []
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = None
    if san is not None:
        names += san.get_values_for_type(x509.RFC822Name)
        names += san.get_values_for_type(x509.DNSName)
        names += san.get_values_for_type(x509.UniformResourceIdentifier)
    names.append(cert.subject.rfc4514_string())
    return names


class TlsError(Exception):
    """The TLS session is over: a failed handshake or a bad record (`clean` False), or the
    client's close_notify (`clean` True). `reply` is what to send before closing: the alert,
    or our close_notify."""

    def __init__(self, reason: str, reply: bytes, *, clean: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reply = reply
        self.clean = clean


class TlsSession:
    """The server side of one TLS connection, sans I/O: ciphertext in, plaintext out, and
    back. The connection feeds it what it reads and writes what it returns, so TLS works the
    same on any event loop (uvloop's start_tls stalled some handshakes), and a refused
    handshake still sends its alert to the client before the connection closes."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.handshake_done = False

    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        """Ciphertext from the client -> (plaintext for the protocol, bytes to send back).
        TlsError (with the bytes to send, the alert, in `args[1]`) if the session fails."""
        self._incoming.write(data)
        plain = bytearray()
        try:
            if not self.handshake_done:
                try:
                    self._ssl.do_handshake()
                except ssl.SSLWantReadError:
                    return b"", self._outgoing.read()
                self.handshake_done = True
            while True:
                try:
                    chunk = self._ssl.read(65536)
                except ssl.SSLWantReadError:
                    break
                if not chunk:
                    raise ssl.SSLZeroReturnError()
                plain += chunk
        except ssl.SSLZeroReturnError:
            # The client closed its side of TLS (close_notify): answer with ours, as clients
            # wait for it before they call the connection closed.
            with contextlib.suppress(ssl.SSLError):
                self._ssl.unwrap()
            raise TlsError("closed by the client", self._outgoing.read(), clean=True) from None
        except ssl.SSLError as exc:
            raise TlsError(exc.reason or str(exc), self._outgoing.read()) from exc
        return bytes(plain), self._outgoing.read()

    def send(self, plain: bytes) -> bytes:
        """Plaintext for the client -> the ciphertext to write."""
        self._ssl.write(plain)
        return self._outgoing.read()

    def peer_certificate(self) -> bytes | None:
        return self._ssl.getpeercert(binary_form=True)
