"""Stream create, update, info, list, names and delete, answered the way nats-server answers.

Expected values were taken from nats-server 2.15.1 running the same requests; where InfiniStream
deliberately differs (it refuses what it does not implement) the test says so.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy
from nats.js.errors import BadRequestError, NoStreamResponseError, NotFoundError

from support.moduleagent import one_agent_per_module

agent, no_streams = one_agent_per_module()

API = "$JS.API."
NAME_RULE = "stream name is required and can not contain '.', '*', '>', '\\', '/'"


async def api(nc: Client, subject: str, body: Any = b"") -> dict[str, Any]:
    """One raw JetStream API request; the decoded JSON answer."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    msg = await nc.request(API + subject, body, timeout=5)
    return json.loads(msg.data)


def assert_error(resp: dict[str, Any], code: int, err_code: int, description: str) -> None:
    assert resp.get("error") == {"code": code, "err_code": err_code, "description": description}


# -- create -------------------------------------------------------------------------------------


async def test_create_fills_in_the_defaults_nats_server_fills(nc: Client) -> None:
    resp = await api(nc, "STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders.>"]})
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    assert resp["did_create"] is True
    config = resp["config"]
    config.pop("metadata", None)
    assert config == {
        "name": "ORDERS",
        "subjects": ["orders.>"],
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msgs_per_subject": -1,
        "max_msg_size": -1,
        "discard": "old",
        "storage": "file",
        "num_replicas": 1,
        "duplicate_window": 120_000_000_000,
        "compression": "none",
        "allow_direct": False,
        "mirror_direct": False,
        "sealed": False,
        "deny_delete": False,
        "deny_purge": False,
        "allow_rollup_hdrs": False,
        "consumer_limits": {},
        "allow_msg_ttl": False,
    }
    state = resp["state"]
    assert (state["messages"], state["bytes"], state["first_seq"], state["last_seq"]) == (
        0,
        0,
        0,
        0,
    )
    assert state["consumer_count"] == 0


async def test_create_without_subjects_uses_the_stream_name(js: JetStreamContext) -> None:
    info = await js.add_stream(name="PLAIN")
    assert info.config.subjects == ["PLAIN"]
    ack = await js.publish("PLAIN", b"x")
    assert (ack.stream, ack.seq) == ("PLAIN", 1)


async def test_duplicate_window_defaults_to_max_age_when_shorter(nc: Client) -> None:
    resp = await api(nc, "STREAM.CREATE.AGED", {"name": "AGED", "max_age": 30_000_000_000})
    assert resp["config"]["duplicate_window"] == 30_000_000_000


async def test_create_twice_with_the_same_config_is_ok(nc: Client, js: JetStreamContext) -> None:
    first = await js.add_stream(name="TWICE", subjects=["twice.>"], max_msgs=10)
    await js.publish("twice.a", b"x")
    second = await js.add_stream(name="TWICE", subjects=["twice.>"], max_msgs=10)
    assert second.config == first.config
    assert second.state.messages == 1
    raw = await api(nc, "STREAM.CREATE.TWICE", second.config.as_dict())
    assert "error" not in raw
    assert raw["did_create"] is True


async def test_create_again_with_another_config_is_refused(js: JetStreamContext) -> None:
    await js.add_stream(name="TWICE", subjects=["twice.>"])
    with pytest.raises(BadRequestError) as exc:
        await js.add_stream(name="TWICE", subjects=["twice.>"], max_msgs=5)
    assert exc.value.err_code == 10058
    assert exc.value.description == "stream name already in use with a different configuration"


async def test_name_with_a_dot_cannot_reach_the_create_api(nc: Client) -> None:
    # The dot makes an extra subject token: no API endpoint serves that subject.
    resp = await api(nc, "STREAM.CREATE.A.B", {"name": "A.B"})
    assert resp["type"] == "io.nats.jetstream.api.v1.system_response"
    assert_error(resp, 400, 10003, "bad request")


async def test_name_with_a_dot_in_the_body_does_not_match_the_subject(nc: Client) -> None:
    resp = await api(nc, "STREAM.CREATE.A", {"name": "A.B"})
    assert_error(resp, 400, 10056, "stream name in subject does not match request")


