"""Subject transforms: nats-server's subject mapping (server/subject_transform.go).

A transform maps subjects matched by its source (``src``; empty means ``>``) to its
destination (``dest``). The destination names the source's ``*`` tokens by position, the old
way (``$1``) or with a mapping function in mustache form (``{{wildcard(1)}}``), and may end in
``>`` when the source does. The functions are nats-server's:

- ``wildcard(n)``: the n-th ``*`` token of the source;
- ``partition(count, n...)``: a bucket 0..count-1, the FNV-1a hash of the named tokens (all of
  the subject when none is named);
- ``splitFromLeft(n, pos)``, ``splitFromRight(n, pos)``: the token cut in two at ``pos``;
- ``sliceFromLeft(n, size)``, ``sliceFromRight(n, size)``: the token cut every ``size``;
- ``split(n, delimiter)``: the token cut at each delimiter, empty parts dropped;
- ``left(n, len)``, ``right(n, len)``: the token's first or last ``len`` characters;
- ``random(count)``: a random bucket 0..count-1.

`compile_transform` checks a mapping once (raising `TransformError` with nats-server's text)
and `SubjectTransform.transform` maps a published subject, or answers None when the source
does not match it. Streams (`subject_transform`), sources and republish share this module.

Token lengths count characters where nats-server counts bytes: the same for ASCII subjects.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from enum import Enum

from infinistream.jetstream.subjects import FWC, PWC, matches

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193

# Go's regexp `\s`: ASCII whitespace only.
_S = r"[\t\n\f\r ]"
_ARGS_SEPARATOR = re.compile(r"," + _S + "*")
_ATOI = re.compile(r"[+-]?[0-9]+")

# The messages of nats-server's ErrInvalidMappingDestination family.
BAD_SUBJECT = "invalid subject"
INVALID_TRANSFORM = "invalid mapping destination: invalid transform"
NOT_USING_ALL_WILDCARDS = "invalid mapping destination: not using all of the token wildcard(s)"
UNKNOWN_FUNCTION = "invalid mapping destination: unknown function"
INDEX_OUT_OF_RANGE = "invalid mapping destination: wildcard index out of range"
NOT_ENOUGH_ARGS = "invalid mapping destination: not enough arguments passed to the function"
INVALID_ARG = "invalid mapping destination: function argument is invalid or in the wrong format"
TOO_MANY_ARGS = "invalid mapping destination: too many arguments passed to the function"
ONLY_WILDCARD_FOR_IMPORT = (
    "invalid mapping destination: the only mapping function allowed for import transforms "
    "is {{Wildcard()}}"
)


class TransformError(ValueError):
    """A mapping nats-server refuses; `str()` is its error text."""

    def __init__(self, reason: str, token: str = "") -> None:
        super().__init__(f"{reason} in {token}" if token else reason)
        self.reason = reason


class Function(Enum):
    NONE = "none"
    PARTITION = "partition"
    WILDCARD = "wildcard"
    SPLIT_FROM_LEFT = "splitFromLeft"
    SPLIT_FROM_RIGHT = "splitFromRight"
    SLICE_FROM_LEFT = "sliceFromLeft"
    SLICE_FROM_RIGHT = "sliceFromRight"
    SPLIT = "split"
    LEFT = "left"
    RIGHT = "right"
    RANDOM = "random"


def _function_pattern(name: str) -> re.Pattern[str]:
    # nats-server accepts either case for the first letter of each word of a name.
    words = re.findall(r"[a-z]+|[A-Z][a-z]*", name)
    spelled = "".join(f"[{w[0].lower()}{w[0].upper()}]{w[1:]}" for w in words)
    return re.compile(r"\{\{" + _S + "*" + spelled + _S + r"*\((.*)\)" + _S + r"*\}\}")


# In nats-server's order of trial: a token is read as the first function that matches it.
_PATTERNS: dict[Function, re.Pattern[str]] = {
    fn: _function_pattern(fn.value) for fn in Function if fn is not Function.NONE
}
_INDEX_AND_INT = (
    Function.SPLIT_FROM_LEFT,
    Function.SPLIT_FROM_RIGHT,
    Function.SLICE_FROM_LEFT,
    Function.SLICE_FROM_RIGHT,
    Function.RIGHT,
    Function.LEFT,
)


@dataclass(frozen=True, slots=True)
class Placeholder:
    """What one destination token becomes: itself, or a function of source tokens."""

    function: Function
    # For wildcard(n) and the token functions: wildcard positions (1-based) as written; once
    # compiled, indexes of the subject's tokens.
    indexes: tuple[int, ...] = ()
    number: int = -1
    text: str = ""


_LITERAL = Placeholder(Function.NONE, (-1,))


def _atoi(text: str, *, bits: int = 64) -> int | None:
    """Go's strconv.ParseInt(text, 10, bits): None if not a number or out of range."""
    if _ATOI.fullmatch(text) is None:
        return None
    value = int(text)
    limit = 2 ** (bits - 1)
    return value if -limit <= value < limit else None


