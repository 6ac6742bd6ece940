"""The package's layers point only down, and no modules import each other in a cycle.

Read from the import statements of every module under src/infinistream (those inside functions
and `if TYPE_CHECKING:` blocks too: a deferred import is still a dependency). `from package
import name` depends on the package itself as well as on its submodule `name`: Python runs the
package's `__init__` first, so a package whose `__init__` imports a submodule that imports the
package back is a cycle. docs/development.md ("Layers") describes the same layers.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "src" / "infinistream"

# Bottom first. A module may import its own package and any package of a lower layer; packages
# of one layer are independent of one another. The top-level `infinistream` module (the
# version) is importable by all.
LAYERS: list[set[str]] = [
    {"pool"},  # the pool's members and roles: pure types every layer may read
    # the wire protocol, the stores, config syntax, logging as nats-server logs
    {"protocol", "metadata", "storage", "natsconf", "logs"},
    {"security"},  # accounts, users, permissions, TLS: config specs and checks
    {"jetstream", "settings"},  # the JetStream API's vocabulary; the agent's settings
    {"stream"},  # streams: records, views, limits, commits, the write buffer, reading
    {"consumer"},  # consumers: config, state and its rules, acks, pull requests
    {"handlers"},  # the JetStream API's handlers
    {"pipeline"},  # the Spark jobs
    {"server"},  # connections, routing, reports, wiring, the agent
    {"cli"},  # the command line
    {"__main__"},
]
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, source: str, is_package: bool, modules: Collection[str]) -> Iterator[str]:
    """The infinistream modules that module `name` (its text `source`) imports."""
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + is_package]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            # `from package import module` runs the package, then imports the module.
            targets = [module]
            targets += [
                f"{module}.{alias.name}"
                for alias in node.names
                if f"{module}.{alias.name}" in modules
            ]
        else:
            continue
        for target in targets:
            if target == "infinistream" or target.startswith("infinistream."):
                yield target


def _graph(sources: Mapping[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Each module's imports, from each module's (text, is a package's __init__)."""
    return {
        name: set(_imports(name, source, is_package, sources)) - {name}
        for name, (source, is_package) in sources.items()
    }


GRAPH = _graph(
    {name: (path.read_text(), path.name == "__init__.py") for name, path in MODULES.items()}
)


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_has_a_layer() -> None:
    packages = {_package(m) for m in MODULES} - {""}
    assert packages <= set(RANK), f"add to LAYERS: {sorted(packages - set(RANK))}"


def _upward(module: str, targets: set[str]) -> list[str]:
    """The targets of another package in `module`'s own layer or above."""
    mine = _package(module)
    return [
        target
        for target in sorted(targets)
        if _package(target) not in ("", mine) and RANK[_package(target)] >= RANK.get(mine, -1)
    ]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    upward = _upward(module, GRAPH[module])
    assert not upward, f"{module} imports from its own layer or above: {upward}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _imports_of_the_benchmark(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if any(name.split(".")[0] == "infinistream_bench" for name in names):
            return True
    return False


def test_only_the_command_line_reaches_the_benchmark_suite() -> None:
    # The benchmark suite is a distribution of its own (bench/), absent from an agent's install:
    # `infinistream bench` hands it its arguments when it is there; nothing else may need it.
    users = {name for name, path in MODULES.items() if _imports_of_the_benchmark(path)}
    assert users == {"infinistream.cli"}


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


def test_the_checks_catch_what_they_are_for() -> None:
    # The graph really is read, imports inside functions included.
    assert "infinistream.stream.catalog" in GRAPH["infinistream.server.tenants"]
    assert "infinistream.pipeline.scheduler" in GRAPH["infinistream.server.wiring"]
    # An upward import, an import across one layer, and a cycle would each be caught.
    assert _upward("infinistream.stream.view", {"infinistream.server.agent"}) == [
        "infinistream.server.agent"
    ]
    assert _upward("infinistream.storage.objects", {"infinistream.metadata.kv"}) == [
        "infinistream.metadata.kv"
    ]
    assert _upward("infinistream.server.agent", {"infinistream.stream.view"}) == []
    cycle = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(cycle) == [["a", "b", "c"]]


def test_a_package_and_its_submodule_importing_each_other_are_a_cycle() -> None:
    # The package re-exports a submodule's name; the submodule takes a sibling from the
    # package (`from package import sibling`, which runs the package's __init__ first).
    made_up = {
        "infinistream.made_up": ("from infinistream.made_up.routes import serve\n", True),
        "infinistream.made_up.routes": ("from infinistream.made_up import pages\n", False),
        "infinistream.made_up.pages": ("", False),
    }
    graph = _graph(made_up)
    assert graph["infinistream.made_up.routes"] == {
        "infinistream.made_up",
        "infinistream.made_up.pages",
    }
    assert _cycles(graph) == [["infinistream.made_up", "infinistream.made_up.routes"]]
    # Relative imports read the same; a sibling imported by its own name is no cycle.
    made_up["infinistream.made_up"] = ("from .routes import serve\n", True)
    assert _cycles(_graph(made_up)) == [["infinistream.made_up", "infinistream.made_up.routes"]]
    made_up["infinistream.made_up.routes"] = ("from infinistream.made_up.pages import x\n", False)
    assert _cycles(_graph(made_up)) == []