@pytest.mark.parametrize("name", ["A*", "A>"])
async def test_name_with_a_wildcard_is_an_invalid_config(nc: Client, name: str) -> None:
    resp = await api(nc, f"STREAM.CREATE.{name}", {"name": name})
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    assert_error(resp, 500, 10052, NAME_RULE)


@pytest.mark.parametrize("name", ["A/B", "A\\B"])
async def test_name_with_a_path_separator_is_refused(nc: Client, name: str) -> None:
    resp = await api(nc, f"STREAM.CREATE.{name}", {"name": name})
    assert_error(resp, 400, 10128, "Stream name can not contain path separators")


@pytest.mark.parametrize("body", [b"", b"{}", b'{"subjects": ["x"]}'])
async def test_create_without_a_name_in_the_body_is_a_mismatch(nc: Client, body: bytes) -> None:
    resp = await api(nc, "STREAM.CREATE.NONAME", body)
    assert_error(resp, 400, 10056, "stream name in subject does not match request")
    assert_error(await api(nc, "STREAM.INFO.NONAME"), 404, 10059, "stream not found")


async def test_create_with_another_name_in_the_body_is_a_mismatch(nc: Client) -> None:
    resp = await api(nc, "STREAM.CREATE.X", {"name": "Y"})
    assert_error(resp, 400, 10056, "stream name in subject does not match request")


@pytest.mark.parametrize(
    ("subjects", "description"),
    [
        (["a..b"], "invalid subject"),
        (["a.>.b"], "invalid subject"),
        (["a b"], "invalid subject"),
        ([">"], "capturing all subjects requires no-ack to be true"),
        (["$JS.API.>"], "subjects that overlap with jetstream api require no-ack to be true"),
        (["$SYS.x"], "subjects that overlap with system api require no-ack to be true"),
    ],
)
async def test_invalid_subjects_are_refused(
    nc: Client, subjects: list[str], description: str
) -> None:
    resp = await api(nc, "STREAM.CREATE.BAD", {"name": "BAD", "subjects": subjects})
    assert_error(resp, 500, 10052, description)


@pytest.mark.parametrize(
    ("subjects", "description"),
    [
        (["x.*", "x.y"], 'subject "x.*" overlaps with "x.y"'),
        (["x.y", "x.>"], 'subject "x.y" overlaps with "x.>"'),
        (["x.y", "x.y"], 'subject "x.y" overlaps with "x.y"'),
    ],
)
async def test_overlapping_subjects_within_one_stream_are_refused(
    nc: Client, subjects: list[str], description: str
) -> None:
    resp = await api(nc, "STREAM.CREATE.SELF", {"name": "SELF", "subjects": subjects})
    assert_error(resp, 500, 10052, description)


@pytest.mark.parametrize("subject", ["orders.new", "orders.*", "orders.a.>"])
async def test_subjects_overlapping_another_stream_are_refused(
    js: JetStreamContext, subject: str
) -> None:
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    with pytest.raises(BadRequestError) as exc:
        await js.add_stream(name="OTHER", subjects=[subject])
    assert exc.value.err_code == 10065
    assert exc.value.description == "subjects overlap with an existing stream"


async def test_disjoint_subjects_in_two_streams_are_fine(js: JetStreamContext) -> None:
    await js.add_stream(name="ORDERS", subjects=["orders.*"])
    await js.add_stream(name="DEEP", subjects=["orders.a.b"])
    assert (await js.publish("orders.a", b"1")).stream == "ORDERS"
    assert (await js.publish("orders.a.b", b"2")).stream == "DEEP"


@pytest.mark.parametrize(
    ("field", "value", "what"),
    [
        ("mirror", {"name": "SRC", "external": {"api": "$JS.hub.API"}}, "mirror from another"),
        ("sources", [{"name": "SRC", "external": {"api": "$JS.hub.API"}}], "sources from another"),
        ("placement", {"cluster": "east"}, "placement"),
    ],
)
async def test_unsupported_features_are_refused_not_ignored(
    nc: Client, field: str, value: Any, what: str
) -> None:
    resp = await api(nc, "STREAM.CREATE.FEAT", {"name": "FEAT", field: value})
    assert resp["error"]["err_code"] == 10052
    assert resp["error"]["description"].startswith(what)
    assert resp["error"]["description"].endswith("not supported by InfiniStream")
    assert_error(await api(nc, "STREAM.INFO.FEAT"), 404, 10059, "stream not found")