def _int32(value: int) -> int:
    """Go's int32(value) conversion: wraps."""
    return (value + 2**31) % 2**32 - 2**31


def _args(pattern: re.Pattern[str], token: str) -> list[str] | None:
    found = pattern.search(token)
    return None if found is None else _ARGS_SEPARATOR.split(found.group(1))


def _index_and_int(token: str, args: list[str], function: Function) -> Placeholder:
    if len(args) < 2:
        raise TransformError(NOT_ENOUGH_ARGS, token)
    if len(args) > 2:
        raise TransformError(TOO_MANY_ARGS, token)
    index = _atoi(args[0].strip(" "))
    number = _atoi(args[1].strip(" "), bits=32)
    if index is None or number is None:
        raise TransformError(INVALID_ARG, token)
    return Placeholder(function, (index,), number)


def _bucket_count(token: str, text: str) -> int:
    count = _atoi(text.strip(" "))
    if count is None or count > _INT32_MAX:
        raise TransformError(INVALID_ARG, token)
    return _int32(count)


def _function_of(token: str) -> Placeholder:
    """The placeholder a `{{...}}` destination token names (nats-server's indexPlaceHolders)."""
    args = _args(_PATTERNS[Function.WILDCARD], token)
    if args is not None:
        if args == [""]:
            raise TransformError(NOT_ENOUGH_ARGS, token)
        if len(args) > 1:
            raise TransformError(TOO_MANY_ARGS, token)
        index = _atoi(args[0].strip(" "))
        if index is None:
            raise TransformError(INVALID_ARG, token)
        return Placeholder(Function.WILDCARD, (index,))
    args = _args(_PATTERNS[Function.PARTITION], token)
    if args is not None:
        count = _bucket_count(token, args[0])
        indexes: list[int] = []
        for arg in args[1:]:
            index = _atoi(arg.strip(" "))
            if index is None:
                raise TransformError(INVALID_ARG, token)
            indexes.append(index)
        return Placeholder(Function.PARTITION, tuple(indexes), count)
    for function in _INDEX_AND_INT:
        args = _args(_PATTERNS[function], token)
        if args is not None:
            return _index_and_int(token, args, function)
    args = _args(_PATTERNS[Function.SPLIT], token)
    if args is not None:
        if len(args) < 2:
            raise TransformError(NOT_ENOUGH_ARGS, token)
        if len(args) > 2:
            raise TransformError(TOO_MANY_ARGS, token)
        index = _atoi(args[0].strip(" "))
        if index is None or " " in args[1] or "." in args[1]:
            raise TransformError(INVALID_ARG, token)
        return Placeholder(Function.SPLIT, (index,), -1, args[1])
    args = _args(_PATTERNS[Function.RANDOM], token)
    if args is not None:
        if len(args) != 1:
            raise TransformError(NOT_ENOUGH_ARGS, token)
        return Placeholder(Function.RANDOM, (), _bucket_count(token, args[0]))
    raise TransformError(UNKNOWN_FUNCTION, token)


