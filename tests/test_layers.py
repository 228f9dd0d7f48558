"""The package's layers, read from the layer table of docs/ARCHITECTURE.md and checked against the source with
``ast``: every module is in exactly one row, no import goes to a higher layer (imports inside functions and under
``TYPE_CHECKING`` only where the row says so), the pure layer imports nothing heavy, and no module-level import
cycle exists."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llama_index_mhop"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
#: Libraries the pure layer never imports when it is imported.
HEAVY = ("dspy", "chromadb", "llama_index", "torch")
PURE_LAYER = 1
# "`defaults.py` inside functions", "`a.py` and `b/` only inside functions" in a row's "may import" cell.
_DEFERRED_RULE = re.compile(r"((?:`[^`]+`(?:\s*,\s*|\s+and\s+)?)+)\s+(?:only\s+)?inside functions")
_PATH = re.compile(r"`([^`]+(?:\.py|/))`")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


# -- the layer table ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """A file or folder named in the table: ``graph/walk/ppr.py`` is the module ``graph.walk.ppr``, ``graph/`` the
    package ``graph`` and every module under it, ``__init__.py`` the package's own module ``""``."""

    path: str

    @property
    def module(self) -> str:
        stem = self.path.rstrip("/").removesuffix(".py").replace("/", ".")
        return "" if stem == "__init__" else stem.removesuffix(".__init__")

    @property
    def is_folder(self) -> bool:
        return self.path.endswith("/")

    def covers(self, module: str) -> bool:
        return module == self.module or (self.is_folder and module.startswith(self.module + "."))

    @property
    def specificity(self) -> tuple[int, int]:
        """A file beats any folder; a deeper folder beats the one it is in."""
        return (0 if self.is_folder else 1, self.module.count(".") + bool(self.module))


