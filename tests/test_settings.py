"""Settings from nats-server's flags and config file syntax, parsed the way `infinistream serve`
parses them (without starting anything)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from infinistream.pool import ROLES
from infinistream.settings import (
    DEFAULT_PORT,
    Settings,
    SettingsError,
    add_serve_arguments,
    normalize_go_flags,
    settings_from_args,
)


def parse(*argv: str) -> Settings:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_serve_arguments(parser)
    return settings_from_args(parser.parse_args(normalize_go_flags(list(argv))))


def conf(tmp_path: Path, text: str) -> str:
    path = tmp_path / "server.conf"
    path.write_text(text)
    return str(path)


# -- defaults and derived values ----------------------------------------------------------


def test_defaults_are_nats_servers() -> None:
    s = parse()
    assert (s.host, s.port, s.http_port) == ("0.0.0.0", DEFAULT_PORT, 0)
    assert s.max_payload == 1024 * 1024
    assert (s.ping_interval, s.max_pings_out) == (120.0, 2)
    assert not s.auth_required


def test_defaults_of_our_own_settings() -> None:
    s = parse()
    assert s.group == "default"
    assert s.batch_bytes == 4 * 1024 * 1024


def test_the_put_budget_defaults_to_the_object_stores() -> None:
    # S3 bills every PUT: 250 ms, a budget of 4 PUTs/s. A local directory bills nothing: 250 us.
    assert parse().put_interval == 0.00025
    assert parse("--objects", "memory://").put_interval == 0.00025
    assert parse("--objects", "s3://bucket/prefix").put_interval == 0.25
    # An explicit linger is the budget whatever the store.
    assert parse("--objects", "s3://b/p", "--linger", "20ms").put_interval == 0.02
    assert parse("--linger", "1s").put_interval == 1.0


def test_store_dir_holds_objects_and_metadata_by_default(tmp_path: Path) -> None:
    s = parse("-sd", str(tmp_path))
    assert s.objects_url == (tmp_path / "objects").as_uri()
    assert s.metadata_url == f"sqlite:///{str(tmp_path / 'meta.db').lstrip('/')}"


def test_objects_and_metadata_urls_override_the_store_dir(tmp_path: Path) -> None:
    s = parse("-sd", str(tmp_path), "--objects", "s3://b/p", "--metadata", "sqlite:///m.db")
    assert (s.objects_url, s.metadata_url) == ("s3://b/p", "sqlite:///m.db")


# -- flags as nats-server takes them ------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["-p", "4333"],
        ["-p=4333"],
        ["--port", "4333"],
        ["--port=4333"],
        ["-port", "4333"],
        ["-port=4333"],
    ],
    ids=lambda a: " ".join(a),
)
def test_port_flag_in_every_go_style(argv: list[str]) -> None:
    assert parse(*argv).port == 4333


@pytest.mark.parametrize(
    "argv",
    [["-a", "127.0.0.2"], ["--addr=127.0.0.2"], ["--net", "127.0.0.2"], ["-a=127.0.0.2"]],
    ids=lambda a: " ".join(a),
)
def test_address_flag(argv: list[str]) -> None:
    assert parse(*argv).host == "127.0.0.2"


@pytest.mark.parametrize(
    "argv", [["-m", "8222"], ["--http_port=8222"], ["-m=8222"], ["-http_port", "8222"]]
)
def test_monitor_port_flag(argv: list[str]) -> None:
    assert parse(*argv).http_port == 8222


def test_monitor_random_port_is_minus_one() -> None:
    assert parse("-m", "-1").http_port == -1


@pytest.mark.parametrize(
    "argv",
    [["-sd", "/data/x"], ["--store_dir=/data/x"], ["-sd=/data/x"], ["-store_dir", "/data/x"]],
)
def test_store_dir_flag(argv: list[str]) -> None:
    assert parse(*argv).store_dir == "/data/x"


@pytest.mark.parametrize("argv", [["-js"], ["--jetstream"], ["-jetstream"]])
def test_jetstream_flag_is_accepted(argv: list[str]) -> None:
    parse(*argv)


@pytest.mark.parametrize("argv", [["-n", "a1"], ["--name", "a1"], ["--server_name=a1"]])
def test_server_name_flag(argv: list[str]) -> None:
    assert parse(*argv).server_name == "a1"


def test_user_and_password_flags_require_auth() -> None:
    s = parse("--user", "alice", "--pass", "s3cret")
    assert (s.user, s.password, s.token) == ("alice", "s3cret", None)
    assert s.auth_required


def test_auth_flag_sets_a_token() -> None:
    s = parse("--auth=t0ken")
    assert s.token == "t0ken"
    assert s.auth_required


def test_our_flags() -> None:
    s = parse("--group", "g1", "--linger", "50ms", "--batch-bytes", "64KB")
    assert (s.group, s.linger, s.batch_bytes) == ("g1", 0.05, 64 * 1024)


# -- the config file ----------------------------------------------------------------------


def test_config_file_in_nats_server_syntax(tmp_path: Path) -> None:
    path = conf(
        tmp_path,
        """
        # nats-server syntax: comments, `:`/`=`/space, sizes, blocks
        listen: 127.0.0.3:4444
        http_port = 8333
        max_payload: 2MB
        ping_interval: "5s"
        ping_max: 4
        jetstream {
            store_dir: "/var/lib/istream"
        }
        infinistream {
            objects: "s3://bucket/prefix"
            metadata: "sqlite:///var/lib/istream/meta.db"
            linger: 100ms
            batch_bytes: 1MB
            group: tenant1
        }
        authorization {
            user: bob
            password: "pw"
        }
        """,
    )
    s = parse("-c", path)
    assert (s.host, s.port, s.http_port) == ("127.0.0.3", 4444, 8333)
    assert s.max_payload == 2 * 1024 * 1024
    assert (s.ping_interval, s.max_pings_out) == (5.0, 4)
    assert s.store_dir == "/var/lib/istream"
    assert (s.objects_url, s.metadata_url) == (
        "s3://bucket/prefix",
        "sqlite:///var/lib/istream/meta.db",
    )
    assert (s.linger, s.batch_bytes, s.group) == (0.1, 1024 * 1024, "tenant1")
    assert (s.auth.user, s.auth.password) == ("bob", "pw")


def test_config_port_key_and_token(tmp_path: Path) -> None:
    s = parse("--config", conf(tmp_path, "port: 4555\nauthorization { token: abc }\n"))
    assert (s.port, s.auth.token) == (4555, "abc")


@pytest.mark.parametrize(("value", "seconds"), [("3", 3.0), ("0.5", 0.5), ('"250ms"', 0.25)])
def test_config_authorization_timeout(tmp_path: Path, value: str, seconds: float) -> None:
    path = conf(tmp_path, f"authorization {{ token: abc, timeout: {value} }}\n")
    assert parse("-c", path).auth_timeout == seconds


def test_auth_timeout_defaults_to_nats_servers_two_seconds() -> None:
    assert parse().auth_timeout == 2.0


def test_config_listen_may_be_just_a_port(tmp_path: Path) -> None:
    assert parse("-c", conf(tmp_path, "listen: 4666\n")).port == 4666


def test_numeric_password_in_config_is_text(tmp_path: Path) -> None:
    s = parse("-c", conf(tmp_path, "authorization { user: bob, password: 1234 }\n"))
    assert s.auth.password == "1234"


def test_flags_override_the_config_file(tmp_path: Path) -> None:
    path = conf(tmp_path, "port: 4555\ninfinistream { group: fromfile, linger: 1s }\n")
    s = parse("-c", path, "-p", "4777", "--group", "fromflag")
    assert (s.port, s.group, s.linger) == (4777, "fromflag", 1.0)


def test_flag_order_does_not_matter_for_config_precedence(tmp_path: Path) -> None:
    path = conf(tmp_path, "port: 4555\n")
    assert parse("-p", "4777", "-c", path).port == 4777


# -- errors: SettingsError with a message, never another exception ------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["-p", "70000"], "port"),
        (["--linger", "abc"], "duration"),
        (["--linger", "0s"], "linger"),
        (["--batch-bytes", "xx"], "size"),
        (["--batch-bytes", "10"], "batch_bytes"),
        (["--group", "a/b"], "group"),
        (["--group", "a@b"], "group"),
        (["--group", ""], "group"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_bad_flag_values_are_settings_errors(argv: list[str], needle: str) -> None:
    with pytest.raises(SettingsError, match=needle):
        parse(*argv)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('port: "abc"\n', "port"),
        ('listen: "127.0.0.1:abc"\n', "listen"),
        ('ping_interval: "zz"\n', "duration"),
        ("infinistream { linger: zz }\n", "duration"),
        ("infinistream { nope: 1 }\n", "nope"),
        ("infinistream { group: [1, 2] }\n", "group"),
        ("max_payload: 0\n", "max_payload"),
        ("port: 4222\nlisten {\n", "never closed"),
    ],
    ids=[
        "port-not-int",
        "listen-port-not-int",
        "bad-ping-interval",
        "bad-linger",
        "unknown-key",
        "group-not-text",
        "zero-max-payload",
        "syntax-error",
    ],
)
def test_bad_config_files_are_settings_errors(tmp_path: Path, text: str, needle: str) -> None:
    path = conf(tmp_path, text)
    with pytest.raises(SettingsError, match=needle):
        parse("-c", path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lisen: 4222\n", 'server.conf:1:1: unknown field "lisen" (did you mean "listen"?)'),
        (
            "port: 4222\ninfinistream {\n  group: a\n  lingr: 5ms\n}\n",
            """server.conf:4:3: unknown infinistream setting 'lingr' (did you mean "linger"?)""",
        ),
        (
            "infinistream {\n  s3 {\n    region: x\n    timout: 5s\n  }\n}\n",
            "server.conf:4:5: unknown infinistream s3 setting 'timout' (did you mean \"timeout\"?)",
        ),
        (
            "jetstream {\n  store_dri: /x\n}\n",
            'server.conf:2:3: jetstream: unknown field "store_dri" (did you mean "store_dir"?)',
        ),
        # Not a near miss of anything: the unknown key alone.
        (
            "infinistream {\n  colour: blue\n}\n",
            "server.conf:2:3: unknown infinistream setting 'colour'",
        ),
        # A bad value inside the block: at its key too.
        (
            "infinistream {\n  group: a\n  linger: soon\n}\n",
            "server.conf:3:3: infinistream linger: invalid duration 'soon'",
        ),
        (
            "infinistream {\n  s3: yes\n}\n",
            "server.conf:2:3: infinistream s3: expected a block { ... }",
        ),
        ("port: 4222\n\ndebug: 12\n", "server.conf:3:1: debug: expected true or false, got 12"),
    ],
    ids=["top", "infinistream", "s3", "jetstream", "no-near-miss", "value", "s3-value", "logging"],
)
def test_config_errors_point_at_the_key_and_suggest_the_near_miss(
    tmp_path: Path, text: str, message: str
) -> None:
    path = conf(tmp_path, text)
    with pytest.raises(SettingsError) as refused:
        parse("-c", path)
    assert str(refused.value).replace(str(tmp_path) + "/", "") == message


def test_missing_config_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="error opening config file"):
        parse("-c", str(tmp_path / "missing.conf"))


def test_s3_timeout_and_retries_from_flags_and_config(tmp_path: Path) -> None:
    assert (parse().s3_timeout, parse().s3_retries) == (30.0, 10)
    s = parse("--s3-timeout", "2s", "--s3-retries", "1")
    assert (s.s3_timeout, s.s3_retries) == (2.0, 1)
    path = conf(
        tmp_path,
        'infinistream { s3 { endpoint: "http://127.0.0.1:9000", timeout: "5s", retries: 3 } }\n',
    )
    s = parse("-c", path)
    assert (s.s3_endpoint, s.s3_timeout, s.s3_retries) == ("http://127.0.0.1:9000", 5.0, 3)
    with pytest.raises(SettingsError, match="unknown infinistream s3 setting 'timout'"):
        parse("-c", conf(tmp_path, "infinistream { s3 { timout: 5s } }\n"))
    with pytest.raises(SettingsError, match="s3 retries must not be negative"):
        parse("--s3-retries", "-1")


def test_pool_settings_default_to_one_zone_and_every_role() -> None:
    s = parse()
    assert (s.zone, s.roles, s.client_advertise, s.membership_ttl) == ("", ROLES, None, 3.0)
    assert not s.runs_jobs()


def test_pool_flags() -> None:
    s = parse("--zone", "eu-1a", "--roles", "fetch,publish", "--client_advertise", "h:4222")
    assert (s.zone, s.roles, s.client_advertise) == ("eu-1a", ("publish", "fetch"), "h:4222")
    assert parse("--jobs", "--roles", "jobs").runs_jobs()


def test_pool_settings_in_the_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "a.conf"
    conf.write_text(
        'client_advertise: "10.0.0.7:4222"\n'
        'infinistream { zone: "b", roles: [fetch, cache], membership_ttl: "5s" }\n'
    )
    s = parse("-c", str(conf))
    assert (s.zone, s.roles, s.client_advertise, s.membership_ttl) == (
        "b",
        ("fetch", "cache"),
        "10.0.0.7:4222",
        5.0,
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--roles", "publish,store"], "unknown role 'store'"),
        (["--roles", ","], "no roles"),
        (["--jobs", "--roles", "publish"], "jobs role"),
        (["--zone", "a/b"], "zone"),
    ],
)
def test_bad_pool_settings(argv: list[str], needle: str) -> None:
    with pytest.raises(SettingsError, match=needle):
        parse(*argv)


# -- the zone cache -----------------------------------------------------------------------


def test_zone_cache_flags() -> None:
    s = parse(
        "--cache-size", "2GB", "--cache-memory", "64MB", "--cache-dir", "/var/cache/is",
        "--cache-port", "7422", "--cache-timeout", "500ms",
    )  # fmt: skip
    assert (s.cache_size, s.cache_memory) == (2 * 1024**3, 64 * 1024**2)
    assert (s.cache_dir, s.cache_port, s.cache_timeout) == ("/var/cache/is", 7422, 0.5)


def test_zone_cache_in_the_config_file(tmp_path: Path) -> None:
    s = parse("-c", conf(tmp_path, "infinistream { cache_size: 0, cache_port: 7422 }"))
    assert (s.cache_size, s.cache_port) == (0, 7422)


@pytest.mark.parametrize(
    "argv",
    [("--cache-size", "-1"), ("--cache-port", "70000"), ("--cache-timeout", "0s")],
)
def test_bad_zone_cache_settings_are_refused(argv: tuple[str, str]) -> None:
    with pytest.raises(SettingsError):
        parse(*argv)


# -- the index cache -------------------------------------------------------------------------


def test_index_cache_flag_config_key_and_default(tmp_path: Path) -> None:
    assert Settings().index_cache == 64 * 1024**2
    assert parse("--index-cache", "256MB").index_cache == 256 * 1024**2
    assert parse("-c", conf(tmp_path, "infinistream { index_cache: 1GB }")).index_cache == 1024**3
    with pytest.raises(SettingsError, match="index_cache"):
        parse("--index-cache", "1KB")


def test_pack_index_flag_config_key_and_default(tmp_path: Path) -> None:
    assert Settings().pack_index == 2 * 1024**2
    assert parse("--pack-index", "16MB").pack_index == 16 * 1024**2
    assert parse("-c", conf(tmp_path, "infinistream { pack_index: 1MB }")).pack_index == 1024**2
    assert parse("--pack-index", "0").pack_index == 0
    with pytest.raises(SettingsError, match="pack_index"):
        parse("--pack-index=-1MB")


# -- encryption at rest ---------------------------------------------------------------------


def test_encryption_in_nats_servers_config_form(tmp_path: Path) -> None:
    s = parse("-c", conf(tmp_path, 'jetstream { cipher: aes, ek: "k1", prev_key: "k0" }'))
    assert (s.cipher, s.key, s.prev_keys) == ("aes", "k1", ["k0"])
    enc = s.encryption()
    assert enc is not None and enc.cipher == 2
    assert "k1" not in repr(s)  # keys are never printed
    assert parse().encryption() is None


def test_encryption_flags_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "k"
    key.write_text("from the file\n")
    monkeypatch.setenv("INFINISTREAM_KEY", "from the env")
    assert parse().key == "from the env"
    s = parse("--key-file", str(key), "--cipher", "chachapoly")
    assert (s.key, s.cipher) == ("from the file\n", "chachapoly")
    # The file's trailing newline is not part of the key.
    enc, same = s.encryption(), parse("--key-file", str(key)).encryption()
    assert enc is not None and same is not None and enc.current_id == same.current_id


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jetstream { cipher: rot13, key: k }", "unknown cipher"),
        ("jetstream { cipher: aes }", "needs a key"),
        ('jetstream { key: "  " }', "must not be empty"),
        ("jetstream { key: 12 }", "expected string"),
    ],
)
def test_bad_encryption_settings_are_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        parse("-c", conf(tmp_path, text))


def test_key_provider_is_named_when_it_cannot_be_loaded(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="no_such_module"):
        parse("--key-provider", "no_such_module:Kms")
    with pytest.raises(SettingsError, match=r"package\.module:name"):
        parse("--key-provider", "just_a_name")
    with pytest.raises(SettingsError, match="not a KeyProvider"):
        parse("--key-provider", "os:getcwd")
    with pytest.raises(SettingsError, match="either keys or a key provider"):
        parse("-c", conf(tmp_path, "jetstream { key: k }"), "--key-provider", "os:getcwd")


# -- the JetStream domain -------------------------------------------------------------------


def test_the_jetstream_domain(tmp_path: Path) -> None:
    assert parse("-c", conf(tmp_path, "jetstream { domain: hub }")).jetstream_domain == "hub"
    assert parse().jetstream_domain == ""


@pytest.mark.parametrize(
    ("domain", "message"),
    [
        ("a.b", "invalid domain name: may not contain ., \\* or >"),
        ("a*", "invalid domain name: may not contain ., \\* or >"),
        ("a>", 'invalid domain name: derived "\\$JS.a>.API.>" is not a valid subject'),
        ("a b", 'invalid domain name: derived "\\$JS.a b.API.>" is not a valid subject'),
    ],
)
def test_a_domain_that_is_not_one_token_is_refused(
    tmp_path: Path, domain: str, message: str
) -> None:
    # nats-server's words (validateJetStreamOptions), at the key.
    with pytest.raises(SettingsError, match=message):
        parse("-c", conf(tmp_path, f'jetstream {{ domain: "{domain}" }}'))


@pytest.mark.parametrize(
    ("text", "argv", "limit"),
    [
        ("", [], 64 * 1024),
        ("max_connections: 100\n", [], 100),
        ("max_conn: 7\n", [], 7),
        # As nats-server: 0 in the file refuses every connection.
        ("max_connections: 0\n", [], -1),
        ("max_connections: 100\n", ["--max_connections", "5"], 5),
        ("", ["--max_connections=9"], 9),
    ],
)
def test_max_connections_key_and_flag(
    tmp_path: Path, text: str, argv: list[str], limit: int
) -> None:
    assert parse("-c", conf(tmp_path, text), *argv).max_connections == limit


@pytest.mark.parametrize(("text", "seconds"), [("", 10.0), ('write_deadline: "2s"\n', 2.0)])
def test_write_deadline_key(tmp_path: Path, text: str, seconds: float) -> None:
    assert parse("-c", conf(tmp_path, text)).write_deadline == seconds


# -- lame duck mode ---------------------------------------------------------------------------


def test_lame_duck_keys_are_nats_servers(tmp_path: Path) -> None:
    s = parse()
    assert (s.lame_duck_duration, s.lame_duck_grace_period) == (120.0, 10.0)
    s = parse("-c", conf(tmp_path, 'lame_duck_duration: "3s"\nlame_duck_grace_period: 500ms\n'))
    assert (s.lame_duck_duration, s.lame_duck_grace_period) == (3.0, 0.5)


def test_lame_duck_grace_period_below_the_duration(tmp_path: Path) -> None:
    text = 'lame_duck_duration: "1m"\nlame_duck_grace_period: "1m"\n'
    with pytest.raises(SettingsError, match=r"lame duck grace period \(1m0s\) should be strictly"):
        parse("-c", conf(tmp_path, text))


def test_signal_flag_is_taken_in_nats_servers_spellings() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_serve_arguments(parser)
    for argv in (["-sl", "ldm=7"], ["--signal", "ldm=7"], ["-sl=ldm=7"], ["--signal=ldm=7"]):
        assert parser.parse_args(normalize_go_flags(argv)).signal == "ldm=7"


def test_the_etcd_access_options_come_in_the_metadata_url(tmp_path: Path) -> None:
    url = "etcd+https://e1:2379?cacert=/ca.pem&cert=/c.pem&key=/k.pem&user=a&password_file=/p"
    assert parse("-c", conf(tmp_path, f'infinistream {{ metadata: "{url}" }}')).metadata == url
    assert parse("--metadata", url).metadata_url == url
