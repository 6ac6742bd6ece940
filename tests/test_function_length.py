"""No function of the package is over 100 lines, so that each reads in one sitting.

Two are let be: the generated JetStream errors module (one short factory per error, written by
scripts/gen_js_errors.py), and the protocol parser's hot loop, `Parser._parse`, which keeps
every frame's parsing in one function on purpose: a call per frame costs throughput.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "infinistream"
MOST_LINES = 100
# (module path under src/infinistream, qualified name); None: the whole module.
EXEMPT = {
    ("jetstream/errors.py", None),
    ("protocol/_parser.py", "Parser._parse"),
}


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """Each function's qualified name and its length in lines, decorators included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                assert node.end_lineno is not None
                yield name, node.end_lineno - first + 1
            yield from _functions(node, f"{name}.")
        else:
            yield from _functions(node, prefix)


def _too_long(path: str, source: str) -> list[str]:
    if (path, None) in EXEMPT:
        return []
    return [
        f"{path} {name}: {lines} lines"
        for name, lines in _functions(ast.parse(source, path))
        if lines > MOST_LINES and (path, name) not in EXEMPT
    ]


def test_no_function_is_over_100_lines() -> None:
    found = []
    for file in sorted(ROOT.rglob("*.py")):
        found += _too_long(file.relative_to(ROOT).as_posix(), file.read_text())
    assert found == []


def test_the_exemptions_are_still_there() -> None:
    # An exemption that no longer names a function would hide a new one of the same name.
    for path, name in EXEMPT:
        names = dict(_functions(ast.parse((ROOT / path).read_text(), path)))
        assert name is None or name in names, (path, name)


def _body(lines: int, indent: str) -> str:
    return "".join(f"{indent}x{i} = {i}\n" for i in range(lines))


def test_the_check_catches_a_long_function() -> None:
    # 100 lines (the def and 99 below it) pass; 101 do not.
    assert _too_long("made_up.py", "def up() -> None:\n" + _body(99, "    ")) == []
    assert _too_long("made_up.py", "def up() -> None:\n" + _body(100, "    ")) == [
        "made_up.py up: 101 lines"
    ]
    # Decorators count; methods and nested functions are named under their class or function.
    method = "class Made:\n    @staticmethod\n    def up() -> None:\n" + _body(99, "        ")
    assert _too_long("made_up.py", method) == ["made_up.py Made.up: 101 lines"]
    nested = "def outer() -> None:\n    def inner() -> None:\n" + _body(100, "        ")
    assert "made_up.py outer.inner: 101 lines" in _too_long("made_up.py", nested)
    # The exemptions hold by path and name only.
    events = "class Parser:\n    def _parse(self) -> None:\n" + _body(200, "        ")
    assert _too_long("protocol/_parser.py", events) == []
    assert _too_long("protocol/_other.py", events) != []