@dataclass(frozen=True)
class Row:
    """One row of the table: its layer, the files and folders it names, and what they may import inside functions
    (or under ``TYPE_CHECKING``) from higher layers."""

    layer: int
    places: tuple[Place, ...]
    deferred: tuple[Place, ...]
    line: int

    def __str__(self) -> str:
        return f"layer {self.layer} ({', '.join(p.path for p in self.places)}; ARCHITECTURE.md line {self.line})"


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def layer_rows(text: str) -> list[Row]:
    """The rows of the table under the "## Layers" heading."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## Layers"))
    rows: list[Row] = []
    for number, line in enumerate(lines[start + 1 :], start=start + 2):
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        layer = re.match(r"(\d+)\.", cells[0])
        if layer is None:  # the header and the separator
            continue
        deferred = [Place(path) for rule in _DEFERRED_RULE.finditer(cells[3]) for path in _PATH.findall(rule.group(1))]
        rows.append(Row(int(layer.group(1)), tuple(Place(path) for path in _PATH.findall(cells[1])), tuple(deferred),
                        number))
    return rows


ROWS = layer_rows(ARCHITECTURE.read_text(encoding="utf-8"))


def row_of(module: str, rows: list[Row] = ROWS) -> Row:
    """The row whose most specific file or folder names ``module``; a failure when none does, or two do."""
    found = [(place.specificity, row) for row in rows for place in row.places if place.covers(module)]
    if not found:
        pytest.fail(f"the module {module or '__init__'} ({MODULES[module].relative_to(ROOT)}) is in no row of the "
                    "layer table in docs/ARCHITECTURE.md: add its file or folder to the row of its layer")
    best = max(specificity for specificity, _ in found)
    rows_found = [row for specificity, row in found if specificity == best]
    if len(rows_found) > 1:
        pytest.fail(f"the module {module} is named by {len(rows_found)} rows of the layer table: "
                    + "; ".join(map(str, rows_found)))
    return rows_found[0]


# -- the imports of the source ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """An import statement's name (``llama_index_mhop.text.stem``), its line, and whether it runs when its module is
    imported (False inside a function or under ``TYPE_CHECKING``)."""

    name: str
    line: int
    at_import: bool


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str, source: str | None = None) -> list[Import]:
    """Every import of ``module`` with absolute names: at module level (in ``if``, ``try``, ``with`` and class
    bodies too), inside functions, and under ``TYPE_CHECKING``."""
    path = MODULES.get(module)
    is_package = path is not None and path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []

    def names(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        if node.level:
            base_parts = ["llama_index_mhop", *package.split(".")] if package else ["llama_index_mhop"]
            base_parts = base_parts[: len(base_parts) - node.level + 1]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        # "from P import n" names P.n: the module n when it is one, else P (where n is an attribute).
        return [f"{base}.{alias.name}" for alias in node.names]

    def visit(statements: list[ast.AST], at_import: bool) -> None:
        for node in statements:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.extend(Import(name, node.lineno, at_import) for name in names(node))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, False)
            elif isinstance(node, ast.If) and _is_type_checking(node):
                visit(node.body, False)
                visit(node.orelse, at_import)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    block = getattr(node, field, None)
                    if isinstance(block, list):
                        visit([child for child in block if isinstance(child, (ast.stmt, ast.ExceptHandler))],
                              at_import)

    text = path.read_text(encoding="utf-8") if source is None else source
    visit(ast.parse(text).body, True)
    return found


def internal(name: str) -> str | None:
    """The package module ``name`` refers to (without the ``llama_index_mhop.`` prefix), or None."""
    if name != "llama_index_mhop" and not name.startswith("llama_index_mhop."):
        return None
    relative = name.removeprefix("llama_index_mhop").removeprefix(".")
    while relative not in MODULES and "." in relative:
        relative = relative.rpartition(".")[0]
    return relative if relative in MODULES else None


def layer_violations(module: str, imports: list[Import], rows: list[Row] = ROWS) -> list[str]:
    """Each import of ``module`` that goes to a higher layer than its own, as one line naming the module, its layer
    and the import; an import inside a function or under ``TYPE_CHECKING`` may go up only to what its row names
    "inside functions"."""
    own = row_of(module, rows)
    problems = []
    for item in imports:
        target = internal(item.name)
        if target is None or target == module:
            continue
        their = row_of(target, rows)
        if their.layer <= own.layer:
            continue
        if not item.at_import and any(place.covers(target) for place in own.deferred):
            continue
        where = "at module level" if item.at_import else "inside a function or under TYPE_CHECKING"
        problems.append(f"{module or '__init__'} (layer {own.layer}) imports {item.name} (layer {their.layer}) "
                        f"{where}, line {item.line} of {MODULES[module].relative_to(ROOT)}")
    return problems


def _edges() -> dict[str, set[str]]:
    return {
        module: {target for item in imports_of(module) if item.at_import
                 if (target := internal(item.name)) not in (None, module)}
        for module in MODULES
    }


# -- the rules ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_is_in_exactly_one_row(module):
    row_of(module)


def test_every_file_and_folder_of_the_table_exists():
    """A row naming a module that is gone (moved or renamed) would cover nothing and hide the move."""
    missing = [f"{place.path} ({row})" for row in ROWS for place in (*row.places, *row.deferred)
               if not any(place.covers(module) for module in MODULES)]
    assert not missing, "the layer table names files or folders the package does not have: " + "; ".join(missing)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_goes_to_a_higher_layer(module):
    problems = layer_violations(module, imports_of(module))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("module", sorted(module for module in MODULES if row_of(module).layer == PURE_LAYER))
def test_the_pure_layer_imports_nothing_heavy(module):
    """A pure module imports none of dspy, chromadb, llama_index or torch when it is imported (and, by the rule
    above, only pure modules of the package)."""
    heavy = [item.name for item in imports_of(module) if item.at_import and item.name.split(".")[0] in HEAVY]
    assert not heavy, f"{module} (layer {PURE_LAYER}) imports {heavy} at module level"


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


# -- the checks above see what they must --------------------------------------------------------------------------


def test_the_table_is_read():
    assert row_of("text").layer == PURE_LAYER
    assert row_of("graph.walk.ppr").layer == PURE_LAYER  # a file beats its folder
    assert row_of("graph.index").layer == row_of("graph").layer == 4
    assert row_of("retrievers.rrf_fusion").layer == 5 and row_of("defaults").layer == 6
    assert row_of("bench.cli").layer == 7
    assert any(place.module == "defaults" for place in row_of("vector_index").deferred)


def test_the_rules_see_real_imports():
    """The checks are only as good as the import reader: it must see the imports that exist, and where."""
    at_import = {item.name for item in imports_of("confidence_strategies") if item.at_import}
    assert any(name.startswith("llama_index_mhop.text") for name in at_import)
    assert "dspy" in {item.name for item in imports_of("lm") if item.at_import}
    cli = {item.name: item.at_import for item in imports_of("cli")}
    assert cli["llama_index_mhop.bench.context.IndexContext"] is False  # imported in a function
    assert internal("llama_index_mhop.graph.walk.ppr.PageRankGraph") == "graph.walk.ppr"


@pytest.mark.parametrize("statement", ["from llama_index_mhop.defaults import resolve_embed_model",
                                       "import llama_index_mhop.defaults",
                                       "from llama_index_mhop import defaults",
                                       "if True:\n    from llama_index_mhop.defaults import default_chroma_client"])
@pytest.mark.parametrize("module", ["text", "vector_index", "graph.index", "retrievers.rrf_fusion"])
def test_a_module_level_import_of_defaults_below_layer_6_fails(module, statement):
    problems = layer_violations(module, imports_of(module, statement))
    assert problems and f"{module} (layer {row_of(module).layer})" in problems[0]
    assert "llama_index_mhop.defaults" in problems[0] and "(layer 6) at module level" in problems[0]


def test_an_import_inside_a_function_goes_up_only_where_the_row_says_so():
    deferred = "def f():\n    from llama_index_mhop.defaults import resolve_embed_model\n"
    assert not layer_violations("vector_index", imports_of("vector_index", deferred))  # its row allows it
    assert layer_violations("stores", imports_of("stores", deferred))  # its row does not
