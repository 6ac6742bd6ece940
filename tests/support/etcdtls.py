"""Certificates for an etcd with TLS and client certificate authentication, made by the tests:
a CA, a certificate for the members (127.0.0.1; server and client use, since etcd's JSON gateway
dials its own gRPC port with it), and client certificates that expire when a test says.

A client certificate names its holder in the organization, not the CommonName: with
authentication on, etcd's gateway refuses a client certificate that has a CommonName (400
"CommonName of client sending a request against gateway will be ignored"), since it could not
map it to a user the way its gRPC port does.

    tls = EtcdTls.make(tmp_path / "tls")
    tls.issue_client(tls.client, lifetime=5.0)   # replaced in place: same paths, new files
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_LONG = datetime.timedelta(days=30)


@dataclass
class CertFiles:
    cert: Path
    key: Path


@dataclass
class EtcdTls:
    directory: Path
    ca: Path
    member: CertFiles
    # The agents' client certificate and the tests' own.
    client: CertFiles
    admin: CertFiles
    _ca_cert: x509.Certificate
    _ca_key: ec.EllipticCurvePrivateKey

    @classmethod
    def make(cls, directory: Path) -> EtcdTls:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "etcd test CA")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + _LONG)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        ca = directory / "ca.pem"
        ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        files = {
            stem: CertFiles(directory / f"{stem}.pem", directory / f"{stem}-key.pem")
            for stem in ("member", "client", "admin")
        }
        tls = cls(directory, ca, files["member"], files["client"], files["admin"], ca_cert, key)
        tls.issue(tls.member, "127.0.0.1", server=True)
        tls.issue(tls.client, "agents")
        tls.issue(tls.admin, "tests")
        return tls

    def issue(
        self, files: CertFiles, name: str, *, lifetime: float | None = None, server: bool = False
    ) -> None:
        """Write a certificate signed by the CA to `files`, valid for `lifetime` seconds from
        now (30 days when None): a member's for the address `name`, or a client's for the
        organization `name`."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        until = now + (_LONG if lifetime is None else datetime.timedelta(seconds=lifetime))
        oid = NameOID.COMMON_NAME if server else NameOID.ORGANIZATION_NAME
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(oid, name)]))
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(until)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server:
            san = [x509.IPAddress(ipaddress.ip_address(name)), x509.DNSName("localhost")]
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        files.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
