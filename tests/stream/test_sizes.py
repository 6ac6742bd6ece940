"""What a message counts for in a stream, from its parts or from what the index keeps."""

from __future__ import annotations

import pytest

from infinistream.storage.segment import RECORD_HEADER_SIZE
from infinistream.stream.sizes import message_size, record_size, section_size

# (subject, headers, data) lengths.
MESSAGES = [(12, 0, 5), (3, 40, 0), (1, 0, 0), (200, 17, 1024)]


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_a_record_length_and_its_header_flag_give_the_message_size(storage: str) -> None:
    for subject, headers, data in MESSAGES:
        length = RECORD_HEADER_SIZE + subject + headers + data
        assert record_size(storage, length, headers > 0) == message_size(
            storage, subject, headers, data
        )


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_a_section_counts_for_its_messages_sizes(storage: str) -> None:
    lengths = [RECORD_HEADER_SIZE + s + h + d for s, h, d in MESSAGES]
    flags = [h > 0 for _, h, _ in MESSAGES]
    total = sum(record_size(storage, n, f) for n, f in zip(lengths, flags, strict=True))
    assert section_size(storage, sum(lengths), len(lengths), sum(flags)) == total


def test_file_storage_counts_four_more_bytes_for_headers() -> None:
    # nats-server's fileStoreMsgSize: 30 bytes of framing, 34 with headers.
    assert message_size("file", 12, 0, 5) == 30 + 17
    assert message_size("file", 12, 10, 5) == 34 + 27
    assert message_size("memory", 12, 10, 5) == 16 + 27
