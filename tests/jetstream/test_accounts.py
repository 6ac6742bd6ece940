"""Accounts map to groups one-to-one, and no account's group reaches outside its own keys."""

from __future__ import annotations

import pytest

from infinistream.jetstream.accounts import GLOBAL_ACCOUNT, account_group


def test_the_global_account_keeps_the_agents_group() -> None:
    assert account_group("default", GLOBAL_ACCOUNT) == "default"
    assert account_group("prod", GLOBAL_ACCOUNT) == "prod"


@pytest.mark.parametrize(
    "names",
    [
        ["A", "B", "a"],
        ["A/B", "A%2FB", "A@B", "A%40B"],
        ["../x", "..%2Fx", "x y", "x+y", "$G2", "%24G"],
    ],
)
def test_names_map_to_distinct_groups_without_separators(names: list[str]) -> None:
    groups = [account_group("default", name) for name in names]
    assert len(set(groups)) == len(names)
    for group in groups:
        assert "/" not in group
        # One separator: nothing in a name can look like a second one.
        assert group.count("@") == 1 and group.startswith("default@")