async def test_sealed_on_create_is_refused(nc: Client) -> None:
    resp = await api(nc, "STREAM.CREATE.SEALED", {"name": "SEALED", "sealed": True})
    assert_error(resp, 500, 10052, "stream configuration for create can not be sealed")


@pytest.mark.parametrize(
    ("extra", "description"),
    [
        ({"max_age": 10}, "max age needs to be >= 100ms"),
        ({"duplicate_window": 10}, "duplicates window needs to be >= 100ms"),
        (
            {"max_age": 1_000_000_000, "duplicate_window": 2_000_000_000},
            "duplicates window can not be larger then max age",
        ),
        ({"deny_purge": True, "allow_rollup_hdrs": True}, "roll-ups require the purge permission"),
        (
            {"discard_new_per_subject": True},
            "discard new per subject requires discard new policy to be set",
        ),
        (
            {"discard_new_per_subject": True, "discard": "new"},
            "discard new per subject requires max msgs per subject > 0",
        ),
    ],
)
async def test_inconsistent_limits_are_refused(
    nc: Client, extra: dict[str, Any], description: str
) -> None:
    resp = await api(nc, "STREAM.CREATE.LIM", {"name": "LIM", **extra})
    assert_error(resp, 500, 10052, description)


@pytest.mark.parametrize("field", ["retention", "discard", "storage"])
async def test_unknown_policy_values_are_invalid_json(nc: Client, field: str) -> None:
    resp = await api(nc, "STREAM.CREATE.ENUM", {"name": "ENUM", field: "bogus"})
    assert_error(resp, 400, 10025, 'invalid JSON: can not unmarshal "\\"bogus\\""')


async def test_unknown_compression_is_invalid_json(nc: Client) -> None:
    resp = await api(nc, "STREAM.CREATE.ENUM", {"name": "ENUM", "compression": "zip"})
    assert_error(resp, 400, 10025, "invalid JSON: unknown compression algorithm")


async def test_malformed_json_is_invalid_json(nc: Client) -> None:
    resp = await api(nc, "STREAM.CREATE.JSON", b"{not json")
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    assert resp["error"]["code"] == 400
    assert resp["error"]["err_code"] == 10025
    assert resp["error"]["description"].startswith("invalid JSON: ")


@pytest.mark.parametrize("subject", ["STREAM.BOGUS", "NOPE", "STREAM.INFO", "STREAM.MSG.GET"])
async def test_unknown_api_subject_is_a_bad_request(nc: Client, subject: str) -> None:
    resp = await api(nc, subject)
    assert resp == {
        "type": "io.nats.jetstream.api.v1.system_response",
        "error": {"code": 400, "err_code": 10003, "description": "bad request"},
    }


async def test_first_seq_starts_the_stream_there(js: JetStreamContext) -> None:
    info = await js.add_stream(name="LATE", subjects=["late"], first_seq=100)
    assert (info.state.first_seq, info.state.last_seq) == (100, 99)
    assert (await js.publish("late", b"x")).seq == 100
    info = await js.stream_info("LATE")
    assert (info.state.first_seq, info.state.last_seq, info.state.messages) == (100, 100, 1)


async def test_description_and_metadata_are_kept(js: JetStreamContext) -> None:
    await js.add_stream(
        name="DOC", subjects=["doc"], description="the docs", metadata={"team": "a"}
    )
    info = await js.stream_info("DOC")
    assert info.config.description == "the docs"
    assert info.config.metadata is not None
    assert info.config.metadata["team"] == "a"


async def test_description_too_long_is_refused(nc: Client) -> None:
    resp = await api(nc, "STREAM.CREATE.DOC", {"name": "DOC", "description": "x" * 4097})
    assert_error(resp, 500, 10052, "stream description is too long, maximum allowed is 4096")


# -- update -------------------------------------------------------------------------------------


async def test_update_changes_the_config(js: JetStreamContext) -> None:
    await js.add_stream(name="UP", subjects=["up.>"])
    info = await js.update_stream(
        name="UP", subjects=["up.>", "more"], description="new", max_msgs=10, allow_direct=True
    )
    assert info.config.subjects == ["up.>", "more"]
    assert info.config.description == "new"
    assert info.config.max_msgs == 10
    assert info.config.allow_direct is True
    assert (await js.publish("more", b"x")).stream == "UP"
    info = await js.stream_info("UP")
    assert info.config.max_msgs == 10


