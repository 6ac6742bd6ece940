"""Counter increments: the header rules, stored values and sourced totals (ADR-49)."""

from __future__ import annotations

import pytest

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.protocol import encode_headers, header_value
from infinistream.stream.counters import (
    CounterBroken,
    apply_increment,
    check_increment,
    sources_of,
    value_of,
    with_value,
)

COUNTER = StreamConfig(name="C", subjects=["c.>"], allow_msg_counter=True)
PLAIN = StreamConfig(name="P", subjects=["p.>"])


def hdrs(**fields: str) -> bytes:
    return encode_headers({k.replace("_", "-"): v for k, v in fields.items()})


def code(result: tuple[int | None, errors.ApiError | None]) -> int | None:
    return None if result[1] is None else result[1].err_code


def test_increments_are_decimal_big_integers() -> None:
    assert check_increment(COUNTER, hdrs(Nats_Incr="+1"), b"") == (1, None)
    assert check_increment(COUNTER, hdrs(Nats_Incr="-0010"), b"") == (-10, None)
    big = "9" * 80
    assert check_increment(COUNTER, hdrs(Nats_Incr=big), b"") == (int(big), None)
    for bad in ("x", "1.0", "+", "--1", "1_0", "1e3", "0x10"):
        assert code(check_increment(COUNTER, hdrs(Nats_Incr=bad), b"")) == 10171, bad


def test_refusals_in_nats_servers_order() -> None:
    assert code(check_increment(COUNTER, None, b"")) == 10169
    assert code(check_increment(COUNTER, hdrs(Nats_Incr=""), b"")) == 10169
    assert code(check_increment(COUNTER, hdrs(Nats_Incr="1"), b"x")) == 10170
    assert code(check_increment(PLAIN, hdrs(Nats_Incr="1"), b"x")) == 10168
    assert code(check_increment(PLAIN, hdrs(Nats_Incr="bad"), b"x")) == 10171
    assert check_increment(PLAIN, hdrs(Other="1"), b"x") == (None, None)
    for name in (
        "Nats-Rollup",
        "Nats-Expected-Stream",
        "Nats-Expected-Last-Msg-Id",
        "Nats-Expected-Last-Subject-Sequence-Subject",
        "Nats-Expected-Last-Sequence",
        "Nats-Expected-Last-Subject-Sequence",
    ):
        block = encode_headers({"Nats-Incr": "1", name: "0"})
        assert code(check_increment(COUNTER, block, b"")) == 10171, name
    # Only a source may say where a message comes from.
    forged = encode_headers({"Nats-Incr": "1", "Nats-Stream-Source": "O 1"})
    assert code(check_increment(COUNTER, forged, b"")) == 10227
    # A sourced message is taken as it comes, body and all.
    assert check_increment(COUNTER, hdrs(Nats_Incr="1"), b'{"val":"3"}', sourced=True) == (
        1,
        None,
    )


def test_stored_values() -> None:
    assert value_of(b'{"val":"42"}') == 42
    assert value_of(b'{"val":"-7","other":1}') == -7
    assert value_of(b"null") == 0
    for broken in (b"", b"42", b'{"val":42}', b"[]", b"{"):
        with pytest.raises(CounterBroken):
            value_of(broken)


def test_an_increment_keeps_its_headers_and_carries_the_sources() -> None:
    counted = apply_increment(41, {}, "c.a", 1, hdrs(Nats_Incr="+1", X="y"), b"")
    assert (counted.body, counted.value) == (b'{"val":"42"}', 42)
    assert header_value(counted.headers, b"Nats-Incr") == b"+1"
    assert header_value(counted.headers, b"X") == b"y"
    assert header_value(counted.headers, b"Nats-Counter-Sources") is None
    sources = {"ORIGIN": {"c.a": "5"}}
    counted = apply_increment(10, sources, "c.a", 2, hdrs(Nats_Incr="2"), b"")
    assert counted.value == 12
    assert header_value(counted.headers, b"Nats-Counter-Sources") == b'{"ORIGIN":{"c.a":"5"}}'


def test_a_sourced_total_adds_its_difference_from_the_last_seen() -> None:
    origin = "ORIGIN 7 c.src c.src c.a"
    first = apply_increment(
        100, {}, "c.agg", 3, hdrs(Nats_Incr="+3", Nats_Stream_Source=origin), b'{"val":"10"}'
    )
    # The origin's total was 10 and none was seen from it before: 10 is added.
    assert first.value == 110
    assert header_value(first.headers, b"Nats-Incr") == b"10"
    assert sources_of(first.headers) == {"ORIGIN": {"c.a": "10"}}
    second = apply_increment(
        first.value,
        sources_of(first.headers),
        "c.agg",
        5,
        hdrs(Nats_Incr="+5", Nats_Stream_Source=origin),
        b'{"val":"15"}',
    )
    assert second.value == 115
    assert header_value(second.headers, b"Nats-Incr") == b"5"
    assert sources_of(second.headers) == {"ORIGIN": {"c.a": "15"}}
    # Without a fifth field the origin's subject is the stored one.
    other = apply_increment(
        0, {}, "c.agg", 1, hdrs(Nats_Incr="1", Nats_Stream_Source="B 1"), b'{"val":"4"}'
    )
    assert sources_of(other.headers) == {"B": {"c.agg": "4"}}


def test_broken_sources() -> None:
    with pytest.raises(CounterBroken):
        sources_of(hdrs(Nats_Counter_Sources="[1]"))
    with pytest.raises(CounterBroken):
        sources_of(hdrs(Nats_Counter_Sources='{"A":{"b":1}}'))
    assert sources_of(hdrs(Nats_Counter_Sources="null")) == {}


def test_pub_ack_with_value() -> None:
    assert with_value(b'{"stream":"C","seq":3}', "-12") == b'{"stream":"C","seq":3,"val":"-12"}'
