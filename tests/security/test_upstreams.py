"""Upstreams: the running NATS servers mirrors and sources may read from."""

from __future__ import annotations

import pytest

from infinistream.security.upstreams import parse_upstream_flag, parse_upstreams, upstream_named


def test_a_block_names_each_upstream_with_its_credentials_and_tls() -> None:
    ups = parse_upstreams(
        {"hub": {"url": "tls://hub:4222", "user": "u", "password": "p", "tls": {"ca_file": "c"}}}
    )
    hub = ups["hub"]
    assert (hub.url, hub.user, hub.password, hub.ca_file, hub.api) == (
        "tls://hub:4222",
        "u",
        "p",
        "c",
        "$JS.API",
    )
    assert upstream_named("$JS.hub.API", ups) is hub
    assert upstream_named("$JS.other.API", ups) is None
    assert upstream_named("$JS.API", ups) is None


@pytest.mark.parametrize(
    "block",
    [
        {"hub": {}},
        {"hub": {"url": "nats://h", "passwd": "x"}},
        {"hub": {"url": "nats://h", "tls": {"verify": True}}},
        {"a.b": {"url": "nats://h"}},
        "nats://h",
    ],
)
def test_bad_blocks_are_refused(block: object) -> None:
    with pytest.raises(ValueError):
        parse_upstreams(block)


def test_the_flag_is_name_equals_url() -> None:
    hub = parse_upstream_flag("hub=nats://u:p@h:4222")
    assert (hub.name, hub.url) == ("hub", "nats://u:p@h:4222")
    with pytest.raises(ValueError):
        parse_upstream_flag("nats://h")
