"""Checking a CONNECT against the configured credentials (nats-server's server/auth.go).

The order is nats-server's: a configured token, then the single user, then nkeys (a signed
nonce), then users by name and password; a CONNECT without credentials is the `no_auth_user`
when one is configured. Passwords that look like bcrypt hashes (`$2a$...`) are checked with
bcrypt; others are compared in constant time.

A bcrypt check takes a core for tens or hundreds of milliseconds, so with bcrypt secrets
configured a CONNECT is checked by `check`: on a small pool of threads (bcrypt lets go of the
GIL), after the client address's failed attempts allow it (security/attempts.py), while the
event loop goes on serving everyone else.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from infinistream.security.attempts import FailedAttempts
from infinistream.security.config import (
    BCRYPT_MAX_COST,
    BCRYPT_MIN_COST,
    DEFAULT_AUTH_TIMEOUT,
    AuthConfig,
    UserSpec,
    is_bcrypt,
)
from infinistream.security.identity import ANONYMOUS, GLOBAL_ACCOUNT, Identity

log = logging.getLogger(__name__)

# Threads for password checks: two keep a check from waiting behind another on two cores,
# and leave the event loop a core when both are busy.
PASSWORD_THREADS = 2


class Authenticator:
    """Who a CONNECT is, under the current configuration; `reload` swaps the configuration
    (SIGHUP), and connections authenticated before keep their identity until re-checked."""

    def __init__(self, config: AuthConfig, attempts: FailedAttempts | None = None) -> None:
        self.config = config
        self._users: dict[str, UserSpec] = {}
        self._nkeys: dict[str, UserSpec] = {}
        self.slow = False
        self.attempts = attempts if attempts is not None else FailedAttempts()
        self._threads: ThreadPoolExecutor | None = None
        self.reload(config)

    def reload(self, config: AuthConfig) -> None:
        self.config = config
        self._users = {u.name: u for u in config.users if u.nkey is None}
        self._nkeys = {u.nkey: u for u in config.users if u.nkey is not None}
        # Operator mode: which key may sign users, and of which account.
        self._signers = {
            key: account.public_key
            for account in config.jwt_accounts
            for key in (account.public_key, *account.signing_keys)
        }
        secrets = [config.password, config.token, *(u.password for u in config.users)]
        # Whether a CONNECT may cost a bcrypt check: then it is checked off the event loop.
        self.slow = any(secret is not None and is_bcrypt(secret) for secret in secrets)
        for secret in secrets:
            if secret is not None and is_bcrypt(secret) and not _bcrypt_cost_ok(secret):
                # As nats-server, such a user can never log in; say so at load, not on each try.
                log.warning(
                    "a bcrypt password or token has a cost outside %d-%d: nobody can "
                    "authenticate with it",
                    BCRYPT_MIN_COST,
                    BCRYPT_MAX_COST,
                )

    @property
    def required(self) -> bool:
        return self.config.required

    @property
    def timeout(self) -> float:
        """How long a client has to send its CONNECT when auth is required."""
        timeout = self.config.timeout
        return DEFAULT_AUTH_TIMEOUT if timeout is None else timeout

    @property
    def uses_nkeys(self) -> bool:
        """Whether INFO must carry a nonce for clients to sign."""
        return bool(self._nkeys) or bool(self.config.operator_keys)

    def authenticate(
        self,
        options: Mapping[str, Any],
        nonce: bytes | None = None,
        certificate_names: Sequence[str] | None = None,
    ) -> Identity | None:
        """The identity of a CONNECT's credentials; None: an Authorization Violation.

        `certificate_names` (TLS verify_and_map) are the client certificate's names: with
        users configured, the first that names a user is who the client is, and no password
        is asked for.
        """
        config = self.config
        if not config.required:
            return ANONYMOUS
        if config.operator_keys:
            return self._jwt_user(options, nonce)
        if certificate_names is not None and self._users:
            for cert_name in certificate_names:
                spec = self._users.get(cert_name)
                if spec is not None:
                    return _identity(spec)
            return None
        if config.token is not None:
            if _password_ok(config.token, options.get("auth_token")):
                return Identity(GLOBAL_ACCOUNT, None, config.default_permissions)
            return None
        if config.user is not None:
            if _same(options.get("user"), config.user) and _password_ok(
                config.password, options.get("pass")
            ):
                return Identity(GLOBAL_ACCOUNT, config.user, config.default_permissions)
            return None
        nkey = options.get("nkey")
        if self._nkeys and isinstance(nkey, str) and nkey:
            spec = self._nkeys.get(nkey)
            if spec is None or nonce is None or not _signed(nkey, nonce, options.get("sig")):
                return None
            return _identity(spec)
        name = options.get("user")
        if isinstance(name, str) and name:
            spec = self._users.get(name)
            if spec is None or not _password_ok(spec.password, options.get("pass")):
                return None
            return _identity(spec)
        if config.no_auth_user is not None and not _has_credentials(options):
            spec = self._users.get(config.no_auth_user) or self._nkeys.get(config.no_auth_user)
            if spec is not None:
                return _identity(spec)
        return None

    async def check(
        self,
        options: Mapping[str, Any],
        address: str,
        nonce: bytes | None = None,
        certificate_names: Sequence[str] | None = None,
    ) -> Identity | None:
        """`authenticate`, on the password threads once the failures of the client's address
        allow another try; a failure spends one of them."""
        attempts = self.attempts
        wait = attempts.wait(address)
        try:
            if wait > 0:
                await asyncio.sleep(wait)
        finally:
            attempts.done_waiting(address)
        if self._threads is None:
            self._threads = ThreadPoolExecutor(PASSWORD_THREADS, thread_name_prefix="password")
        identity = await asyncio.get_running_loop().run_in_executor(
            self._threads, self.authenticate, options, nonce, certificate_names
        )
        if identity is None:
            attempts.failed(address)
        return identity

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None

    def _jwt_user(self, options: Mapping[str, Any], nonce: bytes | None) -> Identity | None:
        """Operator mode: a user JWT signed for a known account, current, and the nonce
        signed by the user's key."""
        token = options.get("jwt")
        if not isinstance(token, str) or nonce is None:
            return None
        import nkeys

        from infinistream.security import jwt

        try:
            claims = jwt.decode(
                token,
                kind="user",
                issuers=tuple(self._signers),
                prefix=nkeys.PREFIX_BYTE_ACCOUNT,
            )
        except jwt.JwtError as exc:
            log.info("user JWT refused: %s", exc)
            return None
        account = self._signers[claims.issuer]
        issuer_account = claims.nats.get("issuer_account")
        if issuer_account and issuer_account != account:
            return None
        if not jwt.current(claims) or not _signed(claims.subject, nonce, options.get("sig")):
            return None
        return Identity(account, claims.subject, jwt.user_permissions(claims.nats))

    def moved(self, identity: Identity) -> bool:
        """After a reload: whether a connected client's user is gone or in another account
        (nats-server then closes it)."""
        if identity.user is None:
            return False
        if self.config.operator_keys:
            return identity.account not in set(self._signers.values())
        return self.account_of(identity.user) != identity.account

    def account_of(self, user: str) -> str | None:
        """The account a user (a name or an nkey) is in now; None if it is not configured."""
        spec = self._users.get(user) or self._nkeys.get(user)
        if spec is not None:
            return spec.account
        if self.config.user is not None and user == self.config.user:
            return GLOBAL_ACCOUNT
        return None


