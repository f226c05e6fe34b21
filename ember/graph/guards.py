"""Guards: what a captured graph took from Python, checked before every compiled call.

A traced call reads Python state besides its arguments: tensors reached through globals,
closures, module attributes and optimizer state (lifted as graph inputs, read from *that
object* at every run), and plain values (a float in a dict, a module's ``eps``, the
length of a list it loops over) that the trace folded into the graph. :func:`reach` walks
what the function can reach, recording each such object with the *path* to it
(``G['w']``, ``model.fc.weight``, ``opt.state[...]['exp_avg']``):

* **guards** — the identity of every reachable tensor and of other objects, the value of
  every reachable scalar, the length of every container, compiled into one Python
  function (:class:`Guards`) that the compiled call runs first. A failure retraces, and
  ``explain()`` names the path and what changed. Guarding stays cheap: one attribute or
  item lookup per path step, shared between paths.
* **purity** — the same leaves read before and after the traced call; a difference means
  the function writes Python state (``state["n"] += 1``), which a compiled replay would
  skip, so such a function runs eagerly (a graph break).

What is walked: the function's closure cells and the globals its code names (also in
nested code and in the user functions and classes it reaches), its bound ``self`` and
non-tensor arguments; through them modules (parameters, buffers, submodules, attributes,
hook counts), optimizers (guards on parameters and state tensors only: hyper-parameters are
in the signature and their learning rate is a graph input; they and an LR scheduler's
counters take part in the purity check only), dicts, lists, tuples, small NumPy arrays (by
value: ``ember.tensor(ARRAY)`` is a graph constant) and user objects. Attributes and
string keys of user objects and dicts are followed only when a reached piece of user code
names them (its ``forward``/``__call__`` and the methods named so far: not ``__init__``),
so a counter the function never reads does not cause retraces. Library objects (Ember's,
NumPy's, the standard library's) are guarded by identity and not walked. What the walk
can't reach (deeper than it goes, or only through library code) is read from the same
object at every run, unguarded: ``explain()`` lists such graph inputs.
"""
from __future__ import annotations

import keyword
import os
import sys
import sysconfig
import types
import weakref

import numpy as np

from ..tensor import Tensor
from .guard_paths import (_MAX_ITEMS, _MISSING, _MODULE_STORES, _VALUE, _eval,  # noqa: F401
                          _is_value, _label, _read_leaf, _same, _same_array, _show,
                          _step_key, describe)

__all__ = ["Reach", "Guards", "reach"]

GUARD, WRITES, BOTH = 1, 2, 3   # what a leaf is for (see :class:`Reach`)
_MAX_DEPTH = 6          # steps through user objects and plain containers
_MAX_ARRAY = 4096        # NumPy arrays up to this size are guarded by value
_BUDGET = 20000         # objects visited per walk
_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
_ITERATE = frozenset({"items", "values", "keys"})   # code that names these may read any key
_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIB_DIRS = tuple({os.path.abspath(p) + os.sep for p in (sysconfig.get_paths()["stdlib"],
                                                        sysconfig.get_paths()["purelib"],
                                                        sysconfig.get_paths()["platlib"])})
_USER_FILE: dict = {}


def _user_file(filename) -> bool:
    """Whether code in ``filename`` is the user's (not Ember's, the stdlib's or a package's)."""
    r = _USER_FILE.get(filename)
    if r is None:
        f = os.path.abspath(filename) if filename and not filename.startswith("<") else ""
        r = not f.startswith(_EMBER_DIR) and not f.startswith(_LIB_DIRS) and \
            "site-packages" not in f and "dist-packages" not in f
        _USER_FILE[filename] = r
    return r


def _user_type(tp) -> bool:
    try:
        return _USER_TYPE[tp]
    except (KeyError, TypeError):
        pass
    mod = sys.modules.get(getattr(tp, "__module__", None) or "")
    if mod is None or tp.__module__ == "builtins":
        return False
    f = getattr(mod, "__file__", None)
    r = tp.__module__ == "__main__" or (f is not None and _user_file(f))
    try:
        _USER_TYPE[tp] = r              # NOTE: ~9,000 calls per walk of a small GPT
    except TypeError:
        pass
    return r


_USER_TYPE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _code_names(code, out: set) -> None:
    """Attribute/global names and string constants of ``code`` and its nested code."""
    out.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, str):
            out.add(c)
        elif isinstance(c, types.CodeType):
            _code_names(c, out)


