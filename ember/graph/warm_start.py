"""Warm start: a new process runs a signature's cached program without tracing its call.

The graph cache (:mod:`ember.graph.disk_cache`) is keyed by the *traced* graph, so each new
process still traces a signature's first call (an eager step plus the tracing: ~0.2 s
CPU for W3). A *warm-start record* lets it skip that: after a fresh capture, ``ember.
compile`` writes beside the optimised graph how the graph is bound to the Python state
(each lifted input, write-back target and new gradient as the index of a guard leaf of
:func:`ember.graph.guards.reach`'s walk, the learning rates by optimizer, the returned
value's structure), keyed by what the trace was a function of -- without tracing:

* the graph cache's environment (Ember's version and source fingerprint, Python, NumPy,
  the compiler, ``EMBER_*`` flags), the pipeline, ``parallel``, the default dtype;
* the call's signature (argument shapes/dtypes/``requires_grad``, scalars by value, grad
  mode, autocast, module ``training`` flags, optimizer hyper-parameters, which
  parameters have gradients and optimizer state) and whether each tensor argument is a leaf;
* the code of every piece of user code the walk reads (the function, the ``forward`` and
  other methods it names, the functions its globals and closures hold: bytecode,
  constants, names, file, line) and, for library functions and classes it reaches, their
  module's file (path, size, mtime);
* a portable description of every guard leaf in walk order: each tensor's dtype, shape,
  device, ``requires_grad``, leaf-ness and contiguity (a tensor reached again: which
  earlier leaf), each scalar's type and exact ``repr``, container lengths, small arrays'
  contents, the type and module of each object guarded by identity.

A new process walks the same state (as the guards do anyway), computes the key and, on a
hit, binds the cached graph to its own tensors through the leaf indices, builds the guards
and runs the compiled program from that very call. Anything the description cannot state
portably (an opaque library object guarded by identity, an argument that is not a tensor
or a scalar, a container too long to walk, a tensor reached by no path, a compiled
forward with a separate backward, random draws) writes no record: that signature traces
as before. A record whose graph entry is gone, that fails its checksum or does not bind
is a miss, and the call is traced (and the record rewritten).

**Numerics.** In a fresh compile a signature's first call is its traced eager run; with a
warm start it is the compiled program, like ``torch.compile``'s first call. So that call's
results can differ from a fresh process's in the last bits (fused kernels round
differently); every later call is the same program either way. A resumed training run
therefore replays, at its first step, the program the uninterrupted run used.
``EMBER_GRAPH_CACHE=trace`` keeps the cache but always traces (bitwise a fresh compile).
Nothing was traced, so ``raw_graphs()`` of a warm-started signature is its optimised graph
(storing the traced one too was tried: W3's pickles to 19 MB and 50 ms per capture).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
import types

import numpy as np

from ..dtypes import as_dtype, get_default_dtype
from ..tensor import Tensor
from . import disk_cache
from .capture import Entry, lifted
from .guards import GUARD, capture_guards, reach
from ..ops import dispatch as _dispatch
from .trace import Source, Tracer

__all__ = ["enabled", "describe", "describe_for", "save", "load", "note_unstable",
           "known_unstable", "Untraced", "start", "stats"]

FORMAT = 1
#: records stored, warm hits, misses, records refused (not portable) -- for tests
stats = {"stored": 0, "hits": 0, "misses": 0, "refused": 0}
_LR = re.compile(r"^(\w+)\.param_groups\[(\d+)\]\.(\w+)$")


class NotPortable(Exception):
    """The state can't be described (or bound) portably: no record."""


def enabled() -> bool:
    """Whether warm starts are on: the graph cache is, and ``EMBER_GRAPH_CACHE`` is not
    ``trace`` (trace every signature's first call, bitwise a fresh compile)."""
    return disk_cache.enabled() and \
        os.environ.get("EMBER_GRAPH_CACHE", "").strip().lower() != "trace"


# ------------------------------------------------------------------ the description
def _file_stat(module_name) -> str:
    mod = sys.modules.get(module_name or "")
    f = getattr(mod, "__file__", None)
    if f is None:
        return "builtin" if module_name in sys.builtin_module_names or \
            module_name == "builtins" else f"no file: {module_name}"
    try:
        st = os.stat(f)
    except OSError:
        return f"missing: {f}"
    return f"{f}:{st.st_size}:{st.st_mtime_ns}"