def placeholder(token: str) -> Placeholder:
    """What a destination token is: a literal, `$n`, or a mapping function."""
    if len(token) > 1 and token[0] == "$":
        index = _atoi(token[1:])
        # Other things use tokens that start with '$': one that is not `$n` is a literal.
        return _LITERAL if index is None else Placeholder(Function.WILDCARD, (index,))
    if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
        return _function_of(token)
    return _LITERAL


def _subject_info(subject: str) -> tuple[list[str], int, bool] | None:
    """Tokens, number of `*` and whether it ends in `>`; None if not a valid subject."""
    if not subject:
        return None
    tokens = subject.split(".")
    wildcards = 0
    full = False
    for token in tokens:
        if not token or full:
            return None
        if token == FWC:
            full = True
        elif token == PWC:
            wildcards += 1
    return tokens, wildcards, full


def _placeholders_with_wildcards(
    src_tokens: list[str], wildcards: int, dest: str, dest_tokens: list[str], strict: bool
) -> list[Placeholder]:
    # Source token index of each '*', by its position among them (1-based). Position 0 and
    # negative positions read token 0, as in nats-server.
    positions = {n: i for n, i in enumerate((i for i, t in enumerate(src_tokens) if t == PWC), 1)}
    compiled: list[Placeholder] = []
    used = 0
    for token in dest_tokens:
        ph = placeholder(token)
        if strict and ph.function not in (Function.NONE, Function.WILDCARD):
            raise TransformError(ONLY_WILDCARD_FOR_IMPORT, token)
        if ph.function in (Function.NONE, Function.RANDOM):
            compiled.append(ph)
            continue
        used += len(ph.indexes)
        for index in ph.indexes:
            if index > wildcards:
                raise TransformError(INDEX_OUT_OF_RANGE, f"{token}: [{index}]")
        indexes = tuple(positions.get(n, 0) for n in ph.indexes)
        compiled.append(Placeholder(ph.function, indexes, ph.number, ph.text))
    if strict and used < wildcards:
        raise TransformError(NOT_USING_ALL_WILDCARDS, dest)
    return compiled


def _placeholders_literal_source(dest_tokens: list[str]) -> list[Placeholder]:
    compiled: list[Placeholder] = []
    for token in dest_tokens:
        ph = placeholder(token)
        if ph.function is Function.NONE:
            compiled.append(ph)
        elif ph.function in (Function.RANDOM, Function.PARTITION):
            # Without wildcards a partition hashes the whole subject, whatever it names.
            compiled.append(Placeholder(ph.function, (), ph.number))
        else:
            raise TransformError(INDEX_OUT_OF_RANGE, token)
    return compiled


def compile_transform(src: str, dest: str, *, strict: bool = False) -> SubjectTransform | None:
    """Check a mapping as nats-server's NewSubjectTransform does; None for no destination.

    `strict` is for mappings that must be reversible (imports): `{{wildcard()}}` only, and
    every wildcard of the source used.
    """
    if not dest:
        return None
    src = src or FWC
    src_info = _subject_info(src)
    dest_info = _subject_info(dest)
    if src_info is None or dest_info is None or dest_info[1] > 0 or src_info[2] != dest_info[2]:
        raise TransformError(BAD_SUBJECT)
    src_tokens, wildcards, full = src_info
    dest_tokens = dest_info[0]
    if wildcards > 0 or full:
        compiled = _placeholders_with_wildcards(src_tokens, wildcards, dest, dest_tokens, strict)
    else:
        compiled = _placeholders_literal_source(dest_tokens)
    return SubjectTransform(src, dest, tuple(src_tokens), tuple(dest_tokens), tuple(compiled))


def validate_mapping(src: str, dest: str) -> None:
    """nats-server's ValidateMapping: the destination's tokens, then the whole mapping."""
    if not dest:
        return
    after_fwc = False
    for token in dest.split("."):
        if not token or after_fwc:
            raise TransformError(INVALID_TRANSFORM, token)
        if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
            if not any(p.search(token) for p in _PATTERNS.values()):
                raise TransformError(UNKNOWN_FUNCTION, token)
            continue
        if token == FWC:
            after_fwc = True
        elif any(c in token for c in "\t\n\f\r "):
            raise TransformError(INVALID_TRANSFORM)
    compile_transform(src, dest)