async def test_update_can_drop_a_subject(js: JetStreamContext) -> None:
    await js.add_stream(name="UP", subjects=["up.a", "up.b"])
    await js.update_stream(name="UP", subjects=["up.a"])
    with pytest.raises(NoStreamResponseError):
        await js.publish("up.b", b"x")


async def test_update_of_a_missing_stream_is_not_found(js: JetStreamContext) -> None:
    with pytest.raises(NotFoundError) as exc:
        await js.update_stream(name="GHOST", subjects=["ghost"])
    assert exc.value.err_code == 10059


async def test_update_with_another_name_in_the_body_is_a_mismatch(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="UP", subjects=["up.>"])
    resp = await api(nc, "STREAM.UPDATE.UP", {"name": "DOWN", "subjects": ["up.>"]})
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_update_response"
    assert_error(resp, 400, 10056, "stream name in subject does not match request")


async def test_update_without_a_name_is_an_invalid_config(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="UP", subjects=["up.>"])
    assert_error(await api(nc, "STREAM.UPDATE.UP", {}), 500, 10052, NAME_RULE)
    assert_error(await api(nc, "STREAM.UPDATE.UP", b""), 500, 10052, NAME_RULE)


async def test_update_cannot_take_subjects_of_another_stream(js: JetStreamContext) -> None:
    await js.add_stream(name="A", subjects=["a.>"])
    await js.add_stream(name="B", subjects=["b.>"])
    with pytest.raises(BadRequestError) as exc:
        await js.update_stream(name="B", subjects=["b.>", "a.x"])
    assert exc.value.err_code == 10065


async def test_update_cannot_unseal(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="SEAL", subjects=["seal"])
    info = await js.update_stream(name="SEAL", subjects=["seal"], sealed=True)
    # Sealing turns on what a sealed stream implies.
    assert info.config.sealed is True
    assert info.config.deny_delete is True
    assert info.config.deny_purge is True
    assert info.config.discard == "new"
    resp = await api(nc, "STREAM.UPDATE.SEAL", {**info.config.as_dict(), "sealed": False})
    assert_error(resp, 500, 10052, "stream configuration update can not unseal a sealed stream")


@pytest.mark.parametrize(
    ("field", "description"),
    [
        ("deny_delete", "stream configuration update can not cancel deny message deletes"),
        ("deny_purge", "stream configuration update can not cancel deny purge"),
    ],
)
async def test_update_cannot_cancel_deny_flags(nc: Client, field: str, description: str) -> None:
    cfg = {"name": "DENY", "subjects": ["deny"], "deny_delete": True, "deny_purge": True}
    assert "error" not in await api(nc, "STREAM.CREATE.DENY", cfg)
    resp = await api(nc, "STREAM.UPDATE.DENY", {**cfg, field: False})
    assert_error(resp, 500, 10052, description)


@pytest.mark.parametrize(
    ("before", "after"),
    [("limits", "workqueue"), ("workqueue", "limits"), ("workqueue", "interest")],
)
async def test_update_cannot_change_retention_to_or_from_workqueue(
    nc: Client, before: str, after: str
) -> None:
    cfg = {"name": "RET", "subjects": ["ret"], "retention": before}
    assert "error" not in await api(nc, "STREAM.CREATE.RET", cfg)
    resp = await api(nc, "STREAM.UPDATE.RET", {**cfg, "retention": after})
    assert_error(
        resp,
        500,
        10052,
        "stream configuration update can not change retention policy to/from workqueue",
    )


async def test_update_can_change_retention_between_limits_and_interest(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="RET", subjects=["ret"])
    info = await js.update_stream(name="RET", subjects=["ret"], retention=RetentionPolicy.INTEREST)
    assert info.config.retention == RetentionPolicy.INTEREST


async def test_update_keeps_first_seq_when_left_out(js: JetStreamContext) -> None:
    await js.add_stream(name="LATE", subjects=["late"], first_seq=50)
    info = await js.update_stream(name="LATE", subjects=["late"], max_msgs=5)
    assert info.config.first_seq == 50


