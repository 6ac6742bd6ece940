"""The JetStream API of an account without JetStream (handlers/disabled.py): nats-server's API
subjects answer 503 with their response types, pulls and direct gets find no one, anything
else no answer; the system account answers everything."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infinistream.handlers.disabled import JetStreamDisabled
from infinistream.jetstream.api import TYPE_PREFIX

NOT_ENABLED = {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}


class Sent:
    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = []

    def __call__(self, subject: str, headers: bytes | None, payload: bytes) -> None:
        assert subject == "_R" and headers is None
        self.answers.append(json.loads(payload))


@pytest.mark.parametrize(
    ("subject", "kind"),
    [
        ("INFO", "account_info_response"),
        ("STREAM.CREATE.S", "stream_create_response"),
        ("STREAM.MSG.GET.S", "stream_msg_get_response"),
        ("CONSUMER.CREATE.S.C.f", "consumer_create_response"),
        ("CONSUMER.PAUSE.S.C", "consumer_pause_response"),
    ],
)
async def test_its_subjects_answer_not_enabled(subject: str, kind: str) -> None:
    sent = Sent()
    assert await JetStreamDisabled(sent).handle("$JS.API." + subject, "_R", None, b"")
    assert sent.answers == [{"type": TYPE_PREFIX + kind, "error": NOT_ENABLED}]


async def test_pulls_and_direct_gets_find_no_one_and_others_no_answer() -> None:
    sent = Sent()
    disabled = JetStreamDisabled(sent)
    for subject in ("CONSUMER.MSG.NEXT.S.C", "CONSUMER.MSG.NEXT.S", "DIRECT.GET.S"):
        assert not await disabled.handle("$JS.API." + subject, "_R", None, b"")
    # Not nats-server's (the erase status is InfiniStream's own), or no API subject at all.
    for subject in ("STREAM.ERASE.STATUS.S", "NOT.AN.API", "STREAM.CREATE"):
        assert await disabled.handle("$JS.API." + subject, "_R", None, b"")
    assert sent.answers == []


async def test_the_system_account_answers_every_request() -> None:
    sent = Sent()
    system = JetStreamDisabled(sent, system=True)
    for subject in ("INFO", "CONSUMER.MSG.NEXT.S.C", "NOT.AN.API"):
        assert await system.handle("$JS.API." + subject, "_R", None, b"")
    assert [a["type"] for a in sent.answers] == [
        TYPE_PREFIX + "account_info_response",
        TYPE_PREFIX + "system_response",
        TYPE_PREFIX + "system_response",
    ]