def _named(x) -> list:
    """A function, class or module by name and the file it came from."""
    if isinstance(x, types.ModuleType):
        return ["M", x.__name__, _file_stat(x.__name__)]
    mod = getattr(x, "__module__", None)
    return ["N", mod, getattr(x, "__qualname__", None), _file_stat(mod)]


def _object(v) -> list:
    """The portable description of an object guarded by identity (first reached)."""
    from ..optim.optimizer import Optimizer
    from ..optim._lr_base import LRScheduler
    from .guards import _user_type
    if isinstance(v, Tensor):
        a = v._data
        return ["T", type(v).__qualname__, v._dtype.name, list(a.shape), str(v._device),
                v._requires_grad, v._grad_fn is None, bool(a.flags.c_contiguous)]
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)):
        return _named(v)
    if isinstance(v, (Optimizer, LRScheduler)) or _user_type(type(v)):
        return ["O"] + _named(type(v))        # its contents are leaves of their own
    raise NotPortable(f"{type(v).__name__} guarded by identity")


def _step(step, first: dict) -> list:
    kind, k = step[0], step[1]
    if kind == "obj":
        return ["root", step[2], type(k).__qualname__]
    if kind == "arg":
        return ["arg", k]
    if kind == "attr":
        return ["a", k]
    if kind == "cell":
        return ["c"]
    if type(k) in (str, int, bool):
        return ["i", type(k).__name__, k]
    if id(k) in first:                        # opt.state[p]: p by its own leaf
        return ["t", first[id(k)]]
    raise NotPortable(f"a {type(k).__name__} key")


def _repr(v) -> str:
    """``repr`` that does not depend on the process (a frozenset's order does)."""
    if isinstance(v, frozenset):
        return f"frozenset({sorted(map(_repr, v))!r})"
    if type(v) is tuple:
        return f"({', '.join(map(_repr, v))},)"
    return repr(v)


def describe_for(graph_key, r, flat):
    """:func:`describe` of walk ``r`` for a record of the graph cached under ``graph_key``,
    or None (none to write: the graph was not cached, warm starts are off, or the state has
    no portable description)."""
    if graph_key is None or not enabled():
        return None
    try:
        return describe(r, flat)
    except NotPortable:
        stats["refused"] += 1
        return None


def _contents(path, flat):
    """A dict's full contents: the walk follows only the keys some code names, but
    ``f(**kw)`` or library code may read the others (in a process the dict's identity stands
    for them; across processes only its values can). Module stores are walked whole."""
    from .guards import _HOOKS, _MODULE_STORES, _eval
    last = path[-1]
    if last[0] == "attr" and last[1] in _MODULE_STORES:
        return None
    obj = _eval(path, flat)
    if not isinstance(obj, dict):
        return None
    if last[0] == "attr" and last[1] in _HOOKS:   # keys are process-wide handle counters
        return [_deep(v, 0) for v in obj.values()]
    return [[_deep(k, 0), _deep(v, 0)] for k, v in obj.items()]


def _deep(v, depth: int):
    """A value's portable description, containers recursively (see :func:`_contents`)."""
    from .guards import _MAX_ARRAY, _MAX_ITEMS, _is_value
    if _is_value(v):
        return ["V", type(v).__qualname__, _repr(v)]
    if depth < 4 and isinstance(v, (list, tuple, dict)) and len(v) <= _MAX_ITEMS:
        items = v.items() if isinstance(v, dict) else enumerate(v)
        return [type(v).__qualname__] + [[_deep(k, depth + 1), _deep(x, depth + 1)]
                                         for k, x in items]
    if isinstance(v, np.ndarray) and v.size <= _MAX_ARRAY:
        return ["A", str(v.dtype), list(v.shape),
                hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()]
    return _object(v)


