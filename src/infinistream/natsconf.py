"""Parser for nats-server's configuration format (the reference is conf/lex.go and conf/parse.go).

The format in short::

    # comment, // comment
    key: value          key = value          key value
    block { nested: 1 }                      list [1, two, "three"]
    size: 1MB           # 1 MiB; 1M is 1,000,000; 1G is 10**9, 1GB/1GiB is 2**30
    flag: on            # true/false/yes/no/on/off
    port: $PORT         # an earlier key in an enclosing block, else an environment variable
    include ./other.conf

Values become str, int, float, bool, datetime (``2016-05-04T18:53:41Z``), list and dict.
Durations stay strings (``"250ms"``); convert them with :func:`parse_duration`.

Configurations accepted by nats-server parse to the same values here. A few inputs that
nats-server rejects are accepted, where doing so cannot change the meaning of a valid file:
unquoted ``1.5s`` or ``1m30s`` are strings, keys may be followed directly by ``{`` or ``[``,
and a new line may follow ``:``/``=`` at the top level as it may inside blocks.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import re
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "ConfMap",
    "ConfigError",
    "key_line",
    "key_position",
    "load",
    "loads",
    "near_miss",
    "parse_duration",
]


class ConfMap(dict[str, Any]):
    """A block of the configuration: a dict that also knows the line each key is on, so that
    a check of its values can say where a bad one is (nats-server's file:line: messages)."""

    def __init__(self) -> None:
        super().__init__()
        # key -> (line, column), both from 1.
        self.positions: dict[str, tuple[int, int]] = {}


def key_position(block: Any, key: str) -> tuple[int | None, int | None]:
    """The line and column `key` is at in `block`, if the parser recorded them."""
    positions = getattr(block, "positions", None)
    if isinstance(positions, dict) and key in positions:
        line, column = positions[key]
        return line, column
    return None, None


def key_line(block: Any, key: str) -> int | None:
    """The line `key` is on in `block`, if the parser recorded it."""
    return key_position(block, key)[0]


def near_miss(key: str, known: Iterable[str]) -> str | None:
    """The known key that `key` most likely misspells (`lisen` -> `listen`), if one is close:
    what a refusal of an unknown key suggests instead."""
    close = difflib.get_close_matches(key.lower(), sorted(known), n=1, cutoff=0.7)
    return close[0] if close else None


@dataclass(eq=False, repr=False)
class ConfigError(ValueError):
    """A configuration that cannot be parsed; ``line`` and ``path`` say where."""

    message: str
    _: KW_ONLY
    line: int | None = None
    path: str | None = None
    column: int | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        # nats-server's form: file:line:column: message.
        where = self.path or "<config>"
        if self.line is not None:
            where = f"{where}:{self.line}"
            if self.column is not None:
                where = f"{where}:{self.column}"
        return f"{where}: {self.message}"


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a configuration file; ``include`` paths are relative to its directory."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise ConfigError(f"error opening config file: {reason}", path=str(p)) from e
    return _Parser(text, path=str(p), base_dir=p.parent, includes=(os.path.realpath(p),)).parse()


def loads(text: str, *, base_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Parse configuration text; ``include`` paths are relative to ``base_dir`` (default: cwd)."""
    return _Parser(text, path=None, base_dir=Path(base_dir or "."), includes=()).parse()


# Scanning patterns. Go's lexer treats only space and tab as in-line whitespace.
_BLANK_RE = re.compile(r"(?:\s+|#[^\r\n]*|//[^\r\n]*)*")
_SPACES_RE = re.compile(r"[ \t]*")
_COMMENT_RE = re.compile(r"(?:#|//)[^\r\n]*")
_ANY_SPACE_RE = re.compile(r"\s*")
# Bare keys end at whitespace or a key separator (and, leniently, at a block or array start).
_BARE_KEY_RE = re.compile(r"[^\s:={\[]+")
# Unquoted values end where lexString stops: in-line whitespace, new line, ; , ] }.
_BARE_VALUE_RE = re.compile(r"[^ \t\r\n;,\]}]+")
_INCLUDE_PATH_RE = re.compile(r"[^\s;}']+")
_DQ_STRING_RE = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)

_INT_RE = re.compile(r"(-?[0-9]+)(?:([kmgtpe])(ib|b|i)?)?", re.IGNORECASE)
_FLOAT_RE = re.compile(r"-?[0-9]+\.[0-9]+")
_DATETIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_HEX = frozenset("0123456789abcdefABCDEF")
# parse.go: an unquoted value starting with this is a bcrypt hash, not a variable reference.
_BCRYPT_PREFIX = "$2a$"
# parse.go looks environment variables up by parsing "pk=<value>".
_ENV_KEY = "pk"


class _Parser:
    def __init__(
        self,
        text: str,
        *,
        path: str | None,
        base_dir: Path,
        includes: tuple[str, ...],
        env_refs: set[str] | None = None,
    ) -> None:
        self.text = text.removeprefix("\ufeff")
        self.n = len(self.text)
        self.pos = 0
        self.path = path
        self.base_dir = base_dir
        # Real paths of the files being parsed, outermost first, to refuse include cycles.
        self.includes = includes
        # Environment variables being expanded, to refuse reference cycles.
        self.env_refs: set[str] = set() if env_refs is None else env_refs
        # Blocks being built, innermost last: where $variables are looked up.
        self.scopes: list[dict[str, Any]] = []

    # -- helpers ----------------------------------------------------------------------------

    def error(self, message: str, pos: int | None = None) -> ConfigError:
        at = self.pos if pos is None else pos
        return ConfigError(message, line=self.text.count("\n", 0, at) + 1, path=self.path)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < self.n else ""

    def skip(self, pattern: re.Pattern[str]) -> None:
        m = pattern.match(self.text, self.pos)
        if m:
            self.pos = m.end()

    def at_comment(self) -> bool:
        return self.text.startswith(("#", "//"), self.pos)

    # -- structure --------------------------------------------------------------------------

    def parse(self) -> dict[str, Any]:
        root = ConfMap()
        self.scopes.append(root)
        try:
            self.body(root, closing=None, root=True, start=0)
        except RecursionError:
            raise self.error("blocks or arrays nested too deeply") from None
        return root

    def body(self, target: dict[str, Any], *, closing: str | None, root: bool, start: int) -> None:
        """Key/value entries up to ``closing`` (or the end of input at the top level)."""
        while True:
            self.skip(_BLANK_RE)
            c = self.peek()
            if not c:
                if closing:
                    # Reported where the block was opened: that is where to look.
                    raise self.error("unexpected end of input, block is never closed", start)
                return
            if c == closing:
                self.pos += 1
                return
            if root and c == "{":
                # JSON-like files wrap the whole configuration in braces, possibly nested.
                self.pos += 1
                self.body(target, closing="}", root=True, start=self.pos - 1)
                continue
            if root and c == "}" and closing is None:
                # nats-server tolerates a trailing '}' after the configuration.
                self.pos += 1
                self.skip(_BLANK_RE)
                if self.pos < self.n:
                    raise self.error("unexpected '}'", self.pos - 1)
                return
            self.entry(target)
            self.value_end(closing)

    def entry(self, target: dict[str, Any]) -> None:
        key_pos = self.pos
        key, quoted = self.key()
        if not quoted and key.lower() == "include" and self.peek().isspace():
            target.update(self.include())
            return
        # As in lexKeyEnd, new lines may come between a key and its separator or value.
        self.skip(_ANY_SPACE_RE)
        if self.peek() in (":", "="):
            self.pos += 1
            self.skip(_ANY_SPACE_RE)
        c = self.peek()
        if not c or c in ";,}]":
            raise self.error(f"key {key!r} has no value", key_pos)
        target[key] = self.value()
        if isinstance(target, ConfMap):
            line_start = self.text.rfind("\n", 0, key_pos) + 1
            line = self.text.count("\n", 0, key_pos) + 1
            target.positions[key] = (line, key_pos - line_start + 1)

    def key(self) -> tuple[str, bool]:
        c = self.peek()
        if c in ("'", '"'):
            return self.quoted("quoted key"), True
        m = _BARE_KEY_RE.match(self.text, self.pos)
        if not m:
            raise self.error(f"expected a key, found {c!r}")
        self.pos = m.end()
        return m.group(), False

    def quoted(self, what: str) -> str:
        """The text from the quote at the position to the next of the same quote (a key or an
        include path: no escapes)."""
        quote = self.text[self.pos]
        end = self.text.find(quote, self.pos + 1)
        if end < 0:
            raise self.error(f"unterminated {what}")
        text = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return text

    def value_end(self, closing: str | None) -> None:
        """After a value: a new line, ';', ',' or comment, or the end of the enclosing block."""
        self.skip(_SPACES_RE)
        c = self.peek()
        if not c or c == closing or (closing is None and c == "}"):
            return  # body() deals with these
        if self.at_comment():
            self.skip(_COMMENT_RE)
        elif c in "\r\n;,":
            self.pos += 1
        else:
            raise self.error(f"expected a new line, ';' or ',' after a value, found {c!r}")

    def include(self) -> dict[str, Any]:
        start = self.pos
        self.skip(_SPACES_RE)
        c = self.peek()
        if c in ("'", '"'):
            rel = self.quoted("include path")
        elif not c or c in "\r\n[{(\\-" or c.isdigit():
            # lexInclude refuses anything that looks like another kind of value.
            raise self.error("expected an include path", start)
        else:
            m = _INCLUDE_PATH_RE.match(self.text, self.pos)
            assert m is not None  # c is none of the excluded characters
            rel = m.group()
            self.pos = m.end()
        full = self.base_dir / rel
        real = os.path.realpath(full)
        if real in self.includes:
            raise self.error(f"include cycle through {rel!r}", start)
        try:
            text = full.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else e
            raise self.error(f"error opening include file {rel!r}: {reason}", start) from e
        # An included file is parsed on its own (nats-server's ParseFile): it does not see
        # the variables of the file that includes it.
        sub = _Parser(text, path=str(full), base_dir=full.parent, includes=(*self.includes, real))
        return sub.parse()

    # -- values -----------------------------------------------------------------------------

    def value(self) -> Any:
        c = self.peek()
        if c == "[":
            return self.array()
        if c == "{":
            return self.map()
        if c == '"':
            return self.dq_string()
        if c == "'":
            end = self.text.find("'", self.pos + 1)
            if end < 0:
                raise self.error("unterminated string")
            s = self.text[self.pos + 1 : end]
            self.pos = end + 1
            return s
        if c == "(":
            return self.block_string()
        return self.bare()

    def array(self) -> list[Any]:
        start = self.pos
        self.pos += 1
        out: list[Any] = []
        while True:
            self.skip(_BLANK_RE)
            c = self.peek()
            if c == "]":
                self.pos += 1
                return out
            if not c:
                raise self.error("unexpected end of input in array, expected ']'", start)
            if c == ",":
                raise self.error("unexpected ',' in array")
            out.append(self.value())
            self.skip(_SPACES_RE)
            c = self.peek()
            if self.at_comment():
                self.skip(_COMMENT_RE)
            elif c and c in ",\r\n":
                self.pos += 1
            elif c != "]":
                if not c:
                    raise self.error("unexpected end of input in array, expected ']'", start)
                raise self.error(f"expected ',' or ']' in array, found {c!r}")

    def map(self) -> dict[str, Any]:
        start = self.pos
        self.pos += 1
        out = ConfMap()
        self.scopes.append(out)
        try:
            self.body(out, closing="}", root=False, start=start)
        finally:
            self.scopes.pop()
        return out

    def dq_string(self) -> str:
        m = _DQ_STRING_RE.match(self.text, self.pos)
        if not m:
            raise self.error("unterminated string")
        self.pos = m.end()
        return self.unescape(m.group(1), m.start(1))

    def block_string(self) -> str:
        # '(' starts a raw block that ends at a ')' alone at the start of a line (lexBlock);
        # the text between, including its last new line, is the value.
        start = self.pos + 1
        search = start
        while True:
            idx = self.text.find("\n)", search)
            if idx < 0:
                raise self.error("unterminated block, expected ')' on a line of its own")
            after = self.text[idx + 2 : idx + 3]
            if after in ("", "\n", "\r"):
                self.pos = idx + 2
                return self.text[start : idx + 1]
            search = idx + 1

    def bare(self) -> Any:
        start = self.pos
        m = _BARE_VALUE_RE.match(self.text, self.pos)
        if not m:
            raise self.error(f"expected a value, found {self.peek() or 'end of input'!r}")
        tok = m.group()
        self.pos = m.end()
        if "\\" in tok:
            return self.unescape(tok, start)
        low = tok.lower()
        if low in _BOOLS:
            return _BOOLS[low]
        if tok.startswith("$") and not tok.startswith(_BCRYPT_PREFIX):
            return self.variable(tok[1:], start)
        if im := _INT_RE.fullmatch(tok):
            return self.integer(im, start)
        if _FLOAT_RE.fullmatch(tok):
            return float(tok)
        if _DATETIME_RE.fullmatch(tok):
            try:
                return datetime.strptime(tok, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            except ValueError as e:
                raise self.error(f"invalid datetime {tok!r}: {e}", start) from e
        # Anything else is a string: host:port, URLs, durations such as 250ms, plain words.
        return tok

    def integer(self, m: re.Match[str], pos: int) -> int:
        num = int(m.group(1))
        if suffix := m.group(2):
            power = _POWERS[suffix.lower()]
            # k/m/g.. are decimal; kb/ki/kib and the like are binary (parse.go).
            num *= (1024 if m.group(3) else 1000) ** power
        if not _INT64_MIN <= num <= _INT64_MAX:
            raise self.error(f"integer {m.group()!r} is out of range", pos)
        return num

    def unescape(self, raw: str, pos: int) -> str:
        if "\\" not in raw:
            return raw
        # \xXX inserts a raw byte (as in Go), so build bytes and decode once at the end.
        out = bytearray()
        i = 0
        while (j := raw.find("\\", i)) >= 0:
            out += raw[i:j].encode()
            c = raw[j + 1 : j + 2]
            if c == "x":
                hx = raw[j + 2 : j + 4]
                if len(hx) != 2 or not _HEX.issuperset(hx):
                    raise self.error(
                        f"expected two hexadecimal digits after '\\x', got {hx!r}", pos + j
                    )
                out.append(int(hx, 16))
                i = j + 4
            elif c in _ESCAPES:
                out += _ESCAPES[c].encode()
                i = j + 2
            else:
                raise self.error(
                    f'invalid escape character {c!r}; only \\xXX, \\t, \\n, \\r, \\" and \\\\ '
                    "are allowed",
                    pos + j,
                )
        out += raw[i:].encode()
        return out.decode("utf-8", errors="replace")

    def variable(self, name: str, pos: int) -> Any:
        # Keys already seen in the enclosing blocks, innermost first, then the environment.
        for scope in reversed(self.scopes):
            if name in scope:
                # A copy, so that the two places never share (and mutate) one list or dict.
                return copy.deepcopy(scope[name])
        if name in self.env_refs:
            raise self.error(f"variable reference cycle for {name!r}", pos)
        env = os.environ.get(name)
        if env is None:
            raise self.error(f"variable reference for {name!r} can not be found", pos)
        if env == "":
            return ""
        # The environment value is parsed like a config value, so "1MB" is an int and
        # "$OTHER" is followed (with cycle detection).
        self.env_refs.add(name)
        try:
            sub = _Parser(
                f"{_ENV_KEY}={env}",
                path=self.path,
                base_dir=self.base_dir,
                includes=self.includes,
                env_refs=self.env_refs,
            )
            parsed = sub.parse()
        except ConfigError as e:
            raise self.error(
                f"variable reference for {name!r} could not be parsed: {e.message}", pos
            ) from e
        finally:
            self.env_refs.discard(name)
        return parsed.get(_ENV_KEY, "")


# Go's time.ParseDuration units, in nanoseconds.
_DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART_RE = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


def parse_duration(value: str | int | float) -> float:
    """Seconds from a Go duration string (``250ms``, ``1m30s``, ``1.5h``) or a number of seconds.

    Strings follow Go's time.ParseDuration exactly (a unit is required except for ``0``), as
    nats-server reads durations; plain numbers are seconds, its backward-compatible form.
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"invalid duration {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"invalid duration {value!r}")
    return duration_ns(value) / 1_000_000_000


def duration_ns(value: str) -> int:
    """Nanoseconds from Go's time.ParseDuration syntax, exactly (``1.5s``, ``2m30s``, ``-1h``; a
    unit is required except for ``0``); ValueError if it is not one."""
    s = value
    negative = s.startswith("-")
    if s[:1] in ("-", "+"):
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f"invalid duration {value!r}")
    total_ns = 0
    pos = 0
    while pos < len(s):
        m = _DURATION_PART_RE.match(s, pos)
        assert m is not None  # every group is optional
        whole, frac, unit = m.groups()
        if not whole and not frac:
            raise ValueError(f"invalid duration {value!r}")
        if not unit:
            raise ValueError(f"missing unit in duration {value!r}")
        scale = _DURATION_UNITS.get(unit)
        if scale is None:
            raise ValueError(f"unknown unit {unit!r} in duration {value!r}")
        total_ns += int(whole or "0") * scale
        if frac:
            # Integer arithmetic: exact to the nanosecond, truncating like Go.
            total_ns += int(frac) * scale // 10 ** len(frac)
        pos = m.end()
    return -total_ns if negative else total_ns
