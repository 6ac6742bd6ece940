"""The detail of a section (stream.sections): what it is charged."""

from __future__ import annotations

import sys

import pytest

from infinistream.stream.sections import strings_bytes


@pytest.mark.parametrize(
    "strings",
    [
        [],
        [""],
        ["orders.eu.1", "orders.us.22", "a"],
        [f"kv.bucket.key-{i}" for i in range(1000)],
        ["ascii", "café", "€uro", "𝄞"],  # one wider string: each is asked its size
    ],
)
def test_strings_are_charged_what_getsizeof_says(strings: list[str]) -> None:
    assert strings_bytes(strings) == sum(map(sys.getsizeof, strings))
