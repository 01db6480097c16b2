"""No module of ``xlabridge/`` outside ``xlabridge/_upstream/`` reaches a private upstream name.

Private: a dotted path of torch, torch_xla, torch_tpu, jax, jaxlib, libtpu, torchax or triton with
a component that starts with ``_`` (dunders such as ``__version__`` aside), reached in code: an
``import``, an attribute chain from a name bound to one of those modules (by an import, or by
``_optional.require`` / ``importlib.import_module``), a ``getattr``-family call with a constant
attribute name, or a constant module name looked up in ``sys.modules`` or imported by name.
Docstrings, comments and other strings do not count, nor does the attribute name a probe patches
(``installation.replace(xlac, "_get_graph_hash", ...)``). Private attributes of upstream *objects*
cannot be told from xlabridge's own by the source alone: those xlabridge reads are listed
(``PRIVATE_ATTRIBUTES``) and flagged wherever they appear. Inside ``xlabridge/_upstream/`` every
function that reaches a private name is a registered wrapper that declares it. The source is read
with ``ast``, so the test needs none of the upstreams.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "xlabridge"
UPSTREAM = ROOT / "_upstream"
UPSTREAMS = frozenset({"torch", "torch_xla", "torch_tpu", "jax", "jaxlib", "libtpu", "torchax", "triton"})
PRIVATE_ATTRIBUTES = frozenset({
    "_XLAC", "_schema", "_qualified_op_name", "_torchdynamo_orig_backend", "_torchdynamo_orig_callable",
    "_bucket_specs", "_destroy", "_make_wrapper_subclass", "_COMPILER_FNS",
})
"""Private attributes of upstream objects that xlabridge reads (through ``xlabridge._upstream``)."""
_GETATTRS = frozenset({"getattr", "hasattr", "setattr", "delattr"})
_BY_NAME = frozenset({"import_module", "require", "__import__"})


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _first_private(path: str) -> str | None:
    """``torch._C`` for ``torch._C._foo.bar``: the path up to its first private component."""
    parts = path.split(".")
    if parts[0] not in UPSTREAMS:
        return None
    for end, part in enumerate(parts[1:], start=2):
        if _private(part):
            return ".".join(parts[:end])
    return None


def _chain(node: ast.AST) -> tuple[str, list[str]] | None:
    """``("torch", ["_C", "_foo"])`` for ``torch._C._foo``; None unless it starts at a name."""
    attributes = []
    while isinstance(node, ast.Attribute):
        attributes.append(node.attr)
        node = node.value
    return (node.id, attributes[::-1]) if isinstance(node, ast.Name) else None


def _constant_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _bindings(tree: ast.AST) -> dict[str, str]:
    """Each name bound to an upstream module or object, and its dotted path (file-wide)."""
    names = {root: root for root in UPSTREAMS}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and isinstance(node.value, ast.Call) and _called_name(node.value) in _BY_NAME
              and node.value.args and (module := _constant_str(node.value.args[0]))):
            names[node.targets[0].id] = module
    return {name: path for name, path in names.items() if path.split(".")[0] in UPSTREAMS}


def private_accesses(source: str, filename: str = "<source>", *, full: bool = False) -> list[tuple[int, str]]:
    """Each ``(line, private name)`` that ``source`` reaches, in line order: the name up to its first
    private component (``torch._C``), or with ``full`` the whole path (``torch._C._dispatch_key_parse``)."""
    tree = ast.parse(source, filename=filename)
    bound = _bindings(tree)
    found: set[tuple[int, str]] = set()

    def reach(line: int, path: str) -> None:
        if (private := _first_private(path)) is not None:
            found.add((line, path if full else private))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                reach(node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                reach(node.lineno, f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Attribute):
            if node.attr in PRIVATE_ATTRIBUTES:
                found.add((node.lineno, f"<object>.{node.attr}"))
            chain = _chain(node)
            if chain is not None and chain[0] in bound:
                reach(node.lineno, ".".join([bound[chain[0]], *chain[1]]))
        elif isinstance(node, ast.Call):
            name = _called_name(node)
            attribute = _constant_str(node.args[1]) if len(node.args) > 1 else None
            if name in _GETATTRS and attribute is not None:
                if attribute in PRIVATE_ATTRIBUTES:
                    found.add((node.lineno, f"<object>.{attribute}"))
                chain = _chain(node.args[0])
                if chain is not None and chain[0] in bound:
                    reach(node.lineno, ".".join([bound[chain[0]], *chain[1], attribute]))
            elif name in _BY_NAME | {"get"} and node.args and (module := _constant_str(node.args[0])):
                reach(node.lineno, module)
        elif isinstance(node, ast.Subscript) and (module := _constant_str(node.slice)):
            reach(node.lineno, module)  # sys.modules["torch._dynamo"]
    return sorted(found)


def _modules(outside_upstream: bool) -> list[Path]:
    paths = sorted(ROOT.rglob("*.py"))
    return [p for p in paths if (UPSTREAM not in p.parents) == outside_upstream]


def test_the_scan_finds_every_kind_of_access():
    source = '''
"""Docstrings name torch._C._foo freely."""
import sys
import importlib
import torch
import torch._dynamo
import torch_xla.core.xla_model as xm
from torch._guards import CompileContext
from torch_tpu._internal.compile import compiler
from jax._src.lib import xla_client
from xlabridge import _optional

torch._C._dispatch_key_parse("AutocastXLA")
x = torch.Tensor._make_wrapper_subclass
xm._private_helper()
t = _optional.require("torch_xla", "feature")
t._XLAC._get_graph_hash
hasattr(torch, "_dynamo")
sys.modules["torch._dynamo"].callback_handler
importlib.import_module("torch_xla._internal.utils")
something.op._schema.arguments
getattr(target, "_qualified_op_name", "")
torch.__version__, torch.nn.Module, torch.ops.aten.mm.default  # public
installation.replace(owner, "_get_graph_hash", wrap)  # the name a probe patches
'''
    assert private_accesses(source) == [
        (6, "torch._dynamo"), (8, "torch._guards"), (9, "torch_tpu._internal"), (10, "jax._src"),
        (13, "torch._C"), (14, "<object>._make_wrapper_subclass"), (14, "torch.Tensor._make_wrapper_subclass"),
        (15, "torch_xla.core.xla_model._private_helper"),
        (17, "<object>._XLAC"), (17, "torch_xla._XLAC"), (18, "torch._dynamo"), (19, "torch._dynamo"),
        (20, "torch_xla._internal"), (21, "<object>._schema"), (22, "<object>._qualified_op_name"),
    ]


def test_no_module_outside_upstream_reaches_a_private_upstream_name():
    found = [
        f"{path.relative_to(ROOT.parent)}:{line}: {name}"
        for path in _modules(outside_upstream=True)
        for line, name in private_accesses(path.read_text(encoding="utf-8"), str(path))
    ]
    assert not found, (
        "private upstream names reached outside xlabridge/_upstream/ (wrap each in the upstream's module "
        "there, with the releases it was checked on):\n" + "\n".join(found)
    )


def _declared(function: ast.FunctionDef) -> set[str] | None:
    """The names a ``@surface(...)`` decorator of ``function`` declares; None if it has none."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and _called_name(decorator) == "surface":
            names = {_constant_str(arg) for arg in decorator.args[1:]}
            for keyword in decorator.keywords:
                if keyword.arg == "attributes":
                    names |= {f"<object>.{_constant_str(e)}" for e in keyword.value.elts}
            return {name for name in names if name}
    return None


def _covered(name: str, declared: set[str]) -> bool:
    """Whether a declared name is ``name`` or lies below it (``import torch._dynamo`` to reach
    ``torch._dynamo.reset``); an object's attribute, whether one is declared or ends in it."""
    if name.startswith("<object>."):
        attribute = name[len("<object>"):]
        return any(d == name or d.endswith(attribute) or attribute + "." in d for d in declared)
    return any(d == name or d.startswith(name + ".") for d in declared)


def test_each_function_of_the_upstream_modules_declares_what_it_reaches():
    undeclared = []
    for path in _modules(outside_upstream=False):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            body = ast.Module(body=function.body, type_ignores=[])
            reached = {name for _, name in private_accesses(ast.unparse(body), full=True)}
            declared = _declared(function)
            if reached and declared is None:
                undeclared.append(f"{path.name}:{function.lineno} {function.name}: not a @surface wrapper")
                continue
            declared = declared or set()
            missing = {name for name in reached if not _covered(name, declared)}
            if missing:
                undeclared.append(f"{path.name}:{function.lineno} {function.name}: reaches {sorted(missing)}")
    assert not undeclared, "\n".join(undeclared)