def describe(r, flat) -> tuple:
    """``(description, {id(tensor): guard-leaf index})`` of walk ``r``'s guard leaves.

    Raises:
        NotPortable: a leaf has no portable description.
    """
    if r.truncated or r.error:
        raise NotPortable("the walk stopped early")
    first: dict = {}
    out = []
    for i, (path, kind, v) in enumerate((p, k, v) for p, k, v, use in r.leaves if use & GUARD):
        p = [_step(s, first) for s in path]
        if kind == "id":
            d = ["alias", first[id(v)]] if id(v) in first else _object(v)
            first.setdefault(id(v), i)
        elif kind == "value":
            d = ["V", type(v).__qualname__, _repr(v)]
        elif kind == "len":
            d = ["L", v, _contents(path, flat)]
        else:                                 # "array": by value
            d = ["A", str(v.dtype), list(v.shape), hashlib.sha256(
                np.ascontiguousarray(v).tobytes()).hexdigest()]
        out.append([p, d])
    return out, first


def _code(h, code) -> None:
    h.update(f"{code.co_filename}\0{getattr(code, 'co_qualname', code.co_name)}\0"
             f"{code.co_firstlineno}\0"
             f"{code.co_flags}\0{code.co_argcount}\0{code.co_kwonlyargcount}\0"
             f"{code.co_names}\0{code.co_varnames}\0{code.co_freevars}\0"
             f"{code.co_cellvars}\0".encode())
    h.update(code.co_code)
    h.update(getattr(code, "co_linetable", b""))      # the graph's nodes carry source lines
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code(h, c)
        elif isinstance(c, frozenset):      # ``x in {"a", "b"}``: set order is per process
            h.update(f"\0frozenset:{sorted(map(repr, c))!r}".encode())
        else:
            h.update(f"\0{type(c).__qualname__}:{c!r}".encode())


def _key(cf, sig, flat, desc, codes) -> str:
    from .._torch_globals import are_deterministic_algorithms_enabled as deterministic
    from .passes import PASSES
    names = [p for p in cf.passes if isinstance(p, str) and p in PASSES and
             getattr(PASSES[p], "__module__", "").startswith("ember.")]
    if len(names) != len(cf.passes):
        raise NotPortable("a pass that is not Ember's")
    for k, v in sig.items():
        if k.startswith("arg") and "@" in str(v):
            raise NotPortable(f"argument {k} is neither a tensor nor a scalar")
    h = hashlib.sha256(f"warm-start {FORMAT}\0".encode())
    h.update(disk_cache.environment().encode())
    h.update(repr((names, bool(cf.parallel), get_default_dtype().name, deterministic(),
                   list(sig.items()),
                   [x._grad_fn is None for x in flat if isinstance(x, Tensor)])).encode())
    for c in sorted(codes, key=lambda c: (c.co_filename, c.co_firstlineno, c.co_name)):
        _code(h, c)
    h.update(json.dumps(desc).encode())
    return h.hexdigest()[:32]


# ------------------------------------------------------------------ unstable signatures
def _unstable_key(cf, sig) -> str:
    """A cheap key (no walk) of a signature whose call changed it (a first optimizer step)."""
    fn = getattr(cf.fn, "__func__", cf.fn)
    code = getattr(fn, "__code__", None) or getattr(getattr(type(fn), "forward", None),
                                                     "__code__", None)
    h = hashlib.sha256(f"unstable {FORMAT}\0".encode())
    h.update(disk_cache.environment().encode())
    h.update(repr(list(sig.items())).encode())
    if code is not None:
        _code(h, code)
    return "u" + h.hexdigest()[:32]


def note_unstable(cf, sig) -> None:
    """Remember that a call with ``sig`` changed its own signature, so a new process does
    not walk the state looking for a record that can't exist (a hint only: if it is wrong,
    the call is traced, as without it)."""
    disk_cache.store_bytes(_unstable_key(cf, sig), b"unstable")


def known_unstable(cf, sig) -> bool:
    """Whether an earlier process noted ``sig`` as changing itself (see above)."""
    return disk_cache.lookup_bytes(_unstable_key(cf, sig)) == b"unstable"


class Untraced(Tracer):
    """A tracer that records nothing: a call known to change its own signature runs under
    it, so it computes exactly what a traced call computes (composites inline, learning
    rates as 0-d tensors: every hook a tracer answers is answered) without building a
    graph that would never run."""

    def process(self, op, inputs, params):
        with self.suspended():
            return _dispatch.apply(op, inputs, params)

    def lift_scalar(self, getter, value, dtype, device, label: str):
        from ..ops.factories import tensor
        with self.suspended():
            return tensor(value, dtype=dtype, device=device)

    def on_write(self, x, r) -> None:
        pass

    def on_fill(self, x, value) -> None:
        pass

    def constant(self, t) -> None:
        pass

    def random(self, t, draw, inputs, what) -> None:
        pass

    def on_generator(self, g) -> None:
        pass

    def on_data_access(self, t, what) -> None:
        pass

    def unsupported(self, what) -> None:
        pass


