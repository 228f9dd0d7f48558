"""The package's layer rules, read from the source with ``ast``: the pure layer imports nothing heavy, and no
module-level import cycle exists."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llama_index_mhop"
#: Modules of the pure layer: standard library, numpy/scipy and PyStemmer-level dependencies only.
PURE = ("fusion", "parsing", "metrics", "text", "sync", "rwlock", "store_lock", "version_marker", "lazy_exports",
        "counters", "config", "graph.walk.ppr", "graph.walk.push_ppr", "graph.walk.affine_ppr",
        "graph.walk.row_products", "graph.walk.sparse_vector")
HEAVY = ("dspy", "chromadb", "llama_index", "torch")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(module: str) -> list[str]:
    """Absolute names imported when ``module`` is imported: top-level statements, not ``TYPE_CHECKING`` blocks
    and not imports inside functions (those run later, on first use)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: list[str] = []

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = ["llama_index_mhop", *package.split(".")] if package else ["llama_index_mhop"]
                    base_parts = base_parts[: len(base_parts) - node.level + 1]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                names.append(base)
                names.extend(f"{base}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If) and not _is_type_checking(node):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return names


def _internal(name: str) -> str | None:
    """The package module ``name`` refers to (without the ``llama_index_mhop.`` prefix), or None."""
    if not name.startswith("llama_index_mhop"):
        return None
    relative = name.removeprefix("llama_index_mhop").removeprefix(".")
    while relative not in MODULES and "." in relative:
        relative = relative.rpartition(".")[0]
    return relative if relative in MODULES else None


def _edges() -> dict[str, set[str]]:
    return {
        module: {target for name in _module_level_imports(module) if (target := _internal(name)) not in (None, module)}
        for module in MODULES
    }


@pytest.mark.parametrize("module", PURE)
def test_the_pure_layer_imports_nothing_heavy(module):
    """A pure module, and every package module it imports in turn, imports none of dspy, chromadb,
    llama_index or torch."""
    edges = _edges()
    reached, stack = set(), [module]
    while stack:
        current = stack.pop()
        if current in reached:
            continue
        reached.add(current)
        stack.extend(target for target in edges[current] if target)
    for current in sorted(reached):
        heavy = [name for name in _module_level_imports(current) if name.split(".")[0] in HEAVY]
        assert not heavy, f"{current} (imported by the pure module {module}) imports {heavy}"
        assert current in PURE or current == "", f"the pure module {module} imports {current}, which is not pure"


def test_no_module_level_import_cycle():
    edges = _edges()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycle = path[path.index(target) :] + [target]
                pytest.fail("module-level import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(MODULES):
        if module not in state:
            visit(module)


def test_the_rules_see_real_imports():
    """The checks above are only as good as the import reader: it must see the imports that exist."""
    assert "llama_index_mhop.text" in _module_level_imports("confidence_strategies") or any(
        name.startswith("llama_index_mhop.text") for name in _module_level_imports("confidence_strategies")
    )
    assert "dspy" in _module_level_imports("lm")
    assert "llama_index_mhop.bench.context.IndexContext" not in _module_level_imports("cli")  # imported in a function
    assert _internal("llama_index_mhop.graph.walk.ppr.PageRankGraph") == "graph.walk.ppr"
