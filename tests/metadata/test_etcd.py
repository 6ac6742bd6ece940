"""etcd-specific behaviour of the etcd metadata backend (the contract suite runs on etcd too).

- `plan_ops` (merging a txn's ops into writes etcd accepts) checked against applying the ops in
  order, by property, and on a real etcd against SQLite with random txns;
- paging of large ranges, get_many chunking, URL parsing, errors that name the endpoint;
- etcd's own limits (a server with default --max-txn-ops/--max-request-bytes), a restart that
  keeps the data, and failover across the members of a three-member cluster.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infinistream.metadata import (
    Compare,
    Delete,
    DeletePrefix,
    DeleteRange,
    Get,
    Item,
    MetadataError,
    MetadataStore,
    Op,
    Put,
    Scan,
    SqliteMetadataStore,
    open_metadata,
)
from infinistream.metadata.etcd import EtcdMetadataStore, TxnPlan, plan_ops
from infinistream.metadata.sqlite import MEMORY
from support.etcdserver import EtcdServer, free_port

# -- plan_ops, without etcd ----------------------------------------------------------------------

# Keys chosen so that prefixes nest, neighbour and straddle byte boundaries.
KEYS = ["a", "a/", "a/b", "a/b/c", "a/c", "a\x00", "ab", "b", "é", "éa", "\uffff", "😀", "z"]
PREFIXES = ["", "a", "a/", "a/b", "a/b/c", "b", "é", "\uffff", "q"]


def apply_in_order(state: dict[bytes, bytes], ops: list[Op]) -> dict[bytes, bytes]:
    state = dict(state)
    for op in ops:
        if isinstance(op, Put):
            state[op.key.encode()] = op.value
        elif isinstance(op, Delete):
            state.pop(op.key.encode(), None)
        elif isinstance(op, DeleteRange):
            low, high = op.start.encode(), op.end.encode()
            for key in [k for k in state if low <= k < high]:
                del state[key]
        else:
            prefix = op.prefix.encode()
            for key in [k for k in state if k.startswith(prefix)]:
                del state[key]
    return state


def in_range(key: bytes, low: bytes, high: bytes | None) -> bool:
    return low <= key and (high is None or key < high)


def apply_plan(state: dict[bytes, bytes], plan: TxnPlan) -> dict[bytes, bytes]:
    state = dict(state)
    for key in plan.deletes:
        state.pop(key, None)
    for low, high in plan.ranges:
        for key in [k for k in state if in_range(k, low, high)]:
            del state[key]
    state.update(plan.puts)
    return state


def assert_etcd_accepts(plan: TxnPlan) -> None:
    """etcd's rule: no key put twice, no put key inside a deleted key or range."""
    put_keys = [key for key, _ in plan.puts]
    assert len(put_keys) == len(set(put_keys))
    for key in put_keys:
        assert key not in plan.deletes
        assert not any(in_range(key, low, high) for low, high in plan.ranges), key
    for low, high in plan.ranges:
        assert high is None or low < high


op_strategy = st.one_of(
    st.builds(Put, st.sampled_from(KEYS), st.binary(max_size=2)),
    st.builds(Delete, st.sampled_from(KEYS)),
    st.builds(DeletePrefix, st.sampled_from(PREFIXES)),
    st.builds(DeleteRange, st.sampled_from(KEYS + PREFIXES), st.sampled_from(KEYS + PREFIXES)),
)


@settings(max_examples=500, deadline=None)
@given(
    initial=st.dictionaries(st.sampled_from(KEYS).map(str.encode), st.binary(max_size=2)),
    ops=st.lists(op_strategy, max_size=12),
)
def test_plan_equals_applying_ops_in_order(initial: dict[bytes, bytes], ops: list[Op]) -> None:
    plan = plan_ops(ops)
    assert_etcd_accepts(plan)
    assert apply_plan(initial, plan) == apply_in_order(initial, ops)
    assert len(plan) <= 2 * len(ops) + 1


