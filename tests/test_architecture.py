"""The layout of docs/architecture.md holds: one-way dependencies, few top-level modules.

Imports are read with :mod:`ast` from every module of the package (at module level and inside
functions); imports under ``if TYPE_CHECKING:`` are for type checking only and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import clusterenv

PACKAGE = Path(clusterenv.__file__).resolve().parent

#: Each part and its layer, in the order of the table in docs/architecture.md: a part may import
#: parts of its own layer or of a lower one, never of a higher one.
LAYERS: dict[str, int] = {
    "findings": 0, "errors": 0,
    "_text": 1, "_root": 1, "_jsonable": 1, "_scrub": 1, "_shell": 1, "_values": 1, "_gpus": 1,
    "_elf": 1,
    "nccl.version": 2, "nccl.gid": 2,
    "_addresses": 3, "_routes": 3, "_resolve": 3, "network": 3, "rdma": 3, "host": 3,
    "sources": 4,
    "config": 5,
    "_facts": 6,
    "filters": 7,
    "nccl": 8,
    "diagnosis": 9,
    "preflight": 10, "nccl_log": 10, "bench": 10,
    "launch": 11, "integrations": 11, "capture": 11, "testing": 11,
    "cli": 12, "_cli": 12, "__main__": 12, "": 12,  # "": the package's own __init__
}
#: Known exceptions, each named in docs/architecture.md.
ALLOWED = {("bench.report", "_cli")}


def part_of(module: str) -> str:
    """``clusterenv.nccl.plan`` -> ``nccl``; ``clusterenv.nccl.gid`` -> ``nccl.gid``."""
    rest = module.split(".")[1:]
    for size in (2, 1):
        if len(rest) >= size and ".".join(rest[:size]) in LAYERS:
            return ".".join(rest[:size])
    return ""


def _runtime_imports(tree: ast.Module) -> list[str]:
    """Every ``clusterenv`` module imported outside ``if TYPE_CHECKING:`` blocks."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "clusterenv":
            continue  # the package root: lazy, any part may read __version__ from it
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [name for name in found if name.startswith("clusterenv.")]


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts).removesuffix(".__init__")
        out[name] = path
    return out


def test_every_part_has_a_layer() -> None:
    for name in modules():
        if name != "clusterenv":
            assert part_of(name) or (name.count(".") == 1 and name.endswith("__main__")), name


def test_dependencies_point_one_way() -> None:
    wrong = []
    for name, path in modules().items():
        me = part_of(name)
        for imported in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            other = part_of(imported)
            short = name.removeprefix("clusterenv.")
            if LAYERS[other] > LAYERS[me] and (short, other) not in ALLOWED:
                wrong.append(f"{name} imports {imported} ({other} is above {me or 'clusterenv'})")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_at_most_24_modules_at_the_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 24, top


def test_the_architecture_page_names_every_package() -> None:
    page = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    missing = [name for name in packages if f"`{name}/`" not in page]
    assert not missing, f"packages missing from docs/architecture.md: {missing}"


def import_graph() -> dict[str, set[str]]:
    """Module -> the clusterenv modules it imports, at module level or inside functions
    (``if TYPE_CHECKING:`` blocks excepted). ``from A import b`` imports ``A`` (whose code
    runs and whose names are read) and, when there is one, the module ``A.b``."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        edges: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                edges.add(node.module)
                edges.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
        graph[name] = {e for e in edges if e in known and e not in (name, "clusterenv")}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_lazy_imports_included() -> None:
    cycles = import_cycles(import_graph())
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def declared_modules() -> tuple[list[str], list[str]]:
    """The public and the internal modules docs/api.md lists under "Which modules are public"."""
    page = (PACKAGE.parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    section = page.split("## Which modules are public", 1)[1].split("\n## ", 1)[0]
    public_part, _, internal_part = section.partition("Internal implementation modules")

    def listed(text: str) -> list[str]:
        return [line.split("`")[1] for line in text.splitlines() if line.startswith("- `")]

    return listed(public_part), listed(internal_part)


def test_every_public_looking_module_is_declared() -> None:
    """A module without a leading underscore is either public (its path and __all__ are kept
    stable) or declared internal in docs/api.md: a new module is a decision, not an accident."""
    public, internal = declared_modules()
    looks_public = {m for m in modules()
                    if not any(part.startswith("_") for part in m.split(".")[1:])}
    undeclared = sorted(looks_public - set(public) - set(internal))
    assert not undeclared, f"modules docs/api.md does not declare: {undeclared}"
    stale = sorted((set(public) | set(internal)) - set(modules()))
    assert not stale, f"docs/api.md declares modules that do not exist: {stale}"
    assert not set(public) & set(internal)


def test_package_inits_only_reexport() -> None:
    """A package's __init__ defines no function or class of its own (a lazy ``__getattr__``
    for PEP 562 excepted): logic lives in a module the package re-exports."""
    offenders = []
    for path in sorted(PACKAGE.rglob("__init__.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in (
                    "__getattr__", "__dir__"):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}: {node.name}")
    assert not offenders, "\n".join(offenders)
