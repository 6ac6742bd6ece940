"""The live-members view and the roles' names."""

from __future__ import annotations

import pytest

from infinistream.pool import ROLES, LiveMembers, Member, parse_roles


def member(id: str, zone: str, address: str, roles: tuple[str, ...] = ROLES) -> Member:
    return Member(id=id, name=id, address=address, zone=zone, roles=roles)


def test_client_urls_list_this_zone_first_and_each_address_once() -> None:
    view = LiveMembers("B", "z2")
    view.update(
        [
            member("A", "z1", "a:1"),
            member("B", "z2", "b:1"),
            member("C", "z1", "c:1"),
            member("D", "z2", "d:1"),
            member("E", "z2", "b:1"),  # a second worker of B's agent
        ]
    )
    assert view.client_urls() == ["b:1", "d:1", "a:1", "c:1"]
    assert view.me is not None and view.me.address == "b:1"
    assert view.zones() == ["z1", "z2"]


def test_update_reports_changes_and_bumps_the_generation() -> None:
    view = LiveMembers("A", "")
    assert view.update([member("A", "", "a:1")])
    assert view.generation == 1
    assert not view.update([member("A", "", "a:1")])
    assert view.generation == 1
    assert view.update([member("A", "", "a:1"), member("B", "", "b:1")])
    assert [m.id for m in view.members] == ["A", "B"]


def test_with_role_filters_by_role_and_zone() -> None:
    view = LiveMembers("A", "z1")
    view.update(
        [
            member("A", "z1", "a:1", ("publish",)),
            member("B", "z1", "b:1", ("fetch", "cache")),
            member("C", "z2", "c:1", ("cache",)),
        ]
    )
    assert [m.id for m in view.with_role("cache")] == ["B", "C"]
    assert [m.id for m in view.with_role("cache", "z1")] == ["B"]
    assert view.with_role("jobs") == []


def test_parse_roles() -> None:
    assert parse_roles("fetch, publish") == ("publish", "fetch")
    assert parse_roles("all") == ROLES
    with pytest.raises(ValueError, match="unknown role 'store'"):
        parse_roles("publish,store")
    with pytest.raises(ValueError, match="no roles"):
        parse_roles(" , ")
