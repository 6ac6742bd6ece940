"""A run of PubAcks is taken for one inbox only when every reply is a token of it."""

from __future__ import annotations

from infinistream.server.clients import _one_inbox


def test_replies_of_one_inbox() -> None:
    assert _one_inbox([b"_INBOX.a.1", b"_INBOX.a.2", b"_INBOX.a.10"]) == b"_INBOX.a"
    assert _one_inbox([b"r.x", b"r.x"]) == b"r"  # one reply for all


def test_anything_else_is_not_one_inbox() -> None:
    assert _one_inbox([]) is None
    assert _one_inbox(["_INBOX.a.1"]) is None  # text
    assert _one_inbox([b"_INBOX.a.1", "_INBOX.a.2"]) is None
    assert _one_inbox([b"reply"]) is None  # no token
    assert _one_inbox([b"_INBOX.a.1", b"_INBOX.b.2"]) is None
    assert _one_inbox([b"_INBOX.a.1", b"_INBOX.a.2.3"]) is None  # another length
    assert _one_inbox([b"_INBOX.a.1", b"x_INBOX.a.2"]) is None
    assert _one_inbox([b"_INBOX.a.1", b"_INBOX.a"]) is None
    # A newline is no separator a reply may forge.
    assert _one_inbox([b"_INBOX.a.1\n_INBOX.a.2", b"zz"]) is None
