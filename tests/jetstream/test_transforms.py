"""Subject transforms: every mapping function, and nats-server's refusals with its texts.

The expected subjects are nats-server's (its subject_transform_test.go states the same facts).
"""

from __future__ import annotations

import pytest

from infinistream.jetstream.transforms import (
    BAD_SUBJECT,
    INDEX_OUT_OF_RANGE,
    INVALID_ARG,
    INVALID_TRANSFORM,
    NOT_ENOUGH_ARGS,
    NOT_USING_ALL_WILDCARDS,
    ONLY_WILDCARD_FOR_IMPORT,
    TOO_MANY_ARGS,
    UNKNOWN_FUNCTION,
    Function,
    SubjectTransform,
    TransformError,
    compile_transform,
    placeholder,
    validate_mapping,
)

INT32_MAX = 2**31 - 1


def mapped(src: str, dest: str, subject: str) -> str | None:
    tr = compile_transform(src, dest)
    assert tr is not None
    return tr.transform(subject)


@pytest.mark.parametrize(
    ("src", "dest", "subject", "expected"),
    [
        ("", "prefix.>", "foo", "prefix.foo"),
        ("foo", "bar", "foo", "bar"),
        ("foo.*.bar.*.baz", "req.$2.$1", "foo.A.bar.B.baz", "req.B.A"),
        ("foo.*.bar.*.baz", "req.{{wildcard(2)}}.{{wildcard(1)}}", "foo.A.bar.B.baz", "req.B.A"),
        ("foo.*.bar.*.baz", "req.{{ Wildcard( 2 ) }}.$1", "foo.A.bar.B.baz", "req.B.A"),
        ("baz.>", "my.pre.>", "baz.1.2.3", "my.pre.1.2.3"),
        ("baz.>", "foo.bar.>", "baz.1.2.3", "foo.bar.1.2.3"),
        ("baz.*.>", "x.$1.>", "baz.1.2.3", "x.1.2.3"),
        (">", ">", "a.b", "a.b"),
        ("*", "foo.bar.$1", "foo", "foo.bar.foo"),
        ("*", "{{splitfromleft(1,3)}}", "12345", "123.45"),
        ("*", "{{SplitFromLeft(1,5)}}", "12345", "12345"),
        ("*", "{{SplitFromRight(1,3)}}", "12345", "12.345"),
        ("*", "{{SplitFromRight(1,0)}}", "12345", "12345"),
        ("*", "{{SliceFromLeft(1,3)}}", "1234567890", "123.456.789.0"),
        ("*", "{{SliceFromLeft(1,2)}}", "123456", "12.34.56"),
        ("*", "{{SliceFromRight(1,3)}}", "1234567890", "1.234.567.890"),
        ("*", "{{SliceFromRight(1,3)}}", "123456", "123.456"),
        ("*", "{{SliceFromRight(1,9)}}", "123456", "123456"),
        ("*", "{{split(1,-)}}", "-abc-def--ghi-", "abc.def.ghi"),
        ("*", "{{split(1,-)}}", "abc-def--ghi-", "abc.def.ghi"),
        # Two leading delimiters leave a leading separator, as in nats-server.
        ("*", "x.{{split(1,-)}}", "--abc", "x..abc"),
        ("*", "{{split(1,)}}", "abc", "a.b.c"),
        (
            "*.*",
            "{{split(2,-)}}.{{splitfromleft(1,2)}}",
            "foo.-abc-def--ghij-",
            "abc.def.ghij.fo.o",
        ),
        ("*", "{{right(1,1)}}", "1234", "4"),
        ("*", "{{right(1,3)}}", "1234", "234"),
        ("*", "{{right(1,6)}}", "1234", "1234"),
        ("*", "{{left(1,1)}}", "1234", "1"),
        ("*", "{{left(1,3)}}", "1234", "123"),
        ("*", "{{left(1,6)}}", "1234", "1234"),
        ("*", "bar.{{partition(0)}}", "baz", "bar.0"),
        # Position 0 reads the subject's first token.
        ("*", "bar.{{partition(10, 0)}}", "foo", "bar.3"),
        ("*", "bar.$0", "foo", "bar.foo"),
        ("*.*", "bar.{{partition(10)}}", "foo.bar", "bar.6"),
        ("*", "bar.{{partition(10)}}", "foo", "bar.3"),
        ("*", "bar.{{partition(10)}}", "baz", "bar.0"),
        ("*", "bar.{{partition(10)}}", "qux", "bar.9"),
        # FNV-1a of "foobar" is 0xbf9cf968.
        ("*.*", "{{partition(10,1,2)}}", "foo.bar", "0"),
        ("*", "bar.{{random(0)}}", "qux", "bar.0"),
        # A negative count wraps as Go's uint32 does (seen from nats-server 2.15).
        ("foo.*", "x.{{partition(-3,1)}}", "foo.abc", "x.440920331"),
        ("foo.*", "x.{{partition(-3)}}", "foo.abc", "x.416896901"),
        ("foo.*.*", "x.{{partition(7,2,1)}}", "foo.ab.cd", "x.4"),
        ("a.>", "x.{{partition(5)}}.>", "a.b.c", "x.1.b.c"),
        ("foo.bar", "baz.{{partition(10)}}", "foo.bar", "baz.6"),
        # Without wildcards in the source, the tokens a partition names are ignored.
        ("foo.bar", "baz.{{partition(10,1)}}", "foo.bar", "baz.6"),
        ("foo.baz", "qux.{{partition(10)}}", "foo.baz", "qux.4"),
        ("test.subject", "result.{{partition(5)}}", "test.subject", "result.0"),
        ("foo.*", "bar.$foo.$1", "foo.x", "bar.$foo.x"),
        # A token that starts with '{{' and ends with '}}' is read by the first function found.
        ("foo.*", "bar.{{x}}{{wildcard(1)}}", "foo.x", "bar.x"),
    ],
)
def test_maps_as_nats_server(src: str, dest: str, subject: str, expected: str) -> None:
    assert mapped(src, dest, subject) == expected


