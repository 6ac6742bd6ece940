"""The auth part of a configuration as typed specs, and what nats-server refuses in it."""

from __future__ import annotations

import pytest

from infinistream.natsconf import ConfigError, loads
from infinistream.security.config import (
    AccountSpec,
    JetStreamLimits,
    UserSpec,
    parse_auth,
)
from infinistream.security.identity import (
    GLOBAL_ACCOUNT,
    Permissions,
    ResponsePermission,
    SubjectPermission,
)

ACCOUNTS = """
accounts {
  ORDERS: {
    users: [
      {user: alice, password: a1,
       permissions: {publish: {allow: ["orders.>"], deny: "orders.secret"},
                     subscribe: "_INBOX.>", allow_responses: {max: 3, expires: "1s"}}}
    ]
    jetstream: {max_mem: 1MB, max_file: 2G, max_streams: 3, max_consumers: 4,
                max_ack_pending: 5, max_bytes_required: true}
  }
  BILLING: { users: [{user: bob, password: b1}], jetstream: enabled }
  EMPTY: {}
}
system_account: BILLING
"""


def test_accounts_users_permissions_and_limits() -> None:
    auth = parse_auth(loads(ACCOUNTS))
    alice_perms = Permissions(
        publish=SubjectPermission(allow=("orders.>",), deny=("orders.secret",)),
        subscribe=SubjectPermission(allow=("_INBOX.>",)),
        responses=ResponsePermission(max_msgs=3, expires=1.0),
    )
    alice = UserSpec("alice", "a1", None, "ORDERS", alice_perms)
    bob = UserSpec("bob", "b1", None, "BILLING", None)
    assert auth.accounts == (
        AccountSpec("ORDERS", (alice,), True, JetStreamLimits(2**20, 2 * 10**9, 3, 4, 5, True)),
        AccountSpec("BILLING", (bob,), True, JetStreamLimits()),
        AccountSpec("EMPTY", (), False, JetStreamLimits()),
    )
    assert auth.users == (alice, bob)
    assert auth.system_account == "BILLING"
    assert auth.required


def test_authorization_block_users_are_in_the_global_account() -> None:
    auth = parse_auth(
        loads("authorization { users: [{user: u, password: p}], timeout: 1.5 }\nno_auth_user: u")
    )
    assert auth.users == (UserSpec("u", "p", None, GLOBAL_ACCOUNT, None),)
    assert (auth.timeout, auth.no_auth_user) == (1.5, "u")


def test_no_auth_config_requires_nothing() -> None:
    auth = parse_auth(loads("port: 4222"))
    assert not auth.required
    assert auth.system_account == "$SYS"