def test_plan_splits_a_prefix_around_later_puts() -> None:
    plan = plan_ops([DeletePrefix("o/"), Put("o/b", b"1"), Put("o/d", b"2"), Put("o/", b"3")])
    assert sorted(plan.puts) == [(b"o/", b"3"), (b"o/b", b"1"), (b"o/d", b"2")]
    assert plan.ranges == [(b"o/\x00", b"o/b"), (b"o/b\x00", b"o/d"), (b"o/d\x00", b"o0")]
    assert plan.deletes == []


def test_plan_drops_writes_that_a_later_prefix_deletes() -> None:
    plan = plan_ops([Put("x/a", b"1"), Delete("x/b"), Put("y", b"2"), DeletePrefix("x/")])
    assert plan.puts == [(b"y", b"2")]
    assert plan.deletes == []
    assert plan.ranges == [(b"x/", b"x0")]


def test_plan_keeps_only_outer_prefixes_and_the_last_write() -> None:
    plan = plan_ops(
        [DeletePrefix("p/q/"), DeletePrefix(""), Put("k", b"1"), Delete("k"), Put("k", b"2")]
    )
    assert plan.puts == [(b"k", b"2")]
    # the empty prefix covers everything: all but "k", up to the end of the keyspace
    assert plan.ranges == [(b"", b"k"), (b"k\x00", None)]


def test_plan_merges_ranges_and_splits_them_around_puts() -> None:
    plan = plan_ops(
        [
            Delete("r/5"),
            DeleteRange("r/1", "r/4"),
            DeleteRange("r/3", "r/6"),
            Put("r/2", b"x"),
            DeletePrefix("s/"),
            DeleteRange("s/x", "t"),
        ]
    )
    assert plan.puts == [(b"r/2", b"x")] and plan.deletes == []
    assert plan.ranges == [(b"r/1", b"r/2"), (b"r/2\x00", b"r/6"), (b"s/", b"t")]


def test_plan_refuses_non_bytes_values() -> None:
    with pytest.raises(TypeError):
        plan_ops([Put("k", "text")])  # type: ignore[arg-type]


# -- a real etcd ---------------------------------------------------------------------------------


@pytest.fixture
async def etcd(etcd_server: EtcdServer) -> AsyncIterator[EtcdMetadataStore]:
    etcd_server.wipe()
    store = open_metadata(etcd_server.url)
    assert isinstance(store, EtcdMetadataStore)
    yield store
    await store.close()


def random_ops(rng: random.Random, keys: list[str], prefixes: list[str]) -> list[Op]:
    ops: list[Op] = []
    for _ in range(rng.randint(0, 10)):
        kind = rng.random()
        if kind < 0.55:
            ops.append(Put(rng.choice(keys), rng.randbytes(rng.randint(0, 3))))
        elif kind < 0.8:
            ops.append(Delete(rng.choice(keys)))
        else:
            ops.append(DeletePrefix(rng.choice(prefixes)))
    return ops


async def test_random_txns_match_sqlite(etcd: EtcdMetadataStore) -> None:
    """Random txns with duplicate keys, nested prefixes and compares: etcd ends like SQLite."""
    keys = [f"t/{k}" for k in KEYS if k]
    prefixes = [f"t/{p}" for p in PREFIXES]
    reference = SqliteMetadataStore(MEMORY)
    rng = random.Random(7)
    try:
        for _ in range(150):
            ops = random_ops(rng, keys, prefixes)
            # compares on current revisions (hold) or stale ones (fail), mapped per store
            mine = {item.key: item.mod_revision for item in await etcd.range("t/")}
            theirs = {item.key: item.mod_revision for item in await reference.range("t/")}
            compared = rng.sample(keys, 2)
            stale = rng.random() < 0.2
            etcd_compares = [Compare(k, mine.get(k, 0) + stale) for k in compared]
            sqlite_compares = [Compare(k, theirs.get(k, 0) + stale) for k in compared]
            before, ref_before = await etcd.revision(), await reference.revision()
            got = await etcd.txn(etcd_compares, ops)
            expected = await reference.txn(sqlite_compares, ops)
            assert got.succeeded == expected.succeeded, ops
            mine_after = [(i.key, i.value) for i in await etcd.range("t/")]
            theirs_after = [(i.key, i.value) for i in await reference.range("t/")]
            assert mine_after == theirs_after, ops
            # The revision moves by one exactly when the data changed: some put survives the
            # merge, or a key went away. SQLite also moves it for a put that a later op of the
            # same txn erased (Put(k) then Delete(k) of a missing k): a net no-op there.
            changed = got.succeeded and (
                bool(plan_ops(ops).puts) or {k for k, _ in mine_after} != set(mine)
            )
            assert got.revision - before == int(changed), ops
            assert expected.revision - ref_before >= int(changed), ops
    finally:
        await reference.close()