# ---------------------------------------------------------------------- the walk
class Reach:
    """What a function can reach from Python: leaves ``(path, kind, value, use)``.

    ``kind`` is ``"id"`` (identity), ``"value"`` (equality and type), ``"len"`` or
    ``"array"`` (a small NumPy array's contents, against a copy); ``use``
    says what the leaf is for: :data:`GUARD` (checked before each call), :data:`WRITES`
    (compared before and after the traced call) or both. Optimizer state changes during
    a step by design (guard only); a learning rate changes between steps by design but
    must not change inside one, where a scheduler's ``step()`` would not be replayed
    (writes only). ``tensors`` maps ``id(tensor)`` to its paths.
    """

    def __init__(self):
        self.leaves: list = []
        self.tensors: dict = {}
        self.truncated = False
        self.error = None           # what stopped the walk, if anything did
        self.codes: list = []       # the user code objects read (graph/warm_start.py's key)

    def snapshot(self, flat) -> list:
        """The current value of every WRITES leaf (``_MISSING`` where its path fails)."""
        return [_read_leaf(p, k, flat) for p, k, _, use in self.leaves if use & WRITES]

    def writes(self, before: list, flat) -> list:
        """``[(label, old, new)]`` of the WRITES leaves that changed since ``before``."""
        out = []
        leaves = [lf for lf in self.leaves if lf[3] & WRITES]
        for (p, k, _, _), old in zip(leaves, before):
            new = _read_leaf(p, k, flat)
            if not _same(k, old, new):
                out.append((_label(p), _show(k, old), _show(k, new)))
        return out


def _roots(fn, flat, names: set) -> list:
    """``[(path, obj)]`` where the walk starts, and the user code those roots hold."""
    from ..nn.module import Module
    roots = []
    if isinstance(fn, Module):
        roots.append(((("obj", fn, "model"),), fn, BOTH))
    elif isinstance(fn, types.MethodType):
        roots.append(((("obj", fn.__self__, "self"),), fn.__self__, BOTH))
        roots.append(((("obj", fn.__func__, fn.__func__.__name__),), fn.__func__, BOTH))
    else:
        roots.append(((("obj", fn, getattr(fn, "__name__", "fn")),), fn, BOTH))
    for i, a in enumerate(flat):
        if isinstance(a, str):
            names.add(a)
        if isinstance(a, Tensor):
            if a._base is not None:         # a view's base: in-place writes land there
                # NOTE: not guarded: a new batch's slices (``fn(b[:, :-1], b[:, 1:])``)
                # must not retrace; capture_guards guards it when the graph needs it
                roots.append(((("arg", i, f"arg{i}"), ("attr", "_base")), a._base, WRITES))
        elif not _is_value(a):
            roots.append(((("arg", i, f"arg{i}"),), a, BOTH))
    return roots


def reach(fn, flat) -> Reach:
    """Walk everything ``fn`` can reach (see the module docstring)."""
    names: set = set()
    for _ in range(4):      # user code found on the way names more attributes: walk again
        n = len(names)
        w = _Walk(names)
        try:
            for path, obj, use in _roots(fn, flat, names):
                if isinstance(obj, types.FunctionType):
                    w._function(obj)    # the compiled function itself, wherever it lives
                w.visit(obj, path, 0, use)
            w.methods()
        except Exception as e:  # noqa: BLE001 — odd user objects: guard what was found
            w.r.error = f"{type(e).__name__}: {e}"
        if len(names) == n:
            break
    w.r.codes = [c for c in w.keep if isinstance(c, types.CodeType)]
    return w.r


