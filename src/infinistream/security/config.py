"""The `authorization`, `accounts`, `no_auth_user` and `system_account` keys of a nats-server
configuration, as typed specs (nats-server's server/opts.go parseAuthorization, parseUsers,
parseAccounts, parseUserPermissions and parseJetStreamForAccount).

Errors are nats-server's words, raised as `natsconf.ConfigError` with the file and line of the
offending key when the parser recorded them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from infinistream.natsconf import ConfigError, key_position, parse_duration
from infinistream.security.exports import Export, Import, check_links, parse_exports, parse_imports
from infinistream.security.identity import (
    GLOBAL_ACCOUNT,
    SYSTEM_ACCOUNT,
    Permissions,
    ResponsePermission,
    SubjectPermission,
)

# nats-server's const.go: allow_responses without numbers.
DEFAULT_RESPONSE_MAX_MSGS = 1
DEFAULT_RESPONSE_EXPIRES = 120.0
DEFAULT_AUTH_TIMEOUT = 2.0
# auth.go isBcrypt: a password (or token) of this shape is a bcrypt hash.
BCRYPT_RE = re.compile(r"^\$2[abxy]\$\d{2}\$.*", re.DOTALL)
# Go's bcrypt refuses hashes with a cost outside these bounds.
BCRYPT_MIN_COST, BCRYPT_MAX_COST = 4, 31


def is_bcrypt(password: str) -> bool:
    return password.startswith("$") and BCRYPT_RE.match(password) is not None


@dataclass(frozen=True, slots=True)
class UserSpec:
    """A configured user: a name and password, or an nkey (a public user key)."""

    name: str
    password: str | None = None
    nkey: str | None = None
    account: str = GLOBAL_ACCOUNT
    permissions: Permissions | None = None

    @property
    def key(self) -> str:
        """What identifies the user: its name, or its nkey."""
        return self.nkey or self.name


@dataclass(frozen=True, slots=True)
class JetStreamLimits:
    """An account's JetStream limits as configured; -1 is nats-server's "no limit"."""

    max_mem: int = -1
    max_file: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1
    max_bytes_required: bool = False


@dataclass(frozen=True, slots=True)
class AccountSpec:
    name: str
    users: tuple[UserSpec, ...] = ()
    # `jetstream: enabled` (or a limits block); False when the account does not say.
    jetstream: bool = False
    limits: JetStreamLimits = field(default_factory=JetStreamLimits)
    # What it offers other accounts, and what it takes from them (security.exports).
    exports: tuple[Export, ...] = ()
    imports: tuple[Import, ...] = ()


@dataclass(frozen=True, slots=True)
class TrustedAccount:
    """An account of operator mode (resolver_preload): its public key and the keys that may
    sign its users."""

    public_key: str
    signing_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """Everything that decides who may connect, and as whom."""

    # Every configured user, of every account (those of `authorization` are in $G).
    users: tuple[UserSpec, ...] = ()
    accounts: tuple[AccountSpec, ...] = ()
    # `authorization { user, password }` or --user/--pass: the single user of $G.
    user: str | None = None
    password: str | None = None
    token: str | None = None
    no_auth_user: str | None = None
    system_account: str = SYSTEM_ACCOUNT
    # authorization { timeout }; None: nats-server's default (2s, or the TLS timeout + 1s).
    timeout: float | None = None
    # Permissions of `authorization { permissions }` for the single user or token client.
    default_permissions: Permissions | None = None
    # Operator mode (decentralised JWT auth): the operator's keys (its own and its signing
    # keys) and the accounts of resolver_preload; users come with their own JWTs.
    operator_keys: tuple[str, ...] = ()
    jwt_accounts: tuple[TrustedAccount, ...] = ()

    @property
    def required(self) -> bool:
        """Whether a client must present credentials (or be the no_auth_user)."""
        return (
            bool(self.users)
            or self.user is not None
            or self.token is not None
            or bool(self.operator_keys)
        )

    def account(self, name: str) -> AccountSpec | None:
        for account in self.accounts:
            if account.name == name:
                return account
        return None

    def with_flags(self, user: str | None, password: str | None, token: str | None) -> AuthConfig:
        """The config with nats-server's --user/--pass/--auth flags on top (flags win)."""
        if user is None and password is None and token is None:
            return self
        return replace(
            self,
            user=user if user is not None else self.user,
            password=password if password is not None else self.password,
            token=token if token is not None else self.token,
        )