def _identity(spec: UserSpec) -> Identity:
    return Identity(spec.account, spec.key, spec.permissions)


def _has_credentials(options: Mapping[str, Any]) -> bool:
    return any(options.get(k) for k in ("user", "pass", "auth_token", "nkey", "jwt", "sig"))


def _same(given: Any, expected: str) -> bool:
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def _password_ok(expected: str | None, given: Any) -> bool:
    if expected is None:
        # A user configured without a password: nats-server compares with "".
        expected = ""
    if given is None:
        given = ""
    if not isinstance(given, str):
        return False
    if is_bcrypt(expected):
        if not _bcrypt_cost_ok(expected):
            return False
        import bcrypt

        try:
            return bool(bcrypt.checkpw(given.encode(), expected.encode()))
        except ValueError:
            return False  # a malformed hash: nobody matches it
    return hmac.compare_digest(given.encode(), expected.encode())


def _bcrypt_cost_ok(hashed: str) -> bool:
    try:
        cost = int(hashed[4:6])
    except ValueError:
        return False
    return BCRYPT_MIN_COST <= cost <= BCRYPT_MAX_COST


def _signed(public_key: str, nonce: bytes, sig: Any) -> bool:
    """Whether `sig` (base64url, as nats clients send it) is the nkey's signature of the nonce."""
    if not isinstance(sig, str):
        return False
    try:
        raw = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
    except (binascii.Error, ValueError):
        try:
            raw = base64.b64decode(sig + "=" * (-len(sig) % 4))
        except (binascii.Error, ValueError):
            return False
    import nkeys

    from infinistream.security import jwt

    return jwt.verify_signature(public_key, nkeys.PREFIX_BYTE_USER, nonce, raw)
