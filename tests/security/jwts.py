"""Operator, account and user JWTs as nats-io/jwt v2 writes them, for the operator-mode tests
(nsc is not needed: a JWT is two JSON documents and an nkey signature)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import nkeys


@dataclass
class Key:
    seed: bytes
    public: str

    def sign(self, data: bytes) -> bytes:
        return bytes(nkeys.from_seed(self.seed).sign(data))


def new_key(prefix: int) -> Key:
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    return Key(seed, nkeys.from_seed(seed).public_key.decode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def encode(issuer: Key, subject: str, name: str, nats: dict[str, Any], **extra: Any) -> str:
    claims: dict[str, Any] = {"iat": int(time.time()), "iss": issuer.public, "name": name}
    claims.update(sub=subject, nats={**nats, "version": 2}, **extra)
    # jwt v2's jti: the base32 SHA-512/256 of the claims without it.
    digest = hashlib.new("sha512_256", json.dumps(claims).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    signature = _b64(issuer.sign(f"{header}.{body}".encode()))
    return f"{header}.{body}.{signature}"


def operator_jwt(operator: Key) -> str:
    return encode(operator, operator.public, "OP", {"type": "operator"})


def account_jwt(operator: Key, account: Key, name: str, *, jetstream: bool = True) -> str:
    limits: dict[str, Any] = {
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": True, "conn": -1, "leaf": -1,
    }  # fmt: skip
    if jetstream:
        limits.update(mem_storage=-1, disk_storage=-1, streams=-1, consumer=-1)
    nats = {"type": "account", "limits": limits, "default_permissions": {"pub": {}, "sub": {}}}
    return encode(operator, account.public, name, nats)


def user_jwt(
    account: Key, user: Key, name: str, permissions: dict[str, Any] | None = None, **extra: Any
) -> str:
    nats = {"type": "user", "subs": -1, "data": -1, "payload": -1, **(permissions or {})}
    return encode(account, user.public, name, nats, **extra)


def connect_line(token: str, user: Key, nonce: str) -> bytes:
    sig = _b64(user.sign(nonce.encode()))
    return b"CONNECT " + json.dumps({"verbose": False, "jwt": token, "sig": sig}).encode() + b"\r\n"


def creds(token: str, user: Key) -> str:
    return (
        f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user.seed.decode()}\n------END USER NKEY SEED------\n"
    )