def test_partition_of_all_tokens_hashes_the_subject_with_its_dots() -> None:
    # partition(n, 1, 2) hashes the named tokens run together; partition(n) the subject.
    by_tokens = compile_transform("*.*", "{{partition(1000,1,2)}}")
    whole = compile_transform("*.*", "{{partition(1000)}}")
    assert by_tokens is not None and whole is not None
    assert by_tokens.transform("ab.c") == by_tokens.transform("a.bc")
    assert whole.transform("ab.c") != whole.transform("a.bc")


def test_random_stays_within_its_count() -> None:
    seen = {mapped("*", "bar.{{random(6)}}", "qux") for _ in range(300)}
    assert seen == {f"bar.{n}" for n in range(6)}


def test_no_match_or_no_literal_subject_is_none() -> None:
    tr = compile_transform("foo.*", "bar.$1")
    assert tr is not None
    assert tr.transform("baz.x") is None
    assert tr.transform("foo.x.y") is None
    assert tr.transform("foo.*") is None
    assert tr.transform("foo..") is None


def test_no_destination_is_no_transform() -> None:
    assert compile_transform("foo", "") is None
    validate_mapping("foo", "")


def test_a_missing_token_maps_to_nothing() -> None:
    tr = compile_transform("foo.*", "one.two.{{wildcard(1)}}")
    assert tr is not None
    assert tr.apply(["foo"]) == "one.two."


def test_placeholders() -> None:
    assert placeholder("$1").function is Function.WILDCARD
    ph = placeholder("{{ Partition (10,1,2,3) }}")
    assert (ph.function, ph.indexes, ph.number) == (Function.PARTITION, (1, 2, 3), 10)
    ph = placeholder("{{SplitFromRight(3,2)}}")
    assert (ph.function, ph.indexes, ph.number) == (Function.SPLIT_FROM_RIGHT, (3,), 2)
    assert placeholder("{{Left(3,2)}}").function is Function.LEFT
    assert placeholder("{{Right(3,2)}}").function is Function.RIGHT
    assert placeholder("{{SliceFromLeft(2,2)}}").function is Function.SLICE_FROM_LEFT
    assert placeholder("$x").function is Function.NONE
    assert placeholder("{}").function is Function.NONE


