"""Membership on a real SQLite store: join, renew, drop out when renewals stop, leave."""

from __future__ import annotations

import asyncio
from pathlib import Path

from infinistream.metadata import SqliteMetadataStore
from infinistream.pool import LiveMembers, Member
from infinistream.server.membership import Membership, member_key


def membership(meta: SqliteMetadataStore, id: str, zone: str = "", ttl: float = 0.6) -> Membership:
    view = LiveMembers(id, zone)
    me = Member(id=id, name=id, address=f"{id}:4222", zone=zone)
    return Membership(meta, "g", view, lambda: me, ttl=ttl)


async def test_members_see_each_other_and_a_silent_one_drops_out(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    metas = [SqliteMetadataStore(path) for _ in range(2)]
    a, b = membership(metas[0], "A"), membership(metas[1], "B")
    try:
        for m in (a, b):
            await m.renew()
        for m in (a, b):
            await m.refresh()
        assert [x.id for x in a.view.members] == ["A", "B"]
        assert [x.id for x in b.view.members] == ["A", "B"]
        # B stops renewing (killed): A drops it once a TTL has passed by A's own clock.
        for _ in range(5):
            await asyncio.sleep(a.ttl / 3)
            await a.renew()
            await a.refresh()
        assert [x.id for x in a.view.members] == ["A"]
        # B comes back: seen again at once.
        await b.renew()
        await a.refresh()
        assert [x.id for x in a.view.members] == ["A", "B"]
        # A clean leave deletes the record: B does not wait for a TTL.
        await a.leave()
        assert await metas[1].get(member_key("g", "A")) is None
        await b.refresh()
        assert [x.id for x in b.view.members] == ["B"]
    finally:
        for meta in metas:
            await meta.close()


async def test_a_record_found_stale_on_first_read_is_not_live(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    metas = [SqliteMetadataStore(path) for _ in range(2)]
    try:
        old = membership(metas[0], "OLD", ttl=0.3)
        await old.renew()
        await asyncio.sleep(0.5)
        # A reader that starts after OLD died trusts OLD's clock once: expired, not live.
        fresh = membership(metas[1], "NEW")
        await fresh.renew()
        await fresh.refresh()
        assert [x.id for x in fresh.view.members] == ["NEW"]
    finally:
        for meta in metas:
            await meta.close()


async def test_a_member_that_left_renews_no_more_and_leaves_its_own_view(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    metas = [SqliteMetadataStore(path) for _ in range(2)]
    a, b = membership(metas[0], "A"), membership(metas[1], "B")
    changes: list[list[str]] = []
    try:
        for m in (a, b):
            await m.renew()
        for m in (a, b):
            await m.refresh()
        a.on_change = lambda: changes.append([m.id for m in a.view.members])
        # Lame duck mode: A leaves while it still runs; its own view (its clients'
        # connect_urls) lists only the others at once (lame duck mode tells the clients).
        await a.leave()
        assert [x.id for x in a.view.members] == ["B"]
        assert changes == []
        # Its loop goes on reading, never renewing: B never sees A again.
        task = asyncio.create_task(a.run())
        try:
            for _ in range(4):
                await asyncio.sleep(a.interval)
                await b.renew()
                await b.refresh()
                assert [x.id for x in b.view.members] == ["B"]
                assert await metas[1].get(member_key("g", "A")) is None
        finally:
            task.cancel()
        assert [x.id for x in a.view.members] == ["B"]
    finally:
        for meta in metas:
            await meta.close()