class _Errors:
    """Where an error is: the file and line of the key, when the parser recorded them."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def at(self, block: Mapping[str, Any], key: str, message: str) -> ConfigError:
        line, column = key_position(block, key)
        return ConfigError(message, line=line, column=column, path=self.path)


def parse_auth(conf: Mapping[str, Any], *, path: str | None = None) -> AuthConfig:
    """The auth part of a parsed configuration; ConfigError for what nats-server refuses."""
    errors = _Errors(path)
    block = _authorization(errors, conf)
    accounts, users = _accounts_and_users(errors, conf, block)
    known = {u.key for u in users}
    operator_keys: tuple[str, ...] = ()
    jwt_accounts: tuple[TrustedAccount, ...] = ()
    if "operator" in conf:
        if users or block.user or block.token:
            raise errors.at(
                conf, "operator", "operator mode does not take users or tokens in the config"
            )
        operator_keys, jwt_accounts, jwt_specs = _operator_mode(errors, conf, path)
        accounts = [*accounts, *jwt_specs]
        known.update(trusted.public_key for trusted in jwt_accounts)
    else:
        for key in ("resolver", "resolver_preload"):
            if key in conf:
                raise errors.at(conf, key, f'"{key}" requires "operator"')
    return AuthConfig(
        users=tuple(users),
        accounts=tuple(accounts),
        user=block.user,
        password=block.password,
        token=block.token,
        no_auth_user=_no_auth_user(errors, conf, known),
        system_account=_system_account(errors, conf, accounts),
        timeout=block.timeout,
        default_permissions=block.default_permissions,
        operator_keys=operator_keys,
        jwt_accounts=jwt_accounts,
    )


@dataclass(frozen=True, slots=True)
class _Authorization:
    """The `authorization` block: a single user or a token, or users of `$G`."""

    user: str | None = None
    password: str | None = None
    token: str | None = None
    timeout: float | None = None
    default_permissions: Permissions | None = None
    users: tuple[UserSpec, ...] = ()


def _authorization(errors: _Errors, conf: Mapping[str, Any]) -> _Authorization:
    auth = conf.get("authorization")
    if auth is None:
        return _Authorization()
    if not isinstance(auth, Mapping):
        raise errors.at(conf, "authorization", "Expected authorization to be a map/struct")
    user = password = token = None
    timeout: float | None = None
    default_permissions: Permissions | None = None
    auth_users: list[UserSpec] = []
    has_users_array = False
    for key, value in auth.items():
        k = key.lower()
        if k in ("user", "username"):
            user = _string(errors, auth, key, value)
        elif k in ("pass", "password"):
            password = _string(errors, auth, key, value)
        elif k == "token":
            token = _string(errors, auth, key, value)
        elif k == "timeout":
            timeout = _auth_timeout(errors, auth, key, value)
        elif k == "users":
            has_users_array = True
            auth_users = _users(errors, auth, key, value, GLOBAL_ACCOUNT)
        elif k in ("default_permission", "default_permissions", "permissions"):
            default_permissions = _permissions(errors, auth, key, value)
        else:
            raise errors.at(auth, key, f'unknown field "{key}"')
    if (user or password) and token:
        raise errors.at(conf, "authorization", "Cannot have a user/pass and token")
    if has_users_array and user:
        raise errors.at(conf, "authorization", "Can not have a single user/pass and a users array")
    if has_users_array and token:
        raise errors.at(conf, "authorization", "Can not have a token and a users array")
    if default_permissions is not None:
        auth_users = [_with_default(u, default_permissions) for u in auth_users]
    return _Authorization(
        user, password, token, timeout, default_permissions, users=tuple(auth_users)
    )


def _accounts_and_users(
    errors: _Errors, conf: Mapping[str, Any], block: _Authorization
) -> tuple[list[AccountSpec], list[UserSpec]]:
    """The configured accounts, and every user: those of `authorization`, then each
    account's (a user's name or nkey is taken once)."""
    accounts: list[AccountSpec] = []
    all_users: list[UserSpec] = list(block.users)
    seen = {u.key for u in block.users}
    if len(seen) != len(block.users):
        duplicate = _first_duplicate([u.key for u in block.users])
        raise errors.at(conf, "authorization", f'Duplicate user "{duplicate}" detected')
    raw_accounts = conf.get("accounts")
    if raw_accounts is not None:
        accounts = _accounts(errors, conf, raw_accounts)
        for account in accounts:
            if account.users and block.user:
                raise errors.at(conf, "accounts", "Can not have a single user/pass and accounts")
            if account.users and block.token:
                raise errors.at(conf, "accounts", "Can not have a token and accounts")
            for u in account.users:
                if u.key in seen:
                    body = raw_accounts[account.name]
                    raise errors.at(body, _key(body, "users"), f'Duplicate user "{u.key}" detected')
                seen.add(u.key)
                all_users.append(u)
    return accounts, all_users


def _no_auth_user(errors: _Errors, conf: Mapping[str, Any], known: set[str]) -> str | None:
    if "no_auth_user" not in conf:
        return None
    no_auth_user = _string(errors, conf, "no_auth_user", conf["no_auth_user"])
    if no_auth_user not in known:
        raise errors.at(
            conf,
            "no_auth_user",
            f'no_auth_user: "{no_auth_user}" not present as user or nkey in authorization '
            "block or account configuration",
        )
    return no_auth_user


def _system_account(errors: _Errors, conf: Mapping[str, Any], accounts: list[AccountSpec]) -> str:
    system_account = SYSTEM_ACCOUNT
    for key in ("system_account", "system"):
        if key in conf:
            system_account = _string(errors, conf, key, conf[key])
            if system_account != SYSTEM_ACCOUNT and not any(
                a.name == system_account for a in accounts
            ):
                # nats-server: the system account must be one of the configured accounts.
                raise errors.at(conf, key, "system account not found")
    return system_account


def _operator_mode(
    errors: _Errors, conf: Mapping[str, Any], path: str | None
) -> tuple[tuple[str, ...], tuple[TrustedAccount, ...], list[AccountSpec]]:
    """operator (JWTs or files), resolver: MEMORY, resolver_preload { ACCOUNT: JWT }."""
    import nkeys

    from infinistream.security import jwt

    raw = conf["operator"]
    tokens = raw if isinstance(raw, list) else [raw]
    operator_keys: list[str] = []
    for token in tokens:
        if not isinstance(token, str):
            raise errors.at(conf, "operator", "operator: expected a JWT or a file name")
        text = token
        if text.count(".") != 2 or not text.startswith("ey"):
            base = Path(path).parent if path else Path(".")
            try:
                text = (base / token).read_text().strip()
            except OSError as exc:
                raise errors.at(conf, "operator", f"error reading operator JWT: {exc}") from None
        try:
            claims = jwt.decode(
                text, kind="operator", issuers=(), prefix=nkeys.PREFIX_BYTE_OPERATOR
            )
        except jwt.JwtError as exc:
            raise errors.at(conf, "operator", f"operator JWT: {exc}") from None
        if claims.issuer != claims.subject:
            raise errors.at(conf, "operator", "operator JWT: not self-signed")
        operator_keys += [claims.subject, *_signing_keys(claims.nats)]
    resolver = conf.get("resolver")
    if not isinstance(resolver, str) or resolver.upper() != "MEMORY":
        raise errors.at(
            conf,
            "resolver" if "resolver" in conf else "operator",
            f"resolver {resolver!r} is not supported: only MEMORY (with resolver_preload)",
        )
    preload = conf.get("resolver_preload", {})
    if not isinstance(preload, Mapping):
        raise errors.at(conf, "resolver_preload", "resolver_preload: expected a map")
    trusted: list[TrustedAccount] = []
    specs: list[AccountSpec] = []
    for public_key, token in preload.items():
        if not isinstance(token, str):
            raise errors.at(preload, public_key, "expected an account JWT")
        try:
            claims = jwt.decode(
                token,
                kind="account",
                issuers=tuple(operator_keys),
                prefix=nkeys.PREFIX_BYTE_OPERATOR,
            )
        except jwt.JwtError as exc:
            raise errors.at(preload, public_key, f"account JWT: {exc}") from None
        if claims.subject != public_key:
            raise errors.at(preload, public_key, "account JWT: subject does not match its key")
        trusted.append(TrustedAccount(public_key, tuple(_signing_keys(claims.nats))))
        specs.append(_jwt_account(public_key, claims.nats))
    return tuple(operator_keys), tuple(trusted), specs


def _signing_keys(nats: Mapping[str, Any]) -> list[str]:
    keys = []
    for entry in nats.get("signing_keys") or []:
        if isinstance(entry, str):
            keys.append(entry)
        elif isinstance(entry, Mapping) and isinstance(entry.get("key"), str):
            keys.append(entry["key"])
    return keys


def _jwt_account(public_key: str, nats: Mapping[str, Any]) -> AccountSpec:
    """An account of operator mode: JetStream is on when its JWT gives it storage."""
    limits = nats.get("limits")
    limits = limits if isinstance(limits, Mapping) else {}

    def number(key: str) -> int:
        value = limits.get(key, -1)
        return int(value) if isinstance(value, int | float) else -1

    jetstream = number("mem_storage") != 0 or number("disk_storage") != 0
    jetstream = jetstream and ("mem_storage" in limits or "disk_storage" in limits)
    return AccountSpec(
        public_key,
        (),
        jetstream,
        JetStreamLimits(
            max_mem=number("mem_storage"),
            max_file=number("disk_storage"),
            max_streams=number("streams"),
            max_consumers=number("consumer"),
            max_ack_pending=number("max_ack_pending"),
            max_bytes_required=bool(limits.get("max_bytes_required", False)),
        ),
    )


def _key(block: Mapping[str, Any], lower: str) -> str:
    """The key of `block` that is `lower` regardless of case (nats-server's keys are)."""
    return next((k for k in block if k.lower() == lower), lower)


def _first_duplicate(keys: list[str]) -> str:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    return ""


def _with_default(user: UserSpec, permissions: Permissions) -> UserSpec:
    if user.permissions is not None:
        return user
    return UserSpec(user.name, user.password, user.nkey, user.account, permissions)


def _string(errors: _Errors, block: Mapping[str, Any], key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise errors.at(block, key, f"Expected {key!r} to be a string, got {value!r}")
    # `password: 1234` parses as a number; credentials are compared as text.
    return str(value)


def _auth_timeout(errors: _Errors, block: Mapping[str, Any], key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise errors.at(block, key, "error parsing authorization config, 'timeout' wrong type")
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise errors.at(
            block, key, f"error parsing authorization config, 'timeout' {exc}"
        ) from None


def _accounts(errors: _Errors, conf: Mapping[str, Any], raw: Any) -> list[AccountSpec]:
    if isinstance(raw, list):
        # A plain list of account names.
        names: list[str] = []
        for name in raw:
            name = _string(errors, conf, "accounts", name)
            if name == GLOBAL_ACCOUNT:
                raise errors.at(conf, "accounts", f'"{name}" is a Reserved Account')
            if name in names:
                raise errors.at(conf, "accounts", f"Duplicate Account Entry: {name}")
            names.append(name)
        return [AccountSpec(name) for name in names]
    if not isinstance(raw, Mapping):
        raise errors.at(conf, "accounts", "Expected map entries for accounts")
    accounts = []
    for name, body in raw.items():
        if not isinstance(body, Mapping):
            raise errors.at(raw, name, "Expected map entries for accounts")
        if name == GLOBAL_ACCOUNT:
            raise errors.at(raw, name, f'"{name}" is a Reserved Account')
        users: list[UserSpec] = []
        jetstream = False
        limits = JetStreamLimits()
        default_permissions: Permissions | None = None
        exports: list[Export] = []
        imports: list[Import] = []
        for key, value in body.items():
            k = key.lower()
            if k == "users":
                users = _users(errors, body, key, value, name)
            elif k == "jetstream":
                jetstream, limits = _account_jetstream(errors, body, key, value)
            elif k == "default_permissions":
                default_permissions = _permissions(errors, body, key, value)
            elif k == "exports":
                exports = parse_exports(errors, body, key, value)
            elif k == "imports":
                imports = parse_imports(errors, body, key, value)
            else:
                # mappings, nkey (accounts), limits: not supported here, and refused rather
                # than silently dropped.
                raise errors.at(body, key, f'unknown field "{key}"')
        if default_permissions is not None:
            users = [_with_default(u, default_permissions) for u in users]
        spec = AccountSpec(name, tuple(users), jetstream, limits, tuple(exports), tuple(imports))
        accounts.append(spec)
    # Imports are checked against the exports once every account is read, as nats-server.
    check_links(errors, conf, accounts)
    return accounts


_LIMIT_KEYS = {
    "max_memory": "max_mem",
    "max_mem": "max_mem",
    "mem": "max_mem",
    "memory": "max_mem",
    "max_store": "max_file",
    "max_file": "max_file",
    "max_disk": "max_file",
    "store": "max_file",
    "disk": "max_file",
    "max_streams": "max_streams",
    "streams": "max_streams",
    "max_consumers": "max_consumers",
    "consumers": "max_consumers",
    "max_ack_pending": "max_ack_pending",
}
_BYTES_REQUIRED_KEYS = ("max_bytes_required", "max_stream_bytes", "max_bytes")


def _account_jetstream(
    errors: _Errors, block: Mapping[str, Any], key: str, value: Any
) -> tuple[bool, JetStreamLimits]:
    if isinstance(value, bool):
        return value, JetStreamLimits()
    if isinstance(value, str):
        word = value.lower()
        if word in ("enabled", "enable"):
            return True, JetStreamLimits()
        if word in ("disabled", "disable"):
            return False, JetStreamLimits()
        raise errors.at(
            block, key, f"Expected 'enabled' or 'disabled' for string value, got '{value}'"
        )
    if not isinstance(value, Mapping):
        raise errors.at(block, key, f"Expected a map, bool or string for jetstream, got {value!r}")
    found: dict[str, Any] = {}
    for mk, mv in value.items():
        k = mk.lower()
        if k in _LIMIT_KEYS:
            if isinstance(mv, bool) or not isinstance(mv, int):
                raise errors.at(value, mk, f'Expected a parseable size for "{mk}", got {mv}')
            found[_LIMIT_KEYS[k]] = mv
        elif k in _BYTES_REQUIRED_KEYS:
            if not isinstance(mv, bool):
                raise errors.at(value, mk, f'Expected a parseable bool for "{mk}", got {mv}')
            found["max_bytes_required"] = mv
        else:
            raise errors.at(value, mk, f'unknown field "{mk}"')
    return True, JetStreamLimits(**found)


def _users(
    errors: _Errors, block: Mapping[str, Any], key: str, value: Any, account: str
) -> list[UserSpec]:
    if not isinstance(value, list):
        raise errors.at(block, key, f"Expected users field to be an array, got {value!r}")
    users = []
    for entry in value:
        if not isinstance(entry, Mapping):
            raise errors.at(block, key, f"Expected user entry to be a map/struct, got {entry!r}")
        name = password = nkey = None
        permissions: Permissions | None = None
        for uk, uv in entry.items():
            k = uk.lower()
            if k in ("user", "username"):
                name = _string(errors, entry, uk, uv)
            elif k in ("pass", "password"):
                password = _string(errors, entry, uk, uv)
            elif k == "nkey":
                nkey = _string(errors, entry, uk, uv)
            elif k in ("permission", "permissions", "authorization"):
                permissions = _permissions(errors, entry, uk, uv)
            else:
                raise errors.at(entry, uk, f'unknown field "{uk}"')
        if nkey is None and not name:
            raise errors.at(block, key, "User entry requires a user")
        if nkey is not None:
            if not _is_public_user_key(nkey):
                raise errors.at(entry, "nkey", "Not a valid public nkey for a user")
            if name or password:
                raise errors.at(entry, "nkey", "Nkey users do not take usernames or passwords")
            users.append(UserSpec(nkey, None, nkey, account, permissions))
        else:
            assert name is not None
            users.append(UserSpec(name, password, None, account, permissions))
    return users


def _is_public_user_key(key: str) -> bool:
    # A public user nkey: 'U' and 55 more base32 characters (its checksum is checked when a
    # client signs with it).
    return len(key) == 56 and key.startswith("U") and re.fullmatch(r"[A-Z2-7]+", key) is not None


def _permissions(errors: _Errors, block: Mapping[str, Any], key: str, value: Any) -> Permissions:
    if not isinstance(value, Mapping):
        raise errors.at(block, key, f"Expected permissions to be a map/struct, got {value!r}")
    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None
    responses: ResponsePermission | None = None
    for pk, pv in value.items():
        k = pk.lower()
        if k in ("pub", "publish", "import"):
            publish = _subject_permission(errors, value, pk, pv, queue=False)
        elif k in ("sub", "subscribe", "export"):
            subscribe = _subject_permission(errors, value, pk, pv, queue=True)
        elif k in ("publish_allow_responses", "allow_responses"):
            responses = _responses(errors, value, pk, pv)
        else:
            raise errors.at(value, pk, f'Unknown field "{pk}" parsing permissions')
    if responses is not None:
        # As nats-server: allowing responses turns off the blanket publish allow.
        if publish is None:
            publish = SubjectPermission(allow=())
        elif publish.allow is None:
            publish = SubjectPermission(allow=(), deny=publish.deny)
    return Permissions(publish, subscribe, responses)


def _subject_permission(
    errors: _Errors, block: Mapping[str, Any], key: str, value: Any, *, queue: bool
) -> SubjectPermission | None:
    if isinstance(value, Mapping):
        if not value:
            return None
        allow: tuple[str, ...] | None = None
        deny: tuple[str, ...] = ()
        for k, v in value.items():
            if k.lower() == "allow":
                allow = _subjects(errors, value, k, v, queue=queue)
            elif k.lower() == "deny":
                deny = _subjects(errors, value, k, v, queue=queue)
            else:
                raise errors.at(
                    value,
                    k,
                    f"Unknown field name \"{k}\" parsing subject permissions, only 'allow' or "
                    "'deny' are permitted",
                )
        return SubjectPermission(allow, deny)
    return SubjectPermission(allow=_subjects(errors, block, key, value, queue=queue))


def _subjects(
    errors: _Errors, block: Mapping[str, Any], key: str, value: Any, *, queue: bool
) -> tuple[str, ...]:
    if isinstance(value, str):
        subjects = [value]
    elif isinstance(value, list):
        subjects = []
        for item in value:
            if not isinstance(item, str):
                raise errors.at(block, key, "Subject in permissions array cannot be cast to string")
            subjects.append(item)
    else:
        raise errors.at(
            block,
            key,
            "Expected subject permissions to be a subject, or array of subjects, got "
            f"{type(value).__name__}",
        )
    for subject in subjects:
        problem = _subject_problem(subject, queue=queue)
        if problem:
            raise errors.at(block, key, problem)
    return tuple(subjects)


def _valid_subject(subject: str) -> bool:
    # server/sublist.go IsValidSubject: no empty tokens, no whitespace, '>' only last.
    if not subject or any(c.isspace() for c in subject):
        return False
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if not token or (token == ">" and i != len(tokens) - 1):
            return False
    return True


def _subject_problem(subject: str, *, queue: bool) -> str | None:
    if _valid_subject(subject):
        return None
    if not queue:
        return f'subject "{subject}" is not a valid subject'
    # A subscribe permission may name a queue group: "subject queue".
    parts = subject.split()
    if len(parts) != 2:
        return f'subject "{subject}" is not a valid subject'
    if not _valid_subject(parts[0]):
        return f'subject "{parts[0]}" is not a valid subject'
    if not _valid_subject(parts[1]):
        return f'queue "{parts[1]}" is not a valid queue'
    return None


def _responses(
    errors: _Errors, block: Mapping[str, Any], key: str, value: Any
) -> ResponsePermission | None:
    if isinstance(value, bool):
        if not value:
            return None
        return ResponsePermission(DEFAULT_RESPONSE_MAX_MSGS, DEFAULT_RESPONSE_EXPIRES)
    if not isinstance(value, Mapping):
        raise errors.at(
            block, key, "error parsing response permissions, expected a boolean or a map"
        )
    max_msgs = DEFAULT_RESPONSE_MAX_MSGS
    expires = DEFAULT_RESPONSE_EXPIRES
    for rk, rv in value.items():
        k = rk.lower()
        if k in ("max", "max_msgs", "max_messages", "max_responses"):
            if isinstance(rv, bool) or not isinstance(rv, int):
                raise errors.at(value, rk, f'Expected an integer for "{rk}", got {rv!r}')
            # 0 means the default; negative means no limit.
            if rv != 0:
                max_msgs = rv
        elif k in ("expires", "expiration", "ttl"):
            if not isinstance(rv, str):
                raise errors.at(value, rk, "error parsing expires, not a duration string")
            try:
                seconds = parse_duration(rv)
            except ValueError as exc:
                raise errors.at(value, rk, f"error parsing expires: {exc}") from None
            if seconds != 0:
                expires = seconds
        else:
            raise errors.at(value, rk, f'Unknown field "{rk}" parsing permissions')
    return ResponsePermission(max_msgs, expires)