# ------------------------------------------------------------------ saving
def _ref(obj, first: dict, flat) -> list:
    for i, x in enumerate(flat):
        if x is obj:
            return ["arg", i]
    if id(obj) not in first:
        raise NotPortable("a tensor no guard reaches")
    return ["leaf", first[id(obj)]]


def _spec(spec):
    if spec is None:
        return None
    kind, keys, children = spec
    if kind not in (tuple, list, dict) or (keys and not all(type(k) is str for k in keys)):
        raise NotPortable(f"a returned {kind.__name__}")
    return [kind.__name__, keys, [_spec(c) for c in children]]


def _source(s: Source, r, first, flat) -> list:
    if s.kind != "call":
        return [s.kind, s.label, _ref(s.obj, first, flat)]
    m = _LR.match(s.label)                     # Optimizer._hyper's learning rate
    leaves = _guard_values(r)
    opts = [i for i, v in enumerate(leaves) if m is not None and
            type(v).__name__ == m.group(1) and hasattr(v, "param_groups")]
    if not opts or len({id(leaves[i]) for i in opts}) != 1:
        raise NotPortable(f"graph input {s.label}")
    return ["call", s.label, opts[0], int(m.group(2)), m.group(3)]


def _guard_values(r) -> list:
    """The values of walk ``r``'s guard leaves, in order."""
    return [v for p, k, v, use in r.leaves if use & GUARD]


def _out_leaf(k) -> list:
    if k[0] == "tensor":
        return ["t", k[1], k[2].name, str(k[3]), bool(k[4]),
                None if k[5] is None else list(k[5])]
    if k[1] is not None and type(k[1]) not in (bool, int, float, str):
        raise NotPortable(f"a returned {type(k[1]).__name__}")
    return ["s", k[1]]


def save(cf, e: Entry, sig, flat, r, desc, graph_key) -> bool:
    """Write the warm-start record of fresh capture ``e`` (see the module doc); whether
    one was written. ``sig``: the signature taken before the call, ``.grad`` keys included
    (what a new process computes at its first call); ``r``/``desc``: the walk made after
    the call and its description."""
    try:
        if e.joint is not None or graph_key is None:
            raise NotPortable("a compiled forward with its own backward graph")
        d, first = desc
        rec = {"graph": graph_key, "arg_slots": list(e.arg_slots), "n_user": e.n_user,
               "sources": [_source(s, r, first, flat) for s in e.sources],
               "writes": [[k, _ref(o, first, flat) if k != "arg" else ["arg", o], i]
                          for (k, o), i in e.writes],
               "grads": [[_ref(p, first, flat), i, None if m is None else
                          [m[0].name, str(m[1])]] for p, i, m in e.grads],
               "release": [_ref(p, first, flat) for p in e.release],
               "out_spec": _spec(e.out_spec), "out_leaves": [_out_leaf(k) for k in
                                                             e.out_leaves],
               "grad_keys": bool(cf._grad_keys)}
        key = _key(cf, sig, flat, d, r.codes)
    except NotPortable:
        stats["refused"] += 1
        return False
    ok = disk_cache.store_bytes("w" + key, json.dumps(rec).encode())
    stats["stored"] += ok
    return ok


# ------------------------------------------------------------------ loading
def _bind(ref, leaves, flat):
    return flat[ref[1]] if ref[0] == "arg" else leaves[ref[1]]


def _unspec(s):
    if s is None:
        return None
    return ({"tuple": tuple, "list": list, "dict": dict}[s[0]], s[1],
            [_unspec(c) for c in s[2]])


def _lr(group, key, dtype):
    return lambda: np.asarray(group[key], dtype.np)