async def test_put_after_delete_prefix_keeps_the_put(etcd: EtcdMetadataStore) -> None:
    await etcd.txn([], [*(Put(f"s/{i}", b"old") for i in range(10)), Put("s0", b"neighbour")])
    result = await etcd.txn(
        [],
        [
            DeletePrefix("s/"),
            Put("s/3", b"new"),
            Put("s/30", b"new"),
            Put("s/3", b"newer"),
            Delete("s/30"),
            Put("s/", b"root"),
        ],
    )
    assert result.succeeded
    assert await etcd.range("s") == [
        Item("s/", b"root", result.revision),
        Item("s/3", b"newer", result.revision),
        Item("s0", b"neighbour", result.revision - 1),
    ]


async def test_delete_everything_then_put(etcd: EtcdMetadataStore) -> None:
    await etcd.txn([], [Put(k, b"x") for k in ["a", "\x00", "\uffff", "😀", "zz"]])
    result = await etcd.txn([], [DeletePrefix(""), Put("\x00", b"y"), Put("m", b"z")])
    assert result.succeeded
    assert await etcd.range("") == [
        Item("\x00", b"y", result.revision),
        Item("m", b"z", result.revision),
    ]


async def test_large_txn_and_request(etcd: EtcdMetadataStore) -> None:
    keys = [f"L/{i:06d}" for i in range(20_000)]
    result = await etcd.txn([Compare("L/none", 0)], [Put(k, b"v" * 100) for k in keys])
    assert result.succeeded
    assert len(await etcd.range("L/", keys_only=True)) == 20_000
    # ~9 MiB in one request (above etcd's default 1.5 MiB)
    big = await etcd.txn([], [Put(f"B/{i}", bytes(300_000)) for i in range(30)])
    assert big.succeeded
    result = await etcd.txn([], [DeletePrefix("L/"), *(Put(k, b"w") for k in keys[::2])])
    assert result.succeeded
    assert [i.key for i in await etcd.range("L/", keys_only=True)] == keys[::2]


async def test_paging_matches_one_shot_ranges(etcd_server: EtcdServer) -> None:
    etcd_server.wipe()
    keys = [f"p/{i:03d}" for i in range(95)] + ["p/é", "p/😀", "p/\uffff"]
    paged = EtcdMetadataStore(etcd_server.endpoints, page_size=7)
    whole = EtcdMetadataStore(etcd_server.endpoints, page_size=10_000)
    try:
        await whole.txn([], [Put(k, k.encode()) for k in keys])
        cases = [
            {},
            {"reverse": True},
            {"limit": 20},
            {"limit": 20, "reverse": True},
            {"start": "p/013", "end": "p/091"},
            {"start": "p/013", "end": "p/091", "reverse": True, "limit": 30},
            {"keys_only": True},
            {"keys_only": True, "reverse": True, "limit": 75},
        ]
        for kwargs in cases:
            expected = await whole.range("p/", **kwargs)  # type: ignore[arg-type]
            assert await paged.range("p/", **kwargs) == expected, kwargs  # type: ignore[arg-type]
            assert len(expected) > 7
        assert len(await paged.range("")) == len(keys)
    finally:
        await paged.close()
        await whole.close()