async def test_update_keeps_the_messages(js: JetStreamContext) -> None:
    await js.add_stream(name="KEEP", subjects=["keep"])
    for i in range(3):
        await js.publish("keep", f"{i}".encode())
    info = await js.update_stream(name="KEEP", subjects=["keep"], description="d")
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (3, 1, 3)
    assert (await js.publish("keep", b"x")).seq == 4


# -- info -----------------------------------------------------------------------------------------


async def test_info_of_a_missing_stream_is_not_found(js: JetStreamContext) -> None:
    with pytest.raises(NotFoundError) as exc:
        await js.stream_info("GHOST")
    assert exc.value.err_code == 10059
    assert exc.value.description == "stream not found"


async def test_info_reports_the_state(js: JetStreamContext) -> None:
    await js.add_stream(name="ST", subjects=["st.>"])
    for subject in ["st.a", "st.b", "st.a"]:
        await js.publish(subject, b"data")
    info = await js.stream_info("ST")
    assert info.state.messages == 3
    assert info.state.bytes > 3 * len(b"data")
    assert (info.state.first_seq, info.state.last_seq) == (1, 3)
    assert info.state.num_deleted is None
    assert info.created is not None


async def test_info_with_subjects_filter_lists_matching_subjects(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="ST", subjects=["st.>"])
    for subject in ["st.a.1", "st.a.2", "st.b.1", "st.a.1"]:
        await js.publish(subject, b"x")
    info = await js.stream_info("ST", subjects_filter="st.a.*")
    assert info.state.subjects == {"st.a.1": 2, "st.a.2": 1}
    raw = await api(nc, "STREAM.INFO.ST", {"subjects_filter": ">"})
    assert raw["state"]["subjects"] == {"st.a.1": 2, "st.a.2": 1, "st.b.1": 1}
    assert (raw["total"], raw["offset"], raw["limit"]) == (3, 0, 100_000)
    raw = await api(nc, "STREAM.INFO.ST")
    assert "subjects" not in raw["state"]


async def test_info_with_deleted_details_lists_deleted_sequences(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="ST", subjects=["st"])
    for i in range(6):
        await js.publish("st", f"{i}".encode())
    for seq in (2, 4, 5):
        await js.delete_msg("ST", seq)
    raw = await api(nc, "STREAM.INFO.ST", {"deleted_details": True})
    assert raw["state"]["num_deleted"] == 3
    assert raw["state"]["deleted"] == [2, 4, 5]
    raw = await api(nc, "STREAM.INFO.ST")
    assert raw["state"]["num_deleted"] == 3
    assert "deleted" not in raw["state"]


async def test_info_with_malformed_json_is_invalid_json(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="ST", subjects=["st"])
    resp = await api(nc, "STREAM.INFO.ST", b"{bad")
    assert resp["error"]["err_code"] == 10025


# -- names and list -----------------------------------------------------------------------------


async def make_four(js: JetStreamContext) -> None:
    for name, subjects in [
        ("B1", ["foo.>"]),
        ("A1", ["bar.*"]),
        ("C1", ["baz"]),
        ("D1", ["foo2.x", "qux.y"]),
    ]:
        await js.add_stream(name=name, subjects=subjects)


async def test_names_are_sorted_with_total_and_limit(nc: Client, js: JetStreamContext) -> None:
    await make_four(js)
    resp = await api(nc, "STREAM.NAMES")
    assert resp == {
        "type": "io.nats.jetstream.api.v1.stream_names_response",
        "total": 4,
        "offset": 0,
        "limit": 1024,
        "streams": ["A1", "B1", "C1", "D1"],
    }


async def test_names_page_from_an_offset(nc: Client, js: JetStreamContext) -> None:
    await make_four(js)
    resp = await api(nc, "STREAM.NAMES", {"offset": 2})
    assert (resp["total"], resp["offset"], resp["streams"]) == (4, 2, ["C1", "D1"])
    resp = await api(nc, "STREAM.NAMES", {"offset": 10})
    assert (resp["total"], resp["offset"], resp["streams"] or []) == (4, 4, [])


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("foo.a", ["B1"]),
        ("bar.>", ["A1"]),
        ("*", ["C1"]),
        (">", ["A1", "B1", "C1", "D1"]),
        ("qux.y", ["D1"]),
        ("nomatch", []),
    ],
)
async def test_names_filtered_by_subject(
    nc: Client, js: JetStreamContext, subject: str, expected: list[str]
) -> None:
    await make_four(js)
    resp = await api(nc, "STREAM.NAMES", {"subject": subject})
    assert resp["total"] == len(expected)
    assert (resp["streams"] or []) == expected