def _entry(rec, r, flat) -> Entry:
    """The entry record ``rec`` describes, bound to this process's objects."""
    from ..device.base import device
    from ..dtypes import float64
    leaves = _guard_values(r)
    e = Entry()
    e.eager, e.joint, e.diff_inputs = False, None, None
    e.arg_slots = rec["arg_slots"]
    e.sources = []
    for s in rec["sources"]:
        if s[0] == "call":
            group = leaves[s[2]].param_groups[s[3]]
            e.sources.append(Source("call", _lr(group, s[4], float64), s[1]))
        else:
            e.sources.append(Source(s[0], _bind(s[2], leaves, flat), s[1]))
    e.writes = [((k, ref[1] if k == "arg" else _bind(ref, leaves, flat)), i)
                for k, ref, i in rec["writes"]]
    e.grads = [(_bind(ref, leaves, flat), i, None if m is None else
                (as_dtype(m[0]), device(m[1]))) for ref, i, m in rec["grads"]]
    e.release = [_bind(ref, leaves, flat) for ref in rec["release"]]
    e.arg_owner = {id(flat[i]): i for i in e.arg_slots if flat[i]._requires_grad and
                   flat[i]._grad_fn is None}
    e.out_spec = _unspec(rec["out_spec"])
    e.out_leaves = [("tensor", k[1], as_dtype(k[2]), device(k[3]), k[4],
                     None if k[5] is None else tuple(k[5])) if k[0] == "t"
                    else ("static", k[1]) for k in rec["out_leaves"]]
    e.n_user = rec["n_user"]
    for x in e.sources:
        if x.kind in ("tensor", "grad") and not isinstance(x.obj, Tensor):
            raise NotPortable(f"{x.label} is not a tensor here")
    return e


def load(cf, sig, flat):
    """``(entry, record)`` of a warm start for this call of ``cf`` (guards built, program
    made), or ``(None, reason)``. ``record["grad_keys"]``: whether ``.grad`` fields stay
    in the signature (False: the graph never touches them)."""
    from .replay import program
    r = reach(cf.fn, flat)
    try:
        desc = describe(r, flat)
        key = _key(cf, sig, flat, desc[0], r.codes)
    except NotPortable as why:
        stats["misses"] += 1
        return None, str(why)
    data = disk_cache.lookup_bytes("w" + key)
    if data is None:
        stats["misses"] += 1
        return None, "no record"
    try:
        rec = json.loads(data)
        e = _entry(rec, r, flat)
    except (NotPortable, ValueError, KeyError, IndexError, TypeError, AttributeError) as why:
        stats["misses"] += 1
        return None, f"record does not bind: {why}"
    hit = disk_cache.lookup(rec["graph"])
    if hit is None:
        stats["misses"] += 1
        return None, "its graph is not in the cache"
    if len(hit["graph"].inputs) != len(e.arg_slots) + len(e.sources):
        stats["misses"] += 1
        return None, "its graph's inputs do not match the record"
    e.graph = e.raw_graph = hit["graph"]
    e.report = hit["report"]
    e.out_leaves_vars = None
    e.guards, unguarded = capture_guards(cf.fn, flat, lifted(e), r=r)
    if unguarded:
        stats["misses"] += 1
        return None, "unguarded inputs"
    e.program = program(e, e.graph, cf.parallel, cf._graphs_note())
    stats["hits"] += 1
    return e, rec


def start(cf, sig, flat):
    """The entry of ``sig`` bound from a warm-start record (a cached program, no trace),
    cached in ``cf`` and logged; None: trace it."""
    t0 = time.perf_counter()
    try:
        e, rec = load(cf, sig, flat)
    except Exception as why:  # noqa: BLE001 - a cache never breaks the call: trace it
        stats["misses"] += 1
        disk_cache._warn(f"ember.compile({cf.name}): warm start failed ({type(why).__name__}: "
                         f"{why}); tracing instead")
        return None
    if e is None:
        return None
    if not rec["grad_keys"]:          # as the fresh capture's _settle found
        cf._grad_keys = False
        sig = {k: v for k, v in sig.items() if not k.endswith(".grad")}
        cf._last_sig = sig
    e.compile_s = time.perf_counter() - t0
    cf.log.capture(sig, e.graph, e.graph, e.report, e.compile_s, 0, True, len(e.guards))
    cf.log.note("warm start: the cached program runs from the signature's first call "
                "(no trace; see ember.graph.warm_start)")
    cf._captured = e
    cf._cache[tuple(sig.items())] = e
    return e