async def test_paged_range_is_one_snapshot(etcd_server: EtcdServer) -> None:
    etcd_server.wipe()
    paged = EtcdMetadataStore(etcd_server.endpoints, page_size=3)
    writer = EtcdMetadataStore(etcd_server.endpoints)
    try:
        first = await writer.txn([], [Put(f"n/{i:02d}", b"0") for i in range(60)])
        stop = asyncio.Event()

        async def churn() -> None:
            i = 0
            while not stop.is_set():
                # every write moves all keys together: a torn read would mix revisions
                await writer.txn([], [Put(f"n/{j:02d}", str(i).encode()) for j in range(60)])
                i += 1

        task = asyncio.create_task(churn())
        try:
            for _ in range(5):
                items = await paged.range("n/")
                assert len(items) == 60
                assert len({(i.value, i.mod_revision) for i in items}) == 1
                assert items[0].mod_revision >= first.revision
        finally:
            stop.set()
            await task
    finally:
        await paged.close()
        await writer.close()


async def test_paged_snapshot_is_one_revision(etcd_server: EtcdServer) -> None:
    # Scans longer than a page go on page by page at the snapshot's revision, while a writer
    # moves every key (and the counter read beside them) in each commit.
    etcd_server.wipe()
    paged = EtcdMetadataStore(etcd_server.endpoints, page_size=3)
    writer = EtcdMetadataStore(etcd_server.endpoints)
    try:
        await writer.txn([], [Put("c", b"0"), *(Put(f"n/{i:02d}", b"0") for i in range(40))])
        stop = asyncio.Event()

        async def churn() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                value = str(i).encode()
                ops = [Put("c", value), *(Put(f"n/{j:02d}", value) for j in range(40))]
                await writer.txn([], ops)

        task = asyncio.create_task(churn())
        try:
            for _ in range(5):
                snap = await paged.snapshot(
                    [Scan("n/"), Get("c"), Scan("n/", reverse=True, keys_only=True, limit=35)]
                )
                counter = snap.item(1)
                assert counter is not None and len(snap.items(0)) == 40
                assert {i.value for i in snap.items(0)} == {counter.value}
                assert {i.mod_revision for i in snap.items(2)} == {counter.mod_revision}
                assert len(snap.items(2)) == 35
        finally:
            stop.set()
            await task
    finally:
        await paged.close()
        await writer.close()


async def test_get_many_in_chunks_is_one_snapshot(etcd_server: EtcdServer) -> None:
    etcd_server.wipe()
    store = open_metadata(etcd_server.url + "?max_txn_ops=16")
    try:
        assert isinstance(store, EtcdMetadataStore)
        rev = (await store.txn([], [Put(f"g/{i:03d}", b"x") for i in range(0, 300, 3)])).revision
        got = await store.get_many([f"g/{i:03d}" for i in range(300)])
        assert got == {f"g/{i:03d}": Item(f"g/{i:03d}", b"x", rev) for i in range(0, 300, 3)}
    finally:
        await store.close()


async def test_errors_name_the_endpoint(etcd: EtcdMetadataStore, etcd_server: EtcdServer) -> None:
    with pytest.raises(MetadataError, match=f"{etcd_server.endpoints[0]}.*key is not provided"):
        await etcd.txn([], [Put("", b"x")])


async def test_the_empty_key_never_exists(etcd: EtcdMetadataStore) -> None:
    rev = (await etcd.txn([], [Put("e", b"1")])).revision
    assert await etcd.get("") is None
    assert await etcd.get_many(["", "e"]) == {"e": Item("e", b"1", rev)}
    assert (await etcd.txn([Compare("", 0)], [Delete(""), Put("e", b"2")])).succeeded
    assert not (await etcd.txn([Compare("", rev)], [Put("e", b"3")])).succeeded
    assert (await etcd.get("e")) == Item("e", b"2", rev + 1)


# -- URLs ------------------------------------------------------------------------------------------


