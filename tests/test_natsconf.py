"""nats-server configuration syntax; many cases are taken from nats-server's conf/parse_test.go."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infinistream.natsconf import ConfigError, load, loads, near_miss, parse_duration

INFINISTREAM_CONF = """
listen: 127.0.0.1:4222
http_port: 8222
max_payload: 1MB
jetstream { store_dir: "/tmp/js" }
infinistream {
  objects: "s3://bucket/prefix"
  metadata: "sqlite:///tmp/meta.db"
  linger: "250ms"
  batch_bytes: 4MB
  group: default
}
"""


def test_infinistream_config() -> None:
    assert loads(INFINISTREAM_CONF) == {
        "listen": "127.0.0.1:4222",
        "http_port": 8222,
        "max_payload": 1024 * 1024,
        "jetstream": {"store_dir": "/tmp/js"},
        "infinistream": {
            "objects": "s3://bucket/prefix",
            "metadata": "sqlite:///tmp/meta.db",
            "linger": "250ms",
            "batch_bytes": 4 * 1024 * 1024,
            "group": "default",
        },
    }


@pytest.mark.parametrize(
    "text",
    ["port: 4222", "port = 4222", "port 4222", "port:4222", "port=4222", "  port \t:\t 4222  "],
)
def test_key_separators(text: str) -> None:
    assert loads(text) == {"port": 4222}


def test_top_level_terminators() -> None:
    assert loads("foo='1'; bar=2.2; baz=true; boo=22") == {
        "foo": "1",
        "bar": 2.2,
        "baz": True,
        "boo": 22,
    }
    assert loads("a=1, b=2\nc=3;\n") == {"a": 1, "b": 2, "c": 3}


def test_comments() -> None:
    text = """
    # hash comment
    // slash comment
    a: 1 # trailing
    b: 2 // trailing
    c: "x"# right after a quoted value
    url: nats://host:4222   # '//' inside a value is not a comment
    word: a#b               # nor is '#' inside an unquoted value
    m { # comment after brace
      k: v // comment
      # between
    }
    l [ # comment
      1 # one
      // two
      2
    ]
    """
    assert loads(text) == {
        "a": 1,
        "b": 2,
        "c": "x",
        "url": "nats://host:4222",
        "word": "a#b",
        "m": {"k": "v"},
        "l": [1, 2],
    }


def test_empty_configs() -> None:
    assert loads("") == {}
    assert loads("\n\n   \n") == {}
    assert loads("# just comments\n// and more\n") == {}


def test_nested_blocks() -> None:
    text = """
    foo  {
      host {
        ip   = '127.0.0.1'
        port = 4242
      }
      servers = [ "a.com", "b.com", "c.com"]
    }
    with_colon: { a: 1 }
    with_equals = { a: 1, b: 2; c: 3 }
    inline {a:1}
    empty {}
    """
    assert loads(text) == {
        "foo": {"host": {"ip": "127.0.0.1", "port": 4242}, "servers": ["a.com", "b.com", "c.com"]},
        "with_colon": {"a": 1},
        "with_equals": {"a": 1, "b": 2, "c": 3},
        "inline": {"a": 1},
        "empty": {},
    }


def test_arrays() -> None:
    text = """
    a = [1, 2, 3, 'bar']
    b = [1,2,3,'bar']
    c [
      nats-route://foo:bar@apcera.me:4245
      nats-route://foo:bar@apcera.me:4246
    ]
    d = [ { abc: 123 }, { xyz: "word" } ]
    e = [[1, 2], [], {}]
    f = [1, 2, ]
    g = []
    """
    assert loads(text) == {
        "a": [1, 2, 3, "bar"],
        "b": [1, 2, 3, "bar"],
        "c": ["nats-route://foo:bar@apcera.me:4245", "nats-route://foo:bar@apcera.me:4246"],
        "d": [{"abc": 123}, {"xyz": "word"}],
        "e": [[1, 2], [], {}],
        "f": [1, 2],
        "g": [],
    }


def test_strings() -> None:
    text = r"""
    dq = "tab\there \"quoted\" back\\slash\nnl \x41\xc3\xa9"
    sq = 'no \escapes "here"'
    multi = 'This is a multi-line
