"""The package's imports flow one way: no module of ``xlabridge/`` imports, directly or through
others, a module that imports it back.

Every ``import`` statement counts, wherever it stands (module level, inside a function, under
``TYPE_CHECKING``): a lazy import hides a circle from Python's import machinery, not from the
design. ``from package import name`` is an edge to ``package.name`` where that is a module,
else to the package's ``__init__``; the implicit import of a module's parent packages is not an
edge (every submodule has it). The graph is read from the source with ``ast``, so the test
needs none of the optional dependencies.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "xlabridge"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _targets(module: str, path: Path, node: ast.AST, modules: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        assert isinstance(node, ast.ImportFrom)
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join(package + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    found = set()
    for name in names:
        # ``import a.b.c`` binds ``a`` but loads ``a.b.c``: the edge goes to the deepest module named.
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    """Each module of ``xlabridge`` and the modules of ``xlabridge`` it imports."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(module, path, node, modules)
        edges.discard(module)
        graph[module] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_finder_sees_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_graph_reads_lazy_and_type_checking_imports():
    graph = import_graph()
    # ``xlabridge.hlo`` imports ``xlabridge.tpu`` inside ``kernel_count``: the walk must see it.
    assert "xlabridge.tpu" in graph["xlabridge.hlo"]
    assert "xlabridge.mx._constants" in graph["xlabridge.mx._checks"]


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles in xlabridge/: " + "; ".join(" <-> ".join(c) for c in found)


def test_diagnostics_modules_are_small():
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in (ROOT / "diagnostics").rglob("*.py")
    }
    assert not {name: n for name, n in sizes.items() if n > 500}


def _of(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    return {m: edges for m, edges in graph.items() if m == package or m.startswith(package + ".")}


def test_report_data_imports_nothing_else_of_the_diagnostics():
    graph = import_graph()
    data = _of(graph, "xlabridge.diagnostics.report")
    assert len(data) > 1
    outside = {m: {e for e in edges if e.startswith("xlabridge.diagnostics") and e not in data
                   and e != "xlabridge.diagnostics._fields"}
               for m, edges in data.items()}
    assert not {m: e for m, e in outside.items() if e}


def test_views_import_only_the_report_data():
    graph = import_graph()
    views = _of(graph, "xlabridge.diagnostics.views")
    allowed = set(views) | set(_of(graph, "xlabridge.diagnostics.report"))
    assert not {m: edges - allowed for m, edges in views.items() if edges - allowed}


LAYERS = {
    "errors": 0, "_env": 0, "_version": 0,  # exceptions, environment variables, the version
    "_optional": 1,  # optional dependencies, each said when missing
    "_upstream": 2,  # every private call into torch, torch_xla, torch_tpu and libtpu; the import hook
    "tpu": 3,  # the TPU view: compiles programs for a topology with libtpu
    "hlo": 4, "mx": 4, "torchtpu": 4, "autocast": 4, "pod": 4,  # capabilities built on it
    "diagnostics": 5,  # observes runs and reports on them, over the capabilities
    "backend": 6,  # compiles graphs and tells the diagnostics what it compiled
    "cli": 7, "examples": 7, "xlabridge": 7,  # the command, the bundled scripts, the package's front
}
"""The architecture as data: each top-level part of ``xlabridge/`` and its layer. A part imports
only parts of lower layers; the one exception is the diagnostics' event vocabulary
(``xlabridge.diagnostics.events``), which the capabilities that read XLA's and torch_xla's
records (``pod``) produce directly."""

VOCABULARY = "xlabridge.diagnostics.events"


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "xlabridge"


def test_every_top_level_part_has_a_layer():
    assert {_part(m) for m in import_graph()} == set(LAYERS)


def test_parts_import_only_lower_layers():
    wrong = []
    for module, edges in import_graph().items():
        for target in edges:
            source_part, target_part = _part(module), _part(target)
            if source_part == target_part:
                continue
            vocabulary = target == VOCABULARY or target.startswith(VOCABULARY + ".")
            if LAYERS[target_part] >= LAYERS[source_part] and not vocabulary:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layers: " + "; ".join(sorted(wrong))


def test_the_event_vocabulary_imports_nothing_above_it():
    graph = import_graph()
    vocabulary = _of(graph, VOCABULARY)
    allowed = set(vocabulary) | {"xlabridge.diagnostics._fields"}
    assert not {m: edges - allowed for m, edges in vocabulary.items() if edges - allowed}