class _Walk:
    def __init__(self, names: set):
        self.names = names
        self.r = Reach()
        self.seen: dict = {}       # id(walked object) -> its first path
        self.code: set = set()     # id() of the code objects read
        self.classes: list = []    # user classes met (their methods: see ``methods``)
        self.keep: list = []
        self.budget = _BUDGET

    def leaf(self, path, kind, value, use):
        self.r.leaves.append((path, kind, value, use))

    def visit(self, obj, path, depth, use):
        """Record ``obj`` reached at ``path`` (``depth`` steps through plain objects)."""
        self.budget -= 1
        if self.budget < 0:
            self.r.truncated = True
            return
        if isinstance(obj, Tensor):
            self.r.tensors.setdefault(id(obj), []).append(path)
            self.leaf(path, "id", obj, use)
            return
        if isinstance(obj, np.ndarray) and obj.size <= _MAX_ARRAY:
            # NOTE: by value: ``ember.tensor(ARRAY)`` in the function is a graph constant
            self.leaf(path, "array", np.array(obj, copy=True), use)
            return
        if _is_value(obj):
            self.leaf(path, "value", obj, use)
            if isinstance(obj, str):
                self.names.add(obj)         # perhaps a key: ``d[key]``, ``getattr(o, key)``
            return
        first = self.seen.get(id(obj))
        if first is not None:           # walked already: this path must still lead to it
            self.leaf(path, "id", obj, use)
            return
        self.seen[id(obj)] = path
        self.keep.append(obj)
        self._walk(obj, path, depth, use)

    def _walk(self, obj, path, depth, use):
        from ..nn.module import Module
        from ..optim.optimizer import Optimizer
        from ..optim._lr_base import LRScheduler
        if isinstance(obj, Module):
            self._module(obj, path, depth, use)
        elif isinstance(obj, Optimizer):
            self.leaf(path, "id", obj, use)
            self._optimizer(obj, path)
        elif isinstance(obj, (dict, list, tuple)):
            self._container(obj, path, depth, use)
        elif isinstance(obj, types.FunctionType):
            self.leaf(path, "id", obj, use)
            if _user_file(obj.__code__.co_filename):
                self._function(obj)
        elif isinstance(obj, types.MethodType):
            self.visit(obj.__self__, path + (("attr", "__self__"),), depth + 1, use)
            self.visit(obj.__func__, path + (("attr", "__func__"),), depth + 1, use)
        elif isinstance(obj, types.ModuleType):
            self.leaf(path, "id", obj, use)
            f = getattr(obj, "__file__", None)
            if f is not None and _user_file(f) and depth < _MAX_DEPTH:
                for k in sorted(self.names & set(vars(obj))):
                    self.visit(vars(obj)[k], path + (("attr", k),), depth + 1, use)
        elif isinstance(obj, type):
            self.leaf(path, "id", obj, use)
            self._class(obj)
            if _user_type(obj) and depth < _MAX_DEPTH:      # its data: ``Table.ROWS``
                for k in sorted(self.names & set(vars(obj))):
                    v = vars(obj)[k]
                    if not isinstance(v, (types.FunctionType, staticmethod, classmethod,
                                          property)):
                        self.visit(v, path + (("attr", k),), depth + 1, use)
        elif isinstance(obj, LRScheduler):
            self.leaf(path, "id", obj, use)
            for k, v in vars(obj).items():    # its counters: step() inside the call is a write
                if _is_value(v):
                    self.leaf(path + (("attr", k),), "value", v, WRITES)
            self.visit(obj.optimizer, path + (("attr", "optimizer"),), depth + 1, use)
        elif _user_type(type(obj)) and hasattr(obj, "__dict__") and depth < _MAX_DEPTH:
            self.leaf(path, "id", obj, use)
            self._class(type(obj))
            d = vars(obj)
            for k in sorted(self.names & set(d)):
                self.visit(d[k], path + (("attr", k),), depth + 1, use)
            self._class_attrs(obj, d, path, depth, use)
        else:
            self.leaf(path, "id", obj, use)

    def _container(self, obj, path, depth, use):
        self.leaf(path, "len", len(obj), use)
        if len(obj) > _MAX_ITEMS or depth >= _MAX_DEPTH:
            self.leaf(path, "id", obj, use)        # too big or deep to walk: the object
            return
        if isinstance(obj, dict):
            every = not self.names.isdisjoint(_ITERATE)
            for k, v in list(obj.items()):
                if every or not isinstance(k, str) or k in self.names:
                    self.visit(v, path + (("item", k),), depth + 1, use)
        else:
            for i, v in enumerate(obj):
                self.visit(v, path + (("item", i),), depth + 1, use)

    def _module(self, m, path, depth, use):
        """A module: every parameter, buffer and submodule, hook counts, attributes."""
        d = vars(m)
        user = _user_type(type(m))
        if user:
            self._class(type(m))
            self._library_names(type(m))
        for k, v in d.items():
            p = path + (("attr", k),)
            if k in _MODULE_STORES:
                self.leaf(p, "len", len(v), use)
                for name, x in v.items():
                    if x is not None:
                        self.visit(x, p + (("item", name),), depth, use)
            elif k in _HOOKS:
                self.leaf(p, "len", len(v), use)
            elif k.endswith("_with_kwargs") or k == "_non_persistent_buffers":
                continue
            elif not user or k in self.names:
                self.visit(v, p, depth + 1, use)
        if user:
            self._class_attrs(m, d, path, depth, use)

    def _library_names(self, cls):
        """A user subclass of an Ember layer (``class MyNorm(nn.LayerNorm)``): the names the
        library's own methods read (``eps``...) count as read too."""
        from ..nn.module import Module
        for c in cls.__mro__:
            if c in (Module, object) or _user_type(c) or id(c) in self.code:
                continue
            self.code.add(id(c))
            for v in vars(c).values():
                if isinstance(v, types.FunctionType):
                    _code_names(v.__code__, self.names)

    def _class_attrs(self, obj, d, path, depth, use):
        """Class-level data a user object reads as ``self.NAME`` (a table, a constant)."""
        cls = type(obj)
        for k in sorted(self.names - set(d)):
            for c in cls.__mro__:
                if not _user_type(c) or k not in vars(c):
                    continue
                v = vars(c)[k]
                if not isinstance(v, (types.FunctionType, staticmethod, classmethod,
                                      property, type)):
                    self.visit(v, path + (("attr", "__class__"), ("attr", k)), depth + 1, use)
                break

    def _optimizer(self, opt, path):
        """Parameters and state tensors (identity: the rest is the signature's), and the
        hyper-parameters, which the call must not change (a graph would not replay it)."""
        for gi, g in enumerate(opt.param_groups):
            for k, v in g.items():
                if k != "params" and _is_value(v):
                    self.leaf(path + (("attr", "param_groups"), ("item", gi), ("item", k)),
                              "value", v, WRITES)
            for pi, p in enumerate(g["params"]):
                self.visit(p, path + (("attr", "param_groups"), ("item", gi), ("item", "params"),
                                      ("item", pi)), 0, GUARD)
        for p, st in list(opt.state.items()):
            if isinstance(st, dict):
                for k, v in st.items():
                    if isinstance(v, Tensor):
                        self.visit(v, path + (("attr", "state"), ("item", p), ("item", k)),
                                   0, GUARD)

    def _function(self, f):
        """User code: its names, closure cells and the globals it names."""
        if id(f.__code__) in self.code:
            return
        self.code.add(id(f.__code__))
        self.keep.append(f.__code__)
        _code_names(f.__code__, self.names)
        for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            self.visit(v, (("obj", cell, name), ("cell", None)), 0, BOTH)
        # default arguments (``def step(x, model=model, opt=opt)``) are state like closures
        for i, v in enumerate(f.__defaults__ or ()):
            self.visit(v, (("obj", f, f.__name__), ("attr", "__defaults__"), ("item", i)),
                       0, BOTH)
        for k, v in (f.__kwdefaults__ or {}).items():
            self.visit(v, (("obj", f, f.__name__), ("attr", "__kwdefaults__"), ("item", k)),
                       0, BOTH)
        g = f.__globals__
        code_names: set = set()
        _code_names(f.__code__, code_names)
        for name in sorted(code_names):
            if name in g and not name.startswith("__"):
                self.visit(g[name], (("obj", g, ""), ("item", name)), 0, BOTH)

    def _class(self, cls):
        """A user class: its methods' code is read by :meth:`methods` once they are named."""
        for c in cls.__mro__:
            if c is not object and _user_type(c) and all(c is not k for k in self.classes):
                self.classes.append(c)

    def methods(self) -> None:
        """Read the code of the user methods that may run: ``forward`` and ``__call__`` and
        those some code read so far names (``self.helper()``, a property) — not, say, the
        ``__init__`` or ``fit`` that set attributes the traced code never reads."""
        done: set = set()
        grew = True
        while grew:
            grew = False
            for c in list(self.classes):
                for k, v in list(vars(c).items()):
                    if (id(c), k) in done or (k not in self.names and
                                              k not in ("forward", "__call__")):
                        continue
                    done.add((id(c), k))
                    f = v.__func__ if isinstance(v, (staticmethod, classmethod)) else v
                    f = f.fget if isinstance(f, property) else f
                    if isinstance(f, types.FunctionType) and \
                            _user_file(f.__code__.co_filename):
                        self._function(f)
                        grew = True


