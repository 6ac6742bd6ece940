"""Decentralised auth (nats-server's operator mode with a MEMORY resolver): operator, account
and user JWTs as nats-io/jwt v2 writes them.

A JWT is `header.claims.signature`, base64url without padding; the signature is the issuer's
nkey (Ed25519) over `header.claims`. The chain of trust: the operator JWT (trusted as
configured) signs account JWTs (its key or one of its `signing_keys`); an account signs its
users' JWTs (its key, or one of its `signing_keys`, then `issuer_account` names the account).
A client sends its user JWT in CONNECT with the server's nonce signed by the user's key.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass
from typing import Any

from infinistream.security.identity import Permissions, ResponsePermission, SubjectPermission

ALGORITHMS = ("ed25519-nkey", "ed25519")


class JwtError(ValueError):
    pass


def _b64decode(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise JwtError("not base64url") from exc


def public_key_bytes(encoded: str, prefix: int) -> bytes | None:
    """The Ed25519 key of a public nkey with `prefix` (U, A, O...), or None if it is not one."""
    import nkeys

    try:
        raw = base64.b32decode(encoded + "=" * (-len(encoded) % 8))
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 35 or raw[0] != prefix:
        return None
    if nkeys.crc16_checksum(raw[:-2]) != raw[-2:]:
        return None
    return raw[1:33]


def verify_signature(public_key: str, prefix: int, message: bytes, signature: bytes) -> bool:
    key = public_key_bytes(public_key, prefix)
    if key is None:
        return False
    from nacl.exceptions import BadSignatureError
    from nacl.signing import VerifyKey

    try:
        VerifyKey(key).verify(message, signature)
    except (BadSignatureError, ValueError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class Claims:
    issuer: str
    subject: str
    kind: str  # operator, account, user
    nats: dict[str, Any]
    expires: float | None
    not_before: float | None
    name: str


def decode(token: str, *, kind: str, issuers: tuple[str, ...], prefix: int) -> Claims:
    """The claims of a JWT of `kind`, signed by one of `issuers` (empty: by its own issuer,
    for the self-signed operator). JwtError says why not."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise JwtError("not a JWT")
    try:
        header = json.loads(_b64decode(parts[0]))
        claims = json.loads(_b64decode(parts[1]))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        # RecursionError: nested deeper than the decoder goes, which no JWT is.
        raise JwtError("not a JWT") from exc
    if not isinstance(header, dict) or header.get("alg") not in ALGORITHMS:
        raise JwtError("unsupported JWT algorithm")
    if not isinstance(claims, dict):
        raise JwtError("not a JWT")
    nats = claims.get("nats")
    if not isinstance(nats, dict) or nats.get("type") != kind:
        raise JwtError(f"not a {kind} JWT")
    issuer, subject = claims.get("iss"), claims.get("sub")
    if not isinstance(issuer, str) or not isinstance(subject, str):
        raise JwtError("missing issuer or subject")
    if issuers and issuer not in issuers:
        raise JwtError("issuer not trusted")
    signature = _b64decode(parts[2])
    if not verify_signature(issuer, prefix, f"{parts[0]}.{parts[1]}".encode(), signature):
        raise JwtError("bad signature")
    exp, nbf = claims.get("exp"), claims.get("nbf")
    return Claims(
        issuer=issuer,
        subject=subject,
        kind=kind,
        nats=nats,
        expires=float(exp) if isinstance(exp, int | float) and exp > 0 else None,
        not_before=float(nbf) if isinstance(nbf, int | float) and nbf > 0 else None,
        name=str(claims.get("name", "")),
    )


def current(claims: Claims, now: float | None = None) -> bool:
    """Not expired and already valid."""
    t = time.time() if now is None else now
    if claims.expires is not None and t > claims.expires:
        return False
    return claims.not_before is None or t >= claims.not_before


def _direction(value: Any) -> SubjectPermission | None:
    if not isinstance(value, dict):
        return None
    allow = value.get("allow")
    deny = value.get("deny")
    if not allow and not deny:
        return None
    return SubjectPermission(
        allow=tuple(allow) if allow else None, deny=tuple(deny) if deny else ()
    )


def user_permissions(nats: dict[str, Any]) -> Permissions | None:
    """A user JWT's pub/sub/resp as permissions (None: none)."""
    publish = _direction(nats.get("pub"))
    subscribe = _direction(nats.get("sub"))
    resp = nats.get("resp")
    responses = None
    if isinstance(resp, dict):
        ttl = resp.get("ttl", 0)
        responses = ResponsePermission(
            int(resp.get("max", 1) or 1), float(ttl) / 1e9 if ttl else 120.0
        )
        if publish is None:
            publish = SubjectPermission(allow=())
        elif publish.allow is None:
            publish = SubjectPermission(allow=(), deny=publish.deny)
    if publish is None and subscribe is None and responses is None:
        return None
    return Permissions(publish, subscribe, responses)