def test_url_forms() -> None:
    store = open_metadata("etcd://10.0.0.1:2379,host-b,[::1]:2380,[::2]")
    assert isinstance(store, EtcdMetadataStore)
    assert store.endpoints == [
        "http://10.0.0.1:2379",
        "http://host-b:2379",
        "http://[::1]:2380",
        "http://[::2]:2379",
    ]
    tls = open_metadata("etcd+https://a:1,b:2/?max_txn_ops=5000&timeout=2.5")
    assert isinstance(tls, EtcdMetadataStore)
    assert tls.endpoints == ["https://a:1", "https://b:2"]
    for bad in [
        "etcd://",
        "etcd://a:1,,b:2",
        "etcd://a:1/namespace",
        "etcd://a:1?bogus=1",
        "etcd://a:1?max_txn_ops=many",
    ]:
        with pytest.raises(ValueError):
            open_metadata(bad)


# -- etcd's limits --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """etcd with its stock limits: 128 ops per txn, 1.5 MiB per request."""
    server = EtcdServer(
        tmp_path_factory.mktemp("etcd-default"), max_txn_ops=None, max_request_bytes=None
    )
    server.start()
    try:
        yield server
    finally:
        server.close()


async def test_stock_etcd_refuses_large_txns_clearly(default_etcd: EtcdServer) -> None:
    store = open_metadata(default_etcd.url)
    try:
        with pytest.raises(MetadataError, match="--max-txn-ops") as too_many:
            await store.txn([], [Put(f"k/{i}", b"") for i in range(129)])
        assert default_etcd.endpoints[0] in str(too_many.value)
        with pytest.raises(MetadataError, match="--max-request-bytes"):
            await store.txn([], [Put(f"k/{i}", bytes(100_000)) for i in range(20)])
        # reads are chunked to the default limit and still work
        rev = (await store.txn([], [Put(f"k/{i}", b"") for i in range(128)])).revision
        got = await store.get_many([f"k/{i}" for i in range(1000)])
        assert got == {f"k/{i}": Item(f"k/{i}", b"", rev) for i in range(128)}
    finally:
        await store.close()


# -- restart and failover -------------------------------------------------------------------------


async def test_restarted_etcd_keeps_data(tmp_path: Path) -> None:
    server = EtcdServer(tmp_path / "etcd")
    server.start()
    try:
        store = open_metadata(server.url)
        try:
            result = await store.txn([], [Put("r/a", b"1"), Put("r/b", b"2")])
            server.stop()
            with pytest.raises(MetadataError, match=server.endpoints[0]):
                await store.get("r/a")
            server.start()
            # the same handle reconnects; the data and the revision survived
            assert await store.revision() == result.revision
            assert await store.range("r/") == [
                Item("r/a", b"1", result.revision),
                Item("r/b", b"2", result.revision),
            ]
            deleted = await store.txn([Compare("r/a", result.revision)], [Delete("r/a")])
            assert deleted.succeeded
            # a crash (SIGKILL) loses nothing that a txn acknowledged either
            server.stop(kill=True)
            server.start()
            assert await store.revision() == deleted.revision
            assert await store.range("r/") == [Item("r/b", b"2", result.revision)]
        finally:
            await store.close()
    finally:
        server.close()


async def test_dead_endpoints_are_skipped(etcd_server: EtcdServer) -> None:
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    store = open_metadata(f"etcd://{dead[0]},{etcd_server.endpoints[0]}")
    nowhere = open_metadata(f"etcd://{dead[0]},{dead[1]}")
    try:
        result = await store.txn([], [Put("d/a", b"1")])
        assert await store.get("d/a") == Item("d/a", b"1", result.revision)
        with pytest.raises(MetadataError) as error:
            await nowhere.revision()
        assert dead[0] in str(error.value) and dead[1] in str(error.value)
        with pytest.raises(MetadataError):
            await nowhere.txn([], [Put("d/b", b"")])
    finally:
        await store.close()
        await nowhere.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd-cluster"), members=3)
    server.start()
    try:
        yield server
    finally:
        server.close()