# ---------------------------------------------------------------------- the check
class Guards:
    """The leaves of a :class:`Reach`, compiled into one function run before each call.

    ``guards(flat)`` is ``True`` when every leaf still holds; :meth:`failure` explains
    the first one that does not (the slow path, run only after a failure).
    """

    def __init__(self, r: Reach):
        self.leaves = [(p, k, v) for p, k, v, use in r.leaves if use & GUARD]
        self.check = _compile(self.leaves)

    def __len__(self) -> int:
        return len(self.leaves)

    def __call__(self, flat) -> bool:
        return self.check(flat)

    def failure(self, flat) -> dict:
        """``{"guard <path>": (old, new)}`` for the first leaf that no longer holds."""
        for p, k, v in self.leaves:
            new = _read_leaf(p, k, flat)
            if not _same(k, v, new):
                return {f"guard {_label(p)}": (_show(k, v), _show(k, new))}
        return {}


def _compile(leaves):
    """Python source for all the leaves, intermediate lookups shared; compiled once."""
    ns: dict = {}
    lines = ["def guard(flat):", "    try:", "        pass"]
    var_of: dict = {}

    def const(x, prefix):
        name = f"{prefix}{len(ns)}"
        ns[name] = x
        return name

    def var(path):
        key = tuple(_step_key(s) for s in path)
        v = var_of.get(key)
        if v is not None:
            return v
        if len(path) == 1:
            root = path[0]
            expr = const(root[1], "R") if root[0] == "obj" else f"flat[{root[1]}]"
        else:
            parent = var(path[:-1])
            kind, k = path[-1]
            if kind == "cell":
                expr = f"{parent}.cell_contents"
            elif kind == "attr":
                expr = (f"{parent}.{k}" if k.isidentifier() and not keyword.iskeyword(k)
                        else f"getattr({parent}, {k!r})")
            elif type(k) in (str, int, bool):
                expr = f"{parent}[{k!r}]"
            else:
                expr = f"{parent}[{const(k, 'K')}]"
        v = var_of[key] = f"v{len(var_of)}"
        lines.append(f"        {v} = {expr}")
        return v

    for p, kind, value in leaves:
        v = var(p)
        if kind == "id":
            lines.append(f"        if {v} is not {const(value, 'O')}: return False")
        elif kind == "len":
            lines.append(f"        if len({v}) != {value}: return False")
        elif kind == "array":
            ns["_same_array"] = _same_array
            lines.append(f"        if not _same_array({v}, {const(value, 'A')}): return False")
        else:
            e, t = const(value, "E"), const(type(value), "T")
            lines.append(f"        if {v} is not {e} and ({v}.__class__ is not {t} or "
                         f"not {v} == {e}): return False")
    lines += ["    except Exception:", "        return False", "    return True"]
    exec(compile("\n".join(lines), "<ember.compile guards>", "exec"), ns)   # noqa: S102
    return ns["guard"]