def test_allow_responses_turns_off_the_blanket_publish_allow() -> None:
    auth = parse_auth(
        loads("authorization { users: [{user: u, permissions: {allow_responses: true}}] }")
    )
    perms = auth.users[0].permissions
    assert perms == Permissions(
        publish=SubjectPermission(allow=()), responses=ResponsePermission(1, 120.0)
    )


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        (
            "accounts {\n A: {users: [{user: x, password: 1}]}\n"
            " B: {users: [{user: x, password: 2}]}\n}",
            'Duplicate user "x" detected',
            3,
        ),
        ("authorization {\n user: a\n token: t\n}", "Cannot have a user/pass and token", 1),
        (
            "authorization { user: a, users: [{user: b}] }",
            "Can not have a single user/pass and a users array",
            1,
        ),
        ("accounts { $G: {} }", '"$G" is a Reserved Account', 1),
        ("accounts { A: { jetstream: maybe } }", "Expected 'enabled' or 'disabled'", 1),
        ("accounts {\n A: {\n  mappings: {}\n }\n}", 'unknown field "mappings"', 3),
        (
            "accounts {\n A: {\n  exports: [{service: 3}]\n }\n}",
            "Expected service name to be string, got int64",
            3,
        ),
        (
            "accounts {\n A: {\n  imports: [5]\n }\n}",
            "Import Items should be a map with type entry, got int64",
            3,
        ),
        (
            "accounts {\n A: {\n  imports: [{service: {account: B}}]\n }\n B: {}\n}",
            "Expect an account name and a subject",
            3,
        ),
        (
            'accounts {\n A: {exports: [{stream: "a.>", accounts: [Z]}]}\n}',
            '"Z" account not defined for stream export',
            1,
        ),
        (
            'accounts {\n A: {exports: [{service: "a.>", accounts: [C]}]}\n'
            ' B: {imports: [{service: {account: A, subject: "a.b"}}]}\n C: {}\n}',
            'Error adding service import "a.b": service import not authorized',
            1,
        ),
        (
            'accounts {\n A: {exports: [{stream: "a.b"}]}\n'
            ' B: {imports: [{stream: {account: A, subject: "a.>"}}]}\n}',
            'Error adding stream import "a.>": stream import not authorized',
            1,
        ),
        (
            'accounts {\n A: {exports: [{stream: "a.>"}]}\n'
            ' B: {imports: [{stream: {account: A, subject: "a.>"}, prefix: "x.*"}]}\n}',
            "stream import prefix can not contain wildcard tokens",
            1,
        ),
        (
            'accounts {\n B: {imports: [{stream: {account: Q, subject: "a"}}]}\n}',
            '"Q" account not defined for stream import',
            1,
        ),
        ("authorization {\n  tokn: x\n}", 'unknown field "tokn"', 2),
        (
            "authorization { users: [{user: u, permissions: {publish: {allw: x}}}] }",
            'Unknown field name "allw" parsing subject permissions',
            1,
        ),
        (
            'authorization { users: [{user: u, permissions: {publish: "a..b"}}] }',
            'subject "a..b" is not a valid subject',
            1,
        ),
        ("no_auth_user: ghost", 'no_auth_user: "ghost" not present as user or nkey', 1),
        (
            "accounts { A: { jetstream: { max_streams: lots } } }",
            'Expected a parseable size for "max_streams", got lots',
            1,
        ),
        (
            "authorization { users: [{nkey: UNOTAKEY}] }",
            "Not a valid public nkey for a user",
            1,
        ),
    ],
)
def test_refused_with_nats_servers_words_and_the_line(text: str, message: str, line: int) -> None:
    with pytest.raises(ConfigError) as err:
        parse_auth(loads(text), path="x.conf")
    assert message in err.value.message
    assert err.value.line == line
    assert str(err.value).startswith(f"x.conf:{line}:")


def test_operator_mode_accounts_from_the_preload() -> None:
    import nkeys
    from jwts import account_jwt, new_key, operator_jwt

    operator = new_key(nkeys.PREFIX_BYTE_OPERATOR)
    account = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    text = (
        f'operator: "{operator_jwt(operator)}"\nresolver: MEMORY\n'
        f'resolver_preload: {{ {account.public}: "{account_jwt(operator, account, "A")}" }}\n'
    )
    auth = parse_auth(loads(text))
    assert auth.required
    assert operator.public in auth.operator_keys
    assert [a.name for a in auth.accounts] == [account.public]
    assert auth.accounts[0].jetstream

    # An account JWT signed by another operator is refused, with the line.
    other = new_key(nkeys.PREFIX_BYTE_OPERATOR)
    forged = (
        f'operator: "{operator_jwt(operator)}"\nresolver: MEMORY\n'
        f'resolver_preload: {{\n {account.public}: "{account_jwt(other, account, "A")}"\n}}\n'
    )
    with pytest.raises(ConfigError) as err:
        parse_auth(loads(forged))
    assert (err.value.message, err.value.line) == ("account JWT: issuer not trusted", 4)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resolver: MEMORY", '"resolver" requires "operator"'),
        ("operator: eyJ.x.y\nresolver: URL(http://x)", "operator JWT: not a JWT"),
    ],
)
def test_operator_mode_refusals(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_auth(loads(text))
    assert err.value.message == message