text block.'
    expr = '(true == "false")'
    bare = hello-world_1
    host = localhost:4222
    ip = 10.0.0.1
    path = /var/lib/nats
    quoted_true = "true"
    quoted_num = "42"
    dollar = "$NOT_A_VARIABLE"
    unicode = "héllo wörld"
    digits_then_letters = 3xyz
    "quoted key" = 1
    'single key': 2
    dotted.key = 3
    """
    assert loads(text) == {
        "dq": 'tab\there "quoted" back\\slash\nnl Aé',
        "sq": 'no \\escapes "here"',
        "multi": "This is a multi-line\ntext block.",
        "expr": '(true == "false")',
        "bare": "hello-world_1",
        "host": "localhost:4222",
        "ip": "10.0.0.1",
        "path": "/var/lib/nats",
        "quoted_true": "true",
        "quoted_num": "42",
        "dollar": "$NOT_A_VARIABLE",
        "unicode": "héllo wörld",
        "digits_then_letters": "3xyz",
        "quoted key": 1,
        "single key": 2,
        "dotted.key": 3,
    }


def test_block_string() -> None:
    text = "auth (\n  line one\n  line (two)\n)\nafter: 1\n"
    assert loads(text) == {"auth": "\n  line one\n  line (two)\n", "after": 1}


def test_sizes_like_nats_server() -> None:
    text = """
    k = 8k
    kb = 4kb
    ki = 3ki
    kib = 4ki
    m = 1m
    mb = 2MB
    mi = 2Mi
    mib = 64MiB
    g = 2g
    gb = 22GB
    gi = 22Gi
    gib = 22GiB
    tb = 22TB
    ti = 22Ti
    tib = 22TiB
    pb = 22PB
    pi = 22Pi
    pib = 22PiB
    one_g = 1G
    k64 = 64KB
    neg = -1MB
    e = 1e
    """
    assert loads(text) == {
        "k": 8 * 1000,
        "kb": 4 * 1024,
        "ki": 3 * 1024,
        "kib": 4 * 1024,
        "m": 1000 * 1000,
        "mb": 2 * 1024**2,
        "mi": 2 * 1024**2,
        "mib": 64 * 1024**2,
        "g": 2 * 1000**3,
        "gb": 22 * 1024**3,
        "gi": 22 * 1024**3,
        "gib": 22 * 1024**3,
        "tb": 22 * 1024**4,
        "ti": 22 * 1024**4,
        "tib": 22 * 1024**4,
        "pb": 22 * 1024**5,
        "pi": 22 * 1024**5,
        "pib": 22 * 1024**5,
        "one_g": 1000**3,
        "k64": 64 * 1024,
        "neg": -(1024**2),
        "e": 1000**6,
    }


def test_numbers() -> None:
    assert loads("a = 22\nb = -7\nc = 2.5\nd = -0.25\ne = 0") == {
        "a": 22,
        "b": -7,
        "c": 2.5,
        "d": -0.25,
        "e": 0,
    }
    with pytest.raises(ConfigError, match="out of range"):
        loads("a = 9223372036854775808")
    with pytest.raises(ConfigError, match="out of range"):
        loads("a = 9EB")


def test_durations_stay_strings() -> None:
    assert loads("a: 250ms\nb: 2h\nc: 1.5s\nd: 1m30s\ne: 100us") == {
        "a": "250ms",
        "b": "2h",
        "c": "1.5s",
        "d": "1m30s",
        "e": "100us",
    }


@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("true", True),
        ("TRUE", True),
        ("yes", True),
        ("on", True),
        ("On", True),
        ("false", False),
        ("no", False),
        ("off", False),
        ("False", False),
    ],
)
def test_bools(word: str, value: bool) -> None:
    assert loads(f"foo={word}") == {"foo": value}
    assert loads(f"foo=[{word}]") == {"foo": [value]}


def test_datetime() -> None:
    assert loads("now = 2016-05-04T18:53:41Z\ngmt = false") == {
        "now": datetime(2016, 5, 4, 18, 53, 41, tzinfo=UTC),
        "gmt": False,
    }
    with pytest.raises(ConfigError, match="datetime"):
        loads("now = 2016-13-04T18:53:41Z")


def test_variables() -> None:
    text = """
    index = 22
    nest {
      index = 11
      foo = $index
      deeper { bar = $index }
    }
    bar = $index
    users = { list = [ {user = "a"} ] }
    copy = $users
    in_array = [ $index ]
    """
    got = loads(text)
    assert got == {
        "index": 22,
        "nest": {"index": 11, "foo": 11, "deeper": {"bar": 11}},
        "bar": 22,
        "users": {"list": [{"user": "a"}]},
        "copy": {"list": [{"user": "a"}]},
        "in_array": [22],
    }
    got["copy"]["list"].append("x")
    assert got["users"] == {"list": [{"user": "a"}]}


def test_variable_must_be_defined_before_use() -> None:
    with pytest.raises(ConfigError, match="can not be found") as info:
        loads("\n\nfoo = $__INFINISTREAM_UNSET_VAR__\n")
    assert info.value.line == 3


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("__IS_NUM__", "22")
    monkeypatch.setenv("__IS_STR__", "xyz")
    monkeypatch.setenv("__IS_SIZE__", "1MB")
    monkeypatch.setenv("__IS_QUOTED__", "'3xyz'")
    monkeypatch.setenv("__IS_UNIT_STR__", "3Gyz")
    monkeypatch.setenv("__IS_REF__", "$__IS_NUM__")
    monkeypatch.setenv("__IS_EMPTY__", "")
    text = """
    a = $__IS_NUM__
    b = $__IS_STR__
    c = $__IS_SIZE__
    d = $__IS_QUOTED__
    e = $__IS_UNIT_STR__
    f = $__IS_REF__
    g = $__IS_EMPTY__
    """
    assert loads(text) == {
        "a": 22,
        "b": "xyz",
        "c": 1024**2,
        "d": "3xyz",
        "e": "3Gyz",
        "f": 22,
        "g": "",
    }
    # A key defined in the file wins over the environment.
    assert loads("__IS_NUM__ = 5\nx = $__IS_NUM__") == {"__IS_NUM__": 5, "x": 5}


def test_environment_variable_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("__IS_A__", "$__IS_B__")
    monkeypatch.setenv("__IS_B__", "$__IS_A__")
    with pytest.raises(ConfigError, match="cycle"):
        loads("x = $__IS_A__")


def test_bcrypt_is_not_a_variable() -> None:
    assert loads("password: $2a$11$ooo") == {"password": "$2a$11$ooo"}


def test_includes(tmp_path: Path) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / "includes" / "passwords.conf").write_text(
        "ALICE_PASS: $2a$10$UHR6GhotWhpLsKtVP0/i6\nBOB_PASS: 'bob'\n"
    )
    (tmp_path / "includes" / "users.conf").write_text(
        "users = [\n {user: alice, password: $ALICE_PASS}\n]\ninclude 'more.conf'\n"
    )
    # Relative to the including file's directory.
    (tmp_path / "includes" / "more.conf").write_text("timeout: 0.5\n")
    main = tmp_path / "main.conf"
    main.write_text(
        """