@pytest.mark.parametrize(
    ("src", "dest", "strict", "reason", "where"),
    [
        ("foo..", "bar", False, BAD_SUBJECT, ""),
        ("foo.*", "bar.*", False, BAD_SUBJECT, ""),
        ("foo.*", "bar.$1.>", False, BAD_SUBJECT, ""),
        ("foo.>", "bar.baz", False, BAD_SUBJECT, ""),
        ("foo.*", "bar.$2", False, INDEX_OUT_OF_RANGE, "$2: [2]"),
        ("foo.*.*", "bar.$2", True, NOT_USING_ALL_WILDCARDS, "bar.$2"),
        ("foo.*", "foo.$foo", True, NOT_USING_ALL_WILDCARDS, "foo.$foo"),
        (
            "foo.*",
            "bar.{{Partition(2,1)}}",
            True,
            ONLY_WILDCARD_FOR_IMPORT,
            "{{Partition(2,1)}}",
        ),
        (
            "foo.*",
            "foo.{{wildcard(2)}}",
            False,
            INDEX_OUT_OF_RANGE,
            "{{wildcard(2)}}: [2]",
        ),
        (
            "foo.*",
            "foo.{{unimplemented(1)}}",
            False,
            UNKNOWN_FUNCTION,
            "{{unimplemented(1)}}",
        ),
        ("foo.*", "foo.{{partition()}}", False, INVALID_ARG, "{{partition()}}"),
        ("foo.*", "foo.{{random()}}", False, INVALID_ARG, "{{random()}}"),
        ("foo.*", "foo.{{random(1,2)}}", False, NOT_ENOUGH_ARGS, "{{random(1,2)}}"),
        ("foo.*", "foo.{{wildcard(foo)}}", False, INVALID_ARG, "{{wildcard(foo)}}"),
        ("foo.*", "foo.{{wildcard()}}", False, NOT_ENOUGH_ARGS, "{{wildcard()}}"),
        ("foo.*", "foo.{{wildcard(1,2)}}", False, TOO_MANY_ARGS, "{{wildcard(1,2)}}"),
        ("foo.*", "foo.{{ wildcard5) }}", False, UNKNOWN_FUNCTION, "{{ wildcard5) }}"),
        ("foo.*", "foo.{{splitLeft(2,2}}", False, UNKNOWN_FUNCTION, "{{splitLeft(2,2}}"),
        ("foo.*", "foo.{{left(1)}}", False, NOT_ENOUGH_ARGS, "{{left(1)}}"),
        ("foo.*", "foo.{{left(1,2,3)}}", False, TOO_MANY_ARGS, "{{left(1,2,3)}}"),
        ("foo.*", "foo.{{left(1,x)}}", False, INVALID_ARG, "{{left(1,x)}}"),
        (
            "foo.*",
            "foo.{{left(1,2147483648)}}",
            False,
            INVALID_ARG,
            "{{left(1,2147483648)}}",
        ),
        ("foo.*", "foo.{{split(1)}}", False, NOT_ENOUGH_ARGS, "{{split(1)}}"),
        ("foo.*", "foo.{{split(1,a,b)}}", False, TOO_MANY_ARGS, "{{split(1,a,b)}}"),
        ("foo.*", "foo.{{split(1,a b)}}", False, INVALID_ARG, "{{split(1,a b)}}"),
        ("foo", "bla.{{wildcard(1)}}", False, INDEX_OUT_OF_RANGE, "{{wildcard(1)}}"),
        ("foo", "bla.{{left(1,1)}}", False, INDEX_OUT_OF_RANGE, "{{left(1,1)}}"),
        (
            "foo.*",
            f"foo.{{{{partition({INT32_MAX + 1})}}}}",
            False,
            INVALID_ARG,
            f"{{{{partition({INT32_MAX + 1})}}}}",
        ),
        (
            "foo.*",
            f"foo.{{{{random({INT32_MAX + 1})}}}}",
            False,
            INVALID_ARG,
            f"{{{{random({INT32_MAX + 1})}}}}",
        ),
    ],
)
def test_refusals(src: str, dest: str, strict: bool, reason: str, where: str) -> None:
    with pytest.raises(TransformError) as refused:
        compile_transform(src, dest, strict=strict)
    assert str(refused.value) == (f"{reason} in {where}" if where else reason)


@pytest.mark.parametrize(
    ("src", "dest", "strict"),
    [
        ("foo.*", "bar.{{Wildcard(1)}}", True),
        ("foo.*.*", "bar.$2", False),
        ("foo.*.*", "bar.{{wildcard(1)}}", False),
        ("foo.*.*", "bar.{{partition(1)}}", False),
        ("foo.*.*", "bar.{{random(5)}}", False),
        ("foo.*.bar.*.baz", "req.$2.$1", False),
        ("*", "{{splitfromleft(1,1)}}", False),
        ("*.*", "{{partition(10,1,2)}}", False),
        ("foo.*.*", "foo.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(5,1,2)}}", False),
        ("foo.*", f"foo.{{{{partition({INT32_MAX})}}}}", False),
        ("foo.bar", f"foo.{{{{random({INT32_MAX})}}}}", False),
    ],
)
def test_accepted(src: str, dest: str, strict: bool) -> None:
    assert isinstance(compile_transform(src, dest, strict=strict), SubjectTransform)


@pytest.mark.parametrize(
    ("src", "dest", "reason", "where"),
    [
        ("foo.*", "bar..$1", INVALID_TRANSFORM, ""),
        ("foo.>", "bar.>.x", INVALID_TRANSFORM, "x"),
        ("foo.*", "bar. x.$1", INVALID_TRANSFORM, ""),
        ("foo.*", "bar.{{lefty(1,1)}}", UNKNOWN_FUNCTION, "{{lefty(1,1)}}"),
        ("foo.*", "bar.*", BAD_SUBJECT, ""),
    ],
)
def test_validate_mapping_refusals(src: str, dest: str, reason: str, where: str) -> None:
    with pytest.raises(TransformError) as refused:
        validate_mapping(src, dest)
    assert str(refused.value) == (f"{reason} in {where}" if where else reason)
