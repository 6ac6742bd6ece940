"""Rendezvous hashing: every agent picks the same owner, and membership changes move only the
blocks they must."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from infinistream.storage.rendezvous import Peer, owner, score

ids = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
peer_sets = st.lists(ids, min_size=1, max_size=8, unique=True).map(
    lambda names: [Peer(name, f"http://{i}") for i, name in enumerate(names)]
)
blocks = st.text(min_size=1, max_size=60)


@given(peer_sets, blocks)
def test_the_owner_is_one_of_the_peers_whatever_their_order(peers: list[Peer], block: str) -> None:
    chosen = owner(block, peers)
    assert chosen in peers
    assert owner(block, list(reversed(peers))) == chosen
    assert owner(block, sorted(peers, key=lambda p: p.url)) == chosen


@given(peer_sets, blocks, ids)
def test_a_joining_peer_takes_only_blocks_it_now_owns(
    peers: list[Peer], block: str, newcomer: str
) -> None:
    before = owner(block, peers)
    if any(p.id == newcomer for p in peers):
        return
    after = owner(block, [*peers, Peer(newcomer, "http://new")])
    assert after == before or (after is not None and after.id == newcomer)


@given(peer_sets, blocks, st.data())
def test_a_leaving_peer_moves_only_its_own_blocks_to_the_runner_up(
    peers: list[Peer], block: str, data: st.DataObject
) -> None:
    gone = data.draw(st.sampled_from(peers))
    rest = [p for p in peers if p != gone]
    before = owner(block, peers)
    after = owner(block, rest)
    if before != gone:
        assert after == before
    elif rest:
        # The runner-up: the best of the others by the same score.
        assert after == max(rest, key=lambda p: (score(p.id, block), p.id))
    else:
        assert after is None


def test_no_peers_no_owner() -> None:
    assert owner("obj#0", []) is None


def test_blocks_spread_over_the_peers() -> None:
    peers = [Peer(f"N{i:02d}", "") for i in range(4)]
    counts = Counter(owner(f"group/objects/{n}#0", peers) for n in range(4000))
    assert set(counts) == set(peers)
    # 1,000 each on average; a fair hash stays far inside these bounds.
    assert all(800 < c < 1200 for c in counts.values()), counts


def test_the_score_is_the_same_in_another_process() -> None:
    # Not Python's salted hash: another agent (another process, another hash seed) computes
    # the same number.
    code = "from infinistream.storage.rendezvous import score; print(score('NABC', 'obj#0'))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    assert int(out.stdout) == score("NABC", "obj#0")
    assert score("NABC", "obj#0") != score("NABD", "obj#0")
    assert score("ab", "c") != score("a", "bc")
