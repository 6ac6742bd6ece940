"""Sealed sections and values (storage.crypto, storage.keys) and their place in the object
format: what is in clear, what a wrong key gets, what rewrapping changes."""

from __future__ import annotations

import pytest

from infinistream.storage import (
    CODEC_NONE,
    CODEC_SEALED,
    CODEC_ZSTD,
    CorruptObjectError,
    Encryption,
    KeyRefusedError,
    LocalKeys,
    ObjectBuilder,
    decode_records,
    decode_section,
    encode_record,
    parse_object,
)
from infinistream.storage.crypto import SealError, section_key_id, value_key_id
from infinistream.storage.keys import CIPHER_AES, CIPHER_CHACHA, kek_from_text, key_id_of
from infinistream.storage.segment import rewrite_sections

MARK = b"MaRkEr42"


def _enc(key: str, *prev: str, cipher: int = CIPHER_CHACHA) -> Encryption:
    return Encryption(LocalKeys.from_texts(key, prev, cipher=cipher), cipher)


def _object(enc: Encryption | None, codec: int) -> bytes:
    builder = ObjectBuilder(None if enc is None else enc.sealer())
    recs = [
        encode_record(f"a.{MARK.decode()}.{i}", b"NATS/1.0\r\nX: " + MARK + b"\r\n\r\n", MARK * 20)
        for i in range(50)
    ]
    builder.add_section("S1", recs, codec)
    builder.add_section("S2", recs[:3], codec)
    return builder.finish()


def _records(data: bytes, enc: Encryption | None) -> list[list[str]]:
    out = []
    for ref in parse_object(data, keys=enc):
        plain = decode_section(data[ref.offset : ref.end], ref, keys=enc)
        out.append([r.subject for r in decode_records(plain, ref.count)])
    return out


@pytest.mark.parametrize("cipher", [CIPHER_CHACHA, CIPHER_AES])
@pytest.mark.parametrize("compression", [CODEC_NONE, CODEC_ZSTD])
def test_sealed_object_holds_no_plaintext_and_reads_back(cipher: int, compression: int) -> None:
    enc = _enc("k1", cipher=cipher)
    data = _object(enc, compression | CODEC_SEALED)
    assert MARK not in data
    # Stream names and sizes stay in clear (the TOC); the records do not.
    assert b"S1" in data
    assert _records(data, enc) == _records(_object(None, CODEC_NONE), None)
    # Any key configured with another cipher still opens it: the cipher is in the object.
    other = CIPHER_AES if cipher == CIPHER_CHACHA else CIPHER_CHACHA
    assert _records(data, _enc("k1", cipher=other)) == _records(data, enc)


def test_wrong_or_missing_key_is_refused_and_damage_is_corruption() -> None:
    data = _object(_enc("k1"), CODEC_SEALED)
    with pytest.raises(KeyRefusedError, match="no encryption key"):
        parse_object(data)
    with pytest.raises(KeyRefusedError, match="does not hold"):
        parse_object(data, keys=_enc("k2"))
    # A flipped byte in the ciphertext does not authenticate: damage, never garbage.
    ref = parse_object(data, verify=False)[0]
    bad = bytearray(data)
    bad[ref.end - 20] ^= 1
    with pytest.raises(CorruptObjectError):
        decode_section(bytes(bad[ref.offset : ref.end]), ref, keys=_enc("k1"), verify=False)


def test_each_object_has_its_own_data_key_and_each_section_its_nonce() -> None:
    enc = _enc("k1")
    a, b = enc.sealer(), enc.sealer()
    assert a.seal(b"x" * 64) != a.seal(b"x" * 64)
    assert a.seal(b"x")[:60] != b.seal(b"x")[:60]  # the wrapped data keys differ


def test_unencrypted_object_reads_with_keys_configured() -> None:
    data = _object(None, CODEC_ZSTD)
    assert _records(data, _enc("k1")) == _records(data, None)


def test_rewrap_moves_sections_to_the_current_key_without_touching_ciphertext() -> None:
    old = _enc("old")
    data = _object(old, CODEC_SEALED)
    rotating = _enc("new", "old")
    assert rotating.current_id == key_id_of(kek_from_text("new"))
    new_data, pairs = rewrite_sections(data, lambda ref, stored: rotating.rewrap(stored))
    for old_ref, new_ref in pairs:
        before = data[old_ref.offset : old_ref.end]
        after = new_data[new_ref.offset : new_ref.end]
        assert section_key_id(before) == old.current_id
        assert section_key_id(after) == rotating.current_id
        assert before[-40:] == after[-40:]  # same ciphertext and tag
    # The new key alone reads the rewrapped object; the old key alone no longer can.
    assert _records(new_data, _enc("new")) == _records(data, old)
    with pytest.raises(KeyRefusedError):
        parse_object(new_data, keys=old)


def test_metadata_values_are_bound_to_their_key() -> None:
    enc = _enc("k1")
    sealed = enc.seal_value("g/sd/S/i/1", b"\x92" + MARK)
    assert MARK not in sealed and value_key_id(sealed) == enc.current_id
    assert enc.open_value("g/sd/S/i/1", sealed) == b"\x92" + MARK
    assert enc.open_value("g/sd/S/i/1", b"\x92plain") == b"\x92plain"  # written in clear
    with pytest.raises(Exception, match="authenticate"):
        enc.open_value("g/sd/S/i/2", sealed)  # moved to another key
    with pytest.raises(KeyRefusedError):
        _enc("k2").open_value("g/sd/S/i/1", sealed)
    for cut in (5, 30):  # damaged, never garbage
        with pytest.raises(SealError):
            enc.open_value("g/sd/S/i/1", sealed[:cut])


def test_key_text_rules() -> None:
    with pytest.raises(ValueError):
        kek_from_text("  \n")
    assert kek_from_text("abc\n") == kek_from_text("abc")  # a key file's newline
    assert key_id_of(kek_from_text("a")) != key_id_of(kek_from_text("b"))
