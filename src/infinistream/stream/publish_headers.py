"""The headers with which a publish asks its stream for something: deduplication by id, an
expected stream or last sequence, a rollup (nats-server's JSMsgId, JSExpected*, JSMsgRollup).

Their names live here, below the modules that read or write them: the publish rules, counters,
and message schedules (which store each schedule with a rollup and produce messages with ids).
"""

from __future__ import annotations

MSG_ID = b"Nats-Msg-Id"
EXPECTED_STREAM = b"Nats-Expected-Stream"
EXPECTED_LAST_SEQ = b"Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJECT_SEQ = b"Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = b"Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = b"Nats-Expected-Last-Msg-Id"
ROLLUP = b"Nats-Rollup"