def _fnv1a32(data: bytes) -> int:
    h = _FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return h


def _bucket(key: str, count: int) -> str:
    if count == 0:
        return "0"
    # Go's uint32(count): a negative count wraps, as in nats-server.
    return str(_fnv1a32(key.encode()) % (count & 0xFFFFFFFF))


def _split_at(token: str, position: int) -> str:
    if 0 < position < len(token):
        return f"{token[:position]}.{token[position:]}"
    return token


def _slice_from_left(token: str, size: int) -> str:
    if not 0 < size < len(token):
        return token
    return ".".join(token[i : i + size] for i in range(0, len(token), size))


def _slice_from_right(token: str, size: int) -> str:
    if not 0 < size < len(token):
        return token
    head = len(token) % size
    parts = [token[:head]] if head else []
    parts += [token[i : i + size] for i in range(head, len(token), size)]
    return ".".join(parts)


def _split(token: str, delimiter: str) -> str:
    parts = list(token) if not delimiter else token.split(delimiter)
    out: list[str] = []
    for j, part in enumerate(parts):
        out.append(part)
        # nats-server's rule, kept to the letter: a separator before each non-empty part but
        # the first part's, so that two leading delimiters give a leading '.'.
        if j < len(parts) - 1 and parts[j + 1] and not (j == 0 and not part):
            out.append(".")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class SubjectTransform:
    """A checked mapping from `src` to `dest` (made by `compile_transform`)."""

    src: str
    dest: str
    src_tokens: tuple[str, ...]
    dest_tokens: tuple[str, ...]
    placeholders: tuple[Placeholder, ...]

    def transform(self, subject: str) -> str | None:
        """The subject mapped, or None if it is not a literal subject the source matches."""
        if self.src == FWC and self.dest == FWC:
            return subject
        tokens = subject.split(".")
        for token in tokens:
            if not token or token in (PWC, FWC):
                return None
        if self.src != FWC and not matches(self.src, subject):
            return None
        return self.apply(tokens)

    def apply(self, tokens: list[str]) -> str:
        """The destination for a subject's tokens, without checking the source matches."""
        out: list[str] = []
        for i, ph in enumerate(self.placeholders):
            if ph.function is Function.NONE:
                if self.dest_tokens[i] == FWC:
                    break
                out.append(self.dest_tokens[i])
            else:
                out.append(self._function(ph, tokens))
        if self.dest_tokens[-1] == FWC:
            out += tokens[len(self.src_tokens) - 1 :]
        return ".".join(out)

    @staticmethod
    def _function(ph: Placeholder, tokens: list[str]) -> str:
        function = ph.function
        if function is Function.WILDCARD:
            return tokens[ph.indexes[0]] if ph.indexes[0] < len(tokens) else ""
        if function is Function.PARTITION:
            key = "".join(tokens[i] for i in ph.indexes) if ph.indexes else ".".join(tokens)
            return _bucket(key, ph.number)
        if function is Function.RANDOM:
            # Go's % keeps the dividend's sign: a negative count still gives 0..|count|-1.
            return str(random.randrange(2**31) % abs(ph.number)) if ph.number else "0"
        token = tokens[ph.indexes[0]]
        size = ph.number
        if function is Function.SPLIT_FROM_LEFT:
            return _split_at(token, size)
        if function is Function.SPLIT_FROM_RIGHT:
            return _split_at(token, len(token) - size) if 0 < size < len(token) else token
        if function is Function.SLICE_FROM_LEFT:
            return _slice_from_left(token, size)
        if function is Function.SLICE_FROM_RIGHT:
            return _slice_from_right(token, size)
        if function is Function.SPLIT:
            return _split(token, ph.text)
        if function is Function.LEFT:
            return token[:size] if 0 < size < len(token) else token
        return token[len(token) - size :] if 0 < size < len(token) else token