listen: 127.0.0.1:4222
authorization {
  include ./includes/passwords.conf
  include "./includes/users.conf"
  bob = $BOB_PASS
}
"""
    )
    # users.conf uses $ALICE_PASS, which it does not define itself: parsed on its own, as in
    # nats-server, that is an error...
    with pytest.raises(ConfigError, match="ALICE_PASS") as info:
        load(main)
    assert info.value.path is not None and info.value.path.endswith("users.conf")
    assert info.value.line == 2
    # ...so define it there instead.
    (tmp_path / "includes" / "users.conf").write_text(
        "ALICE_PASS = 'a'\nusers = [\n {user: alice, password: $ALICE_PASS}\n]\n"
        "include 'more.conf'\n"
    )
    assert load(main) == {
        "listen": "127.0.0.1:4222",
        "authorization": {
            "ALICE_PASS": "a",
            "BOB_PASS": "bob",
            "users": [{"user": "alice", "password": "a"}],
            "timeout": 0.5,
            "bob": "bob",
        },
    }
    assert loads("include main.conf", base_dir=tmp_path)["listen"] == "127.0.0.1:4222"


def test_include_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.conf") as info:
        loads("a = 1\ninclude missing.conf", base_dir=tmp_path)
    assert info.value.line == 2
    (tmp_path / "self.conf").write_text("a = 1\ninclude self.conf\n")
    with pytest.raises(ConfigError, match="cycle"):
        load(tmp_path / "self.conf")
    with pytest.raises(ConfigError, match="include path"):
        loads("include\n")
    with pytest.raises(ConfigError, match="include path"):
        loads("include [a]")


def test_include_is_only_a_keyword_before_whitespace() -> None:
    assert loads("include: 'x'") == {"include": "x"}
    # As in nats-server, "include" followed by a space starts an include, even before '='.
    with pytest.raises(ConfigError, match="include"):
        loads("include = 'x'\n")
    assert loads("'include' 5") == {"include": 5}


def test_json_compat() -> None:
    text = """
    {
      "http_port": 8227,
      "write_deadline": "1h",
      "debug": False,
      "jetstream": {
        "store_dir": "/tmp/nats"
        "max_mem": 1000000,
      },
      "cluster": {"routes": ["nats://127.0.0.1:4222", "nats://127.0.0.1:4223"]}
    }
    # trailing comment
    """
    assert loads(text) == {
        "http_port": 8227,
        "write_deadline": "1h",
        "debug": False,
        "jetstream": {"store_dir": "/tmp/nats", "max_mem": 1000000},
        "cluster": {"routes": ["nats://127.0.0.1:4222", "nats://127.0.0.1:4223"]},
    }
    assert loads("{}") == {}
    assert loads("{ listen: 0.0.0.0:4222 }") == {"listen": "0.0.0.0:4222"}
    assert loads("{\n {\n listen: 0.0.0.0:4222 // c\n }\n # c\n}\n") == {"listen": "0.0.0.0:4222"}
    # nats-server tolerates a trailing bracket after the configuration.
    assert loads("accounts { users = [{}]}\n}\n") == {"accounts": {"users": [{}]}}


def test_duplicate_keys_last_wins() -> None:
    assert loads("a = 1\na = 2") == {"a": 2}


def test_windows_line_endings() -> None:
    assert loads("a = 1\r\nb {\r\n c: x\r\n}\r\n") == {"a": 1, "b": {"c": "x"}}


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("aaaaaaaa", 1, "no value"),
        ("\n\n  foo =", 3, "no value"),
        ('a = 1\nb = "unterminated\n', 2, "unterminated"),
        ("a = 'unterminated", 1, "unterminated"),
        ("a {\n b = 1\n", 1, "end of input"),
        ("a = [1, 2\n", 1, "end of input"),
        ("a = [1,,2]", 1, "','"),
        ("a = 1 2", 1, "after a value"),
        ('a = "bad \\q escape"', 1, "escape"),
        ('a = "\\xZZ"', 1, "hexadecimal"),
        ('a = "multi\nline \\q"', 2, "escape"),
        ("a = 1\n}\nb = 2", 2, "'}'"),
        ("a = 1\n: b", 2, "key"),
        ("a = (\nno end", 1, "block"),
        ("a = {\n b = 1 c = 2 }", 2, "after a value"),
    ],
)
def test_errors_have_line_numbers(text: str, line: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        loads(text)
    assert info.value.line == line
    assert f":{line}:" in str(info.value)


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    assert loads("a = " + "[" * 50 + "]" * 50)["a"]
    with pytest.raises(ConfigError, match="nested too deeply"):
        loads("a = " + "[" * 5000 + "]" * 5000)


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="error opening config file"):
        load(tmp_path / "nope.conf")
    (tmp_path / "latin1.conf").write_bytes(b"a = '\xe9'\n")
    with pytest.raises(ConfigError, match="error opening config file"):
        load(tmp_path / "latin1.conf")


def test_load_file(tmp_path: Path) -> None:
    path = tmp_path / "nats.conf"
    path.write_text("\ufeff" + INFINISTREAM_CONF, encoding="utf-8")
    assert load(path) == loads(INFINISTREAM_CONF)
    assert load(str(path))["infinistream"]["group"] == "default"


# --- round trip: any nested value written in the syntax parses back -------------------------

keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
    lambda k: k.lower() not in {"include", "true", "false", "yes", "no", "on", "off"}
)
scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda f: round(f, 3)),
    st.text(st.characters(codec="utf-8"), max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


ESCAPE = {"\\": "\\\\", '"': '\\"', "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def write_value(value: Any, style: int) -> str:
    if isinstance(value, bool):
        return ["true", "on", "yes"][style % 3] if value else ["false", "off", "no"][style % 3]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # The syntax has no exponent form; write a plain decimal.
        return f"{value:.3f}"
    if isinstance(value, str):
        return (
            '"'
            + "".join(ESCAPE.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x20 else c) for c in value)
            + '"'
        )
    if isinstance(value, list):
        seps = [", ", "\n", ",\n"]
        return "[" + seps[style % 3].join(write_value(v, style + 1) for v in value) + "]"
    assert isinstance(value, dict)
    return "{\n" + write_entries(value, style + 1) + "\n}"


def write_entries(mapping: dict[str, Any], style: int) -> str:
    seps = [": ", " = ", " "]
    ends = ["\n", "; ", ", "]
    parts = []
    for i, (k, v) in enumerate(mapping.items()):
        sep = seps[(style + i) % 3]
        if sep == " " and isinstance(v, str):
            sep = ": "
        parts.append(f"{k}{sep}{write_value(v, style + i)}{ends[(style + i) % 3]}")
    return "".join(parts)


def normalize(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    return value


@given(st.dictionaries(keys, values, max_size=5), st.integers(0, 2))
def test_round_trip(config: dict[str, Any], style: int) -> None:
    text = write_entries(config, style)
    assert normalize(loads(text)) == normalize(config)


# --- durations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250ms", 0.25),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("1.5s", 1.5),
        ("100us", 0.0001),
        ("100µs", 0.0001),
        ("100μs", 0.0001),
        ("500ns", 5e-7),
        ("0", 0.0),
        ("-0", 0.0),
        ("+5s", 5.0),
        ("-1.5h", -5400.0),
        ("1h2m3s4ms5us6ns", 3723.004005006),
        (".5s", 0.5),
        ("5.s", 5.0),
        ("0.000000001s", 1e-9),
        ("0.0000000019s", 1e-9),  # truncated to whole nanoseconds, as Go does
    ],
)
def test_parse_duration_strings(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    "text", ["", "-", "5", "1.5", "s", ".s", "1x", "1 s", "1s 2m", "1..5s", "ms1", "1sec"]
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_parse_duration_numbers_are_seconds() -> None:
    assert parse_duration(30) == 30.0
    assert parse_duration(1.5) == 1.5
    assert parse_duration(0) == 0.0
    for bad in (True, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_parse_duration_of_parsed_config() -> None:
    cfg = loads(INFINISTREAM_CONF)
    assert parse_duration(cfg["infinistream"]["linger"]) == 0.25


@pytest.mark.parametrize(
    ("key", "guess"),
    [("lisen", "listen"), ("LINGR", "linger"), ("max_paylod", "max_payload"), ("colour", None)],
)
def test_near_miss_is_the_key_a_typo_most_likely_meant(key: str, guess: str | None) -> None:
    assert near_miss(key, ["listen", "linger", "max_payload", "max_pending", "port"]) == guess