async def until_ok(store: MetadataStore, deadline: float) -> int:
    """The revision, retrying while the cluster elects a leader (as any client must)."""
    while True:
        try:
            return await store.revision()
        except MetadataError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_failover_when_a_follower_dies(cluster: EtcdServer) -> None:
    leader = cluster.leader()
    follower = next(i for i in range(3) if i != leader)
    others = [i for i in range(3) if i != follower]
    # the store talks to the follower first, then fails over to the rest
    store = open_metadata(cluster.url_for(follower, *others))
    try:
        first = await store.txn([], [Put("f/a", b"1")])
        cluster.stop_member(follower, kill=True)
        # No retry here: the very next read fails over by itself, even over the pooled
        # connection that the kill just broke.
        assert await store.get("f/a") == Item("f/a", b"1", first.revision)
        second = await store.txn([Compare("f/a", first.revision)], [Put("f/a", b"2")])
        assert second.succeeded
        assert await store.get("f/a") == Item("f/a", b"2", second.revision)
    finally:
        await store.close()
        cluster.start_member(follower)
    # the member catches up: a store that only knows it sees the write
    only = open_metadata(cluster.url_for(follower))
    try:
        assert await until_ok(only, time.monotonic() + 10) >= second.revision
        assert await only.get("f/a") == Item("f/a", b"2", second.revision)
    finally:
        await only.close()


async def test_txn_fails_over_to_a_live_member(cluster: EtcdServer) -> None:
    leader = cluster.leader()
    follower = next(i for i in range(3) if i != leader)
    store = open_metadata(cluster.url_for(follower, leader))
    try:
        first = await store.txn([], [Put("x/a", b"1")])
        cluster.stop_member(follower, kill=True)
        await asyncio.sleep(0.1)  # the client sits idle while the member dies
        # the pool drops the closed connection, connecting fails, the txn goes to the leader
        second = await store.txn([Compare("x/a", first.revision)], [Put("x/a", b"2")])
        assert second.succeeded
    finally:
        await store.close()
        cluster.start_member(follower)


async def test_txn_on_a_connection_that_breaks_has_an_unknown_outcome(
    cluster: EtcdServer,
) -> None:
    leader = cluster.leader()
    follower = next(i for i in range(3) if i != leader)
    store = open_metadata(cluster.url_for(follower, leader))
    try:
        await store.txn([], [Put("u/a", b"1")])
        cluster.stop_member(follower, kill=True)
        # Sent at once over the pooled connection to the dead member: a retry could apply a
        # txn twice, so it is not retried; it raises, and the next call starts elsewhere.
        try:
            await store.txn([], [Put("u/a", b"2")])
        except MetadataError as e:
            assert "may or may not have been applied" in str(e)
        assert (await store.txn([], [Put("u/a", b"3")])).succeeded
    finally:
        await store.close()
        cluster.start_member(follower)


async def test_cluster_survives_losing_its_leader(cluster: EtcdServer) -> None:
    leader = cluster.leader()
    store = open_metadata(cluster.url_for(leader, *(i for i in range(3) if i != leader)))
    try:
        first = await store.txn([], [Put("l/a", b"1")])
        cluster.stop_member(leader, kill=True)
        await until_ok(store, time.monotonic() + 15)  # a new leader within a few timeouts
        second = await store.txn([Compare("l/a", first.revision)], [Put("l/a", b"2")])
        assert second.succeeded
    finally:
        await store.close()
        cluster.start_member(leader)


async def test_a_url_that_is_not_an_etcd_client_port(etcd_server: EtcdServer) -> None:
    # the peer port speaks HTTP, but serves no /v3/ gateway
    store = open_metadata(f"etcd://127.0.0.1:{etcd_server.members[0].peer_port}")
    try:
        with pytest.raises(MetadataError, match="/v3/"):
            await store.revision()
    finally:
        await store.close()
