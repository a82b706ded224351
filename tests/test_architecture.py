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
    "_text": 1, "_root": 1, "_jsonable": 1, "_scrub": 1, "_shell": 1, "_gpus": 1, "_elf": 1,
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