def capture_guards(fn, flat, needed, r: Reach | None = None) -> tuple:
    """``(Guards, labels)``: the guards of a capture of ``fn`` called with ``flat``, and
    the labels of the ``needed`` ``(tensor, label)`` pairs (the graph's lifted inputs and
    write-back targets) that no path reaches, so no guard can tell if they are replaced.
    ``r``: the walk :func:`reach` made of ``fn`` and ``flat`` just now (else it is made;
    its leaves are extended)."""
    r = reach(fn, flat) if r is None else r
    args = {id(x) for x in flat if isinstance(x, Tensor)}
    missing, done = [], set()
    for obj, label in needed:
        paths = r.tensors.get(id(obj))
        if paths is None:
            if id(obj) not in args:
                missing.append(label)
        elif id(obj) not in done:      # ``p.data = other`` swaps the storage (and dtype)
            done.add(id(obj))
            r.leaves.append((paths[0] + (("attr", "_storage"),), "id", obj._storage, GUARD))
            if paths[0][1:2] == (("attr", "_base"),) and paths[0][0][0] == "arg":
                r.leaves.append((paths[0], "id", obj, GUARD))   # a view argument's base
    if r.truncated:
        missing.append(f"(the walk stopped after {_BUDGET} objects)")
    if r.error:
        missing.append(f"(the walk stopped at {r.error})")
    return Guards(r), missing