async def test_find_stream_by_subject(js: JetStreamContext) -> None:
    await make_four(js)
    assert await js.find_stream_name_by_subject("foo.bar.baz") == "B1"
    with pytest.raises(NotFoundError):
        await js.find_stream_name_by_subject("elsewhere")


async def test_list_gives_full_infos(nc: Client, js: JetStreamContext) -> None:
    await make_four(js)
    await js.publish("baz", b"x")
    infos = await js.streams_info()
    assert [i.config.name for i in infos] == ["A1", "B1", "C1", "D1"]
    assert [i.state.messages for i in infos] == [0, 0, 1, 0]
    resp = await api(nc, "STREAM.LIST", {"offset": 1, "subject": "foo.>"})
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_list_response"
    assert (resp["total"], resp["offset"], resp["limit"]) == (1, 1, 256)
    assert resp["streams"] == []
    resp = await api(nc, "STREAM.LIST", {"subject": "baz"})
    assert [s["config"]["name"] for s in resp["streams"]] == ["C1"]


async def test_names_with_malformed_json_is_invalid_json(nc: Client) -> None:
    resp = await api(nc, "STREAM.NAMES", b"{x")
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_names_response"
    assert resp["error"]["err_code"] == 10025


# -- delete -------------------------------------------------------------------------------------


async def test_delete_removes_the_stream(js: JetStreamContext) -> None:
    await js.add_stream(name="GONE", subjects=["gone"])
    await js.publish("gone", b"x")
    assert await js.delete_stream("GONE") is True
    with pytest.raises(NotFoundError):
        await js.stream_info("GONE")
    with pytest.raises(NoStreamResponseError):
        await js.publish("gone", b"x")
    with pytest.raises(NotFoundError) as exc:
        await js.delete_stream("GONE")
    assert exc.value.err_code == 10059


async def test_recreated_stream_starts_afresh(js: JetStreamContext) -> None:
    await js.add_stream(name="AGAIN", subjects=["again"])
    for _ in range(3):
        await js.publish("again", b"x")
    await js.delete_stream("AGAIN")
    await js.add_stream(name="AGAIN", subjects=["again"])
    assert (await js.publish("again", b"new")).seq == 1
    info = await js.stream_info("AGAIN")
    assert (info.state.messages, info.state.first_seq) == (1, 1)
    assert (await js.get_msg("AGAIN", 1)).data == b"new"


async def test_delete_takes_an_empty_json_object(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="GONE", subjects=["gone"])
    resp = await api(nc, "STREAM.DELETE.GONE", b"{}")
    assert resp == {"type": "io.nats.jetstream.api.v1.stream_delete_response", "success": True}


async def test_delete_with_a_request_body_is_refused(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="GONE", subjects=["gone"])
    resp = await api(nc, "STREAM.DELETE.GONE", {"force": True})
    assert_error(resp, 400, 10038, "expected an empty request payload")
    assert (await js.stream_info("GONE")).config.name == "GONE"


async def test_deleted_stream_frees_its_subjects(js: JetStreamContext) -> None:
    await js.add_stream(name="OLD", subjects=["shared.>"])
    await js.delete_stream("OLD")
    await js.add_stream(name="NEW", subjects=["shared.x"])
    assert (await js.publish("shared.x", b"x")).stream == "NEW"


# -- account ------------------------------------------------------------------------------------


async def test_account_info_counts_streams_and_storage(js: JetStreamContext) -> None:
    await js.add_stream(name="A", subjects=["a"])
    await js.add_stream(name="B", subjects=["b"])
    await js.publish("a", b"x" * 100)
    account = await js.account_info()
    assert account.streams == 2
    assert account.storage >= 100
    assert account.limits.max_streams == -1


async def test_api_errors_carry_the_response_type(nc: Client) -> None:
    resp = await api(nc, "STREAM.DELETE.GHOST")
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_delete_response"
    assert_error(resp, 404, 10059, "stream not found")
