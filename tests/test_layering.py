"""The import rule: folders are layers and imports point one way (down the table).

Every module under ``ember/`` is parsed (no import needed) and each *module-level*
``import`` of an Ember module is checked against :data:`LAYERS`: a module may import
its own layer or lower ones at top level. Imports inside functions are the documented
escape hatch for late binding (the engine calls ops lazily) and are only checked
against the hard rules in :data:`NEVER`.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "ember"

# Longest matching prefix wins. Read from the real code: dtypes/errors/config and the
# grad-mode switches depend on nothing; devices on dtypes; storage on devices; the
# Tensor on storage; autograd's Node on grad mode; ops (registry, dispatcher, families,
# random, repr) on the Tensor and Node; the engine/forward AD/Function on ops (lazily);
# transforms on autograd; the package __init__ files aggregate everything.
LAYERS = {
    "ember.dtypes": 0,
    "ember.errors": 0,
    "ember.config": 0,
    "ember.autograd.grad_mode": 0,
    "ember.ops.registry": 0,
    "ember.device": 1,
    "ember.storage": 2,
    "ember.tensor": 3,
    "ember.autograd.graph": 4,
    "ember.ops": 5,
    "ember.random": 5,
    "ember._repr": 5,
    "ember.memory": 5,
    "ember.autograd": 6,
    "ember.func": 7,
    "ember": 9,          # the package itself and anything not yet placed in the table
}

# (importer prefix, imported prefix): forbidden even inside functions.
NEVER = [
    ("ember.dtypes", "ember"),
    ("ember.ops", "ember.func"),
    ("ember.autograd.grad_mode", "ember.ops"),
    ("ember.autograd.graph", "ember.ops"),
    ("ember.tensor", "ember.func"),
    ("ember.storage", "ember.ops"),
    ("ember.storage", "ember.autograd"),
    ("ember.storage", "ember.func"),
]

# Hard top-level rules from the architecture (checked in addition to the layer order).
TOP_LEVEL_NEVER = [
    ("ember.device", lambda m: m != "ember.dtypes" and not _under(m, "ember.device")),
    ("ember.tensor", lambda m: _under(m, "ember.ops") or _under(m, "ember.autograd.engine")
     or _under(m, "ember.func")),
    ("ember.storage", lambda m: _under(m, "ember.ops") or _under(m, "ember.autograd.engine")
     or _under(m, "ember.func")),
]


def _under(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def layer(mod: str) -> int:
    best = max((p for p in LAYERS if _under(mod, p)), key=len)
    return LAYERS[best]


def module_name(path: pathlib.Path) -> tuple[str, str]:
    """(module name, package the module's relative imports resolve against)."""
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _is_module(name: str) -> bool:
    p = ROOT.parent.joinpath(*name.split("."))
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists()


def _targets(node, pkg: str, exists=_is_module):
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if _under(a.name, "ember")]
    base = node.module or ""
    if node.level:
        up = pkg.split(".")
        up = up[:len(up) - (node.level - 1)]
        base = ".".join(up + ([node.module] if node.module else []))
    if not _under(base, "ember"):
        return []
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.append(sub if a.name != "*" and exists(sub) else base)
    return out


def _is_type_checking(node) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(source: str, pkg: str, exists=_is_module):
    """(top-level targets, all targets) of one module's source."""
    tree = ast.parse(source)
    top, everything = set(), set()

    def visit_body(body, at_top):
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                ts = _targets(node, pkg, exists)
                everything.update(ts)
                if at_top:
                    top.update(ts)
            elif isinstance(node, (ast.If, ast.Try, ast.With)) and not _is_type_checking(node):
                for field in ("body", "orelse", "finalbody"):
                    visit_body(getattr(node, field, []) or [], at_top)
                for h in getattr(node, "handlers", []):
                    visit_body(h.body, at_top)
            else:
                for child in ast.walk(node):
                    if isinstance(child, (ast.Import, ast.ImportFrom)):
                        everything.update(_targets(child, pkg, exists))
    visit_body(tree.body, True)
    return top, everything


def violations(mod: str, pkg: str, source: str, exists=_is_module) -> list[str]:
    top, everything = imports(source, pkg, exists)
    bad = []
    for t in sorted(top):
        if t == mod or _under(mod, t) and t == pkg:   # a package's own __init__ chain
            continue
        if layer(t) > layer(mod):
            bad.append(f"{mod} (layer {layer(mod)}) imports {t} (layer {layer(t)}) at "
                       f"module level")
        for who, rule in TOP_LEVEL_NEVER:
            if _under(mod, who) and rule(t):
                bad.append(f"{mod} must not import {t} at module level")
    for t in sorted(everything):
        for who, what in NEVER:
            if _under(mod, who) and _under(t, what) and not _under(t, who):
                bad.append(f"{mod} must never import {t} (rule: {who} -/-> {what})")
    return bad


def all_modules():
    for path in sorted(ROOT.rglob("*.py")):
        mod, pkg = module_name(path)
        yield mod, pkg, path.read_text(encoding="utf-8")


def test_every_module_respects_the_layers():
    bad = []
    n = 0
    for mod, pkg, src in all_modules():
        n += 1
        bad.extend(violations(mod, pkg, src))
    assert n > 20, "the layering test found too few modules: is ROOT right?"
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_dtypes_imports_nothing_from_ember():
    top, everything = imports((ROOT / "dtypes.py").read_text(), "ember")
    assert everything == set()


def test_device_imports_only_dtypes():
    for path in (ROOT / "device").rglob("*.py"):
        mod, pkg = module_name(path)
        top, _ = imports(path.read_text(), pkg)
        assert all(t == "ember.dtypes" or _under(t, "ember.device") for t in top), (mod, top)


@pytest.mark.parametrize("source, mod, pkg", [
    ("from .ops import dispatch\n", "ember.tensor", "ember"),
    ("from .autograd.engine import backward\n", "ember.storage", "ember"),
    ("from ..func import grad\n", "ember.ops.arith", "ember.ops"),
    ("def f():\n    from ..func import grad\n", "ember.ops.arith", "ember.ops"),
    ("from ..ops.dispatch import apply\n", "ember.autograd.graph", "ember.autograd"),
    ("def f():\n    from ..ops import arith\n", "ember.autograd.grad_mode", "ember.autograd"),
    ("from ..tensor import Tensor\n", "ember.device.cpu", "ember.device"),
    ("import ember.func\n", "ember.tensor", "ember"),
    ("from . import autograd\n", "ember.dtypes", "ember"),
    ("try:\n    from ..autograd import engine\nexcept ImportError:\n    pass\n",
     "ember.ops.unary", "ember.ops"),
])
def test_checker_catches_upward_imports(source, mod, pkg):
    assert violations(mod, pkg, source), f"not caught: {source!r} in {mod}"


@pytest.mark.parametrize("source, mod, pkg", [
    ("def f():\n    from ..ops.reduce import sum_to\n", "ember.autograd.engine",
     "ember.autograd"),
    ("from ..tensor import Tensor\nfrom . import dispatch\n", "ember.ops.arith", "ember.ops"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .ops import arith\n",
     "ember.tensor", "ember"),
])
def test_checker_allows_downward_and_lazy_imports(source, mod, pkg):
    assert violations(mod, pkg, source) == []
