"""The dispatch mode of one ``vmap`` level (functorch's ``BatchedTensor`` + batching rules).

While a vmapped function runs, its :class:`VmapMode` sits on ``state.modes`` and sees every
primitive. ``process`` unwraps the inputs batched at its level, runs the op's batching rule
(:func:`ember.ops.batching.rule_of`) on the physical tensors *below* itself — so outer vmap
levels, autograd, forward mode and tracers see ordinary ops — and wraps the result. Inputs
not batched at its level go straight below. The eager path pays nothing when no vmap runs.

Transforms inside the vmap (``vmap(grad(f))``, ``vmap(jvp(f))``) differentiate the logical
(per-example) values: when a logical input requires grad the mode records a node on the
batched output whose VJP, written in Ember ops, runs batched through this same mode.
"""
from __future__ import annotations

import warnings
import weakref

import numpy as np

from .. import dtypes as _dt
from ..autograd.grad_mode import state
from ..autograd.graph import Node
from ..errors import DTypeError, EmberIndexError, ShapeError
from ..ops import dispatch
from ..ops.batching import rule_of
from ..tensor import Tensor, _wrap
from . import _batched
from ._batched import BatchedTensor, make_batched
from ._tree import tree_flatten, tree_unflatten
from ._vmap_nodes import _LogicalOp, _PerExampleOp

_tensor_mod = __import__("ember.tensor", fromlist=["_DATA_HOOK"])
_PROMOTE = frozenset({"promote", "float", "compare", "integral"})
_warned: set = set()


class VmapMode:
    """One vmap level on the dispatcher's mode stack (see the module docstring)."""

    abstract = False

    def __init__(self, level: int, size: int, randomness: str, allow_fallback: bool):
        self.level, self.size = level, size
        self.randomness, self.allow_fallback = randomness, allow_fallback
        self.fresh: dict = {}    # id -> weakref of tensors factories made inside this level

    # ------------------------------------------------------------------ the stack
    def __enter__(self):
        _batched._LIVE[self.level] = []
        state.modes.append(self)
        self._prev_hook = _tensor_mod._DATA_HOOK
        _tensor_mod._DATA_HOOK = self.on_data_access
        return self

    def __exit__(self, *exc):
        if self in state.modes:
            state.modes.remove(self)
        _tensor_mod._DATA_HOOK = self._prev_hook
        _batched.retire(self.level)
        return False

    def below(self, fn, *args, **kwargs):
        """Run ``fn`` with this level off the mode stack (its ops dispatch underneath)."""
        modes = state.modes
        i = len(modes) - 1 if modes and modes[-1] is self else modes.index(self)
        modes.pop(i)
        try:
            return fn(*args, **kwargs)
        finally:
            modes.insert(i, self)

    # ------------------------------------------------------------------ primitives
    def process(self, op, inputs, params):
        lvl = self.level
        phys, bdims, hit = [], [], False
        for x in inputs:
            if x.__class__ is BatchedTensor and x._level == lvl:
                phys.append(x._phys)
                bdims.append(x._bdim)
                hit = True
            else:
                phys.append(x)
                bdims.append(None)
        if op.random:
            return self._random_op(op, phys, bdims, params, hit)
        if not hit:
            if state.fw_levels and _tangent_batched_at(inputs, lvl):
                return self._unbatched_primal_batched_tangent(op, inputs, params)
            return self.below(dispatch.apply, op, inputs, params)
        if len(inputs) > 1:
            phys = self._promote(op, inputs, phys)
        modes = state.modes
        i = len(modes) - 1 if modes[-1] is self else modes.index(self)
        modes.pop(i)                              # (self.below, inlined: the hot path)
        try:
            out, obd = self._run_rule(op, phys, bdims, params)
        except (ShapeError, DTypeError, EmberIndexError) as e:
            raise _in_vmap(e, op, inputs, bdims, self) from None
        finally:
            modes.insert(i, self)
        if obd is None:
            return out
        res = make_batched(out, obd, lvl)
        x0 = inputs[0]
        if op.view and x0.__class__ is BatchedTensor and x0._level == lvl and (
                out._storage is x0._phys._storage):
            res._base = x0._base if x0._base is not None else x0   # in-place writes reach it
        self._logical_ad(op, inputs, params, res)
        return res

    def per_example(self, fn, wrapper, args, kwargs):
        """A host-reading composite (``batching.per_example``): one call per example."""
        leaves, spec = tree_flatten((args, kwargs))
        lvl = self.level
        hit = [x.__class__ is BatchedTensor and x._level == lvl for x in leaves]
        if not any(hit):
            return self.below(wrapper, *args, **kwargs)
        name = getattr(fn, "__qualname__", repr(fn))
        if not self.size:
            raise RuntimeError(f"vmap: {name} reads values on the host: its per-example loop "
                               f"needs at least one example")
        if not self.allow_fallback:
            raise RuntimeError(f"vmap: {name} reads values on the host and vmap(..., "
                               f"allow_fallback=False) refuses the per-example loop")
        if name not in _warned:
            _warned.add(name)
            warnings.warn(f"vmap: there is a performance drop because {name} reads values on "
                          f"the host: falling back to a loop over the batch", stacklevel=4)
        diff = [i for i, x in enumerate(leaves) if state.grad_enabled and
                isinstance(x, Tensor) and x._requires_grad]     # differentiated per example
        outs, ins, ospec = [], [], None
        for b in range(self.size):
            ex = [x._phys.select(x._bdim, b) if h else x for x, h in zip(leaves, hit)]
            for i in diff:
                if hit[i] and not ex[i]._requires_grad:
                    ex[i] = ex[i].detach().requires_grad_()
            a, kw = tree_unflatten(ex, spec)
            o_leaves, ospec = tree_flatten(self.below(wrapper, *a, **kw))
            outs.append(o_leaves)
            ins.append([ex[i] for i in diff])
        from ..ops.join import stack
        cols = [[o[k] for o in outs] for k in range(len(outs[0]))]
        res = [make_batched(self.below(stack, c), 0, lvl) if isinstance(c[0], Tensor) else c[0]
               for c in cols]
        ks = [k for k, r in enumerate(res) if isinstance(r, Tensor) and r._dtype.is_inexact]
        if diff and ks:
            op = _PerExampleOp(name, [[o[k] for k in ks] for o in outs], ins, lvl)
            node = Node(op, {}, [leaves[i] for i in diff], False, None, nout=len(ks))
            for nr, k in enumerate(ks):
                res[k]._grad_fn, res[k]._out_nr, res[k]._requires_grad = node, nr, True
        return tree_unflatten(res, ospec)

    def _unbatched_primal_batched_tangent(self, op, inputs, params):
        """``vmap(lambda t: jvp(f, (x,), (t,)))`` (``jacfwd``): the primal runs below this
        level with forward AD off; its tangent's JVP rule runs here, so it is batched."""
        levels = state.fw_levels
        state.fw_levels = []
        try:
            out = self.below(dispatch.apply, op, inputs, params)
        finally:
            state.fw_levels = levels
        from ..autograd.forward_ad import push_tangents
        push_tangents(op, inputs, params, out)
        return out

    def _run_rule(self, op, phys, bdims, params):
        rule = rule_of(op)
        if rule is None or rule == "loop":
            return self._loop(op, phys, bdims, params, rule is None)
        res = rule(phys, bdims, **params)
        if res is NotImplemented:           # the rule covers only some batching patterns
            return self._loop(op, phys, bdims, params, False)
        return res

    def _promote(self, op, inputs, phys):
        """Cast physical inputs to the *logical* compute dtype: a batched 0-d tensor is
        1-d physically, which would change PyTorch's promotion (0-d tensors rank lower)."""
        if op.dtype not in _PROMOTE or len(inputs) < 2:
            return phys
        ts = [x for x in inputs if isinstance(x, Tensor)]
        if all(t._dtype is ts[0]._dtype for t in ts):
            return phys
        ct, _ = dispatch._compute_dtype(op, op.dtype, inputs, ts[0], params={})
        if ct is None:
            return phys
        cast = lambda p: p.to(ct) if isinstance(p, Tensor) and p._dtype is not ct else p  # noqa
        return [self.below(cast, p) for p in phys]

    def _loop(self, op, phys, bdims, params, unmarked: bool):
        what = "has no batching rule" if unmarked else "is marked to run per example ('loop')"
        if not self.allow_fallback:
            raise RuntimeError(f"vmap: {op.name} {what} and vmap(..., allow_fallback=False) "
                               f"refuses the per-example loop fallback")
        if op.name not in _warned:
            _warned.add(op.name)
            warnings.warn(f"vmap: there is a performance drop because {op.name} {what}: "
                          f"falling back to a loop over the batch", stacklevel=4)
        from ..ops.join import stack
        n = next(p.shape[d] for p, d in zip(phys, bdims) if d is not None)
        outs = []
        for b in range(n):
            ins = [p if d is None else p.select(d, b) for p, d in zip(phys, bdims)]
            outs.append(op(*ins, **params))
        if isinstance(outs[0], (tuple, list)) if outs else False:
            raise NotImplementedError(f"vmap: the loop fallback of {op.name} returns one "
                                      f"tensor per example")
        return stack(outs) if outs else op(*[p if d is None else p.select(d, 0) for p, d in
                                             zip(phys, bdims)], **params).unsqueeze(0), 0

    def _random_op(self, op, phys, bdims, params, hit):
        if self.randomness == "error":
            raise RuntimeError(_random_error(op.name))
        if self.randomness == "same":
            if hit:
                raise RuntimeError(f"vmap: {op.name}: randomness='same' does not support a "
                                   f"batched tensor input (each example's draw would differ); "
                                   f"use randomness='different'")
            return self.below(dispatch.apply, op, phys, params)
        xs = self.below(_materialize_all, phys, bdims, self.size)
        return make_batched(self.below(op, *xs, **params), 0, self.level)

    def _logical_ad(self, op, inputs, params, res):
        st = state
        if st.grad_enabled and op.differentiable and res._dtype.category >= _dt.FLOAT:
            for x in inputs:
                if getattr(x, "_requires_grad", False):
                    saves_out = op.save == "output" or op.save == "both"
                    lop = _LogicalOp(op, (res._phys, res._bdim, res._level) if saves_out
                                     else None)
                    node = Node(lop, params, inputs, op.save == "inputs" or op.save == "both")
                    lop.node = weakref.ref(node)
                    res._grad_fn, res._requires_grad = node, True
                    break
        if st.fw_levels:
            from ..autograd.forward_ad import push_tangents
            push_tangents(op, inputs, params, res)

    def on_backward(self):
        raise RuntimeError("vmap: backward() called inside vmap is not supported (it would "
                           "accumulate batched gradients into .grad): use ember.func.grad or "
                           "ember.func.vjp inside the vmapped function, or call backward() "
                           "outside vmap")

    def check_function(self, cls, args):
        """A custom ``autograd.Function`` runs its forward on batched values with autograd
        off and records its node on them: a gradient or tangent an *outer* transform tracks
        on the physical tensors would be lost, so that case is refused."""
        for a in args:
            if a.__class__ is not BatchedTensor or a._requires_grad or a._fw:
                continue
            p = a._phys
            outer_fw = False
            while p is not None and not outer_fw:
                outer_fw = bool(getattr(p, "_fw", None))
                p = getattr(p, "_phys", None)
            if (state.grad_enabled and a.requires_grad) or outer_fw:
                raise NotImplementedError(
                    f"vmap: {cls.__name__}.apply on a batched tensor that an enclosing "
                    f"grad/jvp differentiates (grad(vmap(f))) is not supported: the "
                    f"Function's node would be recorded per example and the outer "
                    f"derivative lost. Apply it outside vmap, swap the transforms "
                    f"(vmap(grad(f)) works), or write it in Ember ops.")

    # ------------------------------------------------------------------ in-place writes
    def constant(self, t):
        """A factory made ``t`` (``zeros``, ``empty``...) while this level runs."""
        ref = weakref.ref(t)
        for m in state.modes:
            if isinstance(m, VmapMode):
                m.fresh[id(t)] = ref
        if (low := self._lower("constant")) is not None:
            low.constant(t)

    def check_write(self, x, r, op):
        if not isinstance(r, Tensor):
            return
        missing = _levels(r) - _levels(x)
        if missing and not _promote(x, r, missing):
            raise RuntimeError(
                f"vmap: inplace arithmetic(self, *extra_args) is not possible because there "
                f"exists a Tensor `other` in extra_args that has more elements than `self`. "
                f"This happened due to `other` being vmapped over but `self` not being vmapped "
                f"over in a vmap (in {op}: self of shape {tuple(x.shape)}, other of shape "
                f"{tuple(r.shape)}). Please try to use out-of-place operators instead of "
                f"{op}.")

    def _lower(self, hook):
        """The nearest mode below the vmap levels with ``hook`` (a tracer of ember.compile):
        what this level turns into physical effects is reported to it."""
        for m in reversed(state.modes):
            if not isinstance(m, VmapMode) and hasattr(m, hook):
                return m
        return None

    def on_write(self, x, r):
        """``commit`` wrote ``r``'s first example into ``x``'s logical view: write it all."""
        if x.__class__ is not BatchedTensor:
            if r.__class__ is BatchedTensor:     # a random fill (commit checked the others)
                self.check_write(x, r, "inplace random fill")
                self.on_write(x, r)
            elif (low := self._lower("on_write")) is not None:
                low.on_write(x, r)
            return
        from ..ops.inplace import commit
        px, bx = x._phys, x._bdim
        if r.__class__ is BatchedTensor and r._level == x._level:
            pr = r._phys.movedim(r._bdim, bx)
        else:
            pr = r.unsqueeze(bx).expand(tuple(px.shape))
        if pr._dtype is not px._dtype:
            pr = pr.to(px._dtype)
        commit(px, pr, "vmap write")

    def on_fill(self, x, value):
        if x.__class__ is BatchedTensor:
            x._phys.fill_(value)
        elif (low := self._lower("on_fill")) is not None:
            low.on_fill(x, value)

    def unsupported(self, what):
        if (low := self._lower("unsupported")) is not None:
            low.unsupported(what)

    # ------------------------------------------------------------------ randomness
    def random(self, t, draw, inputs, what):
        """``t`` holds fresh samples drawn for one example: per ``randomness``, keep them for
        every example (``same``) or draw one set per example (``different``)."""
        modes = [m for m in state.modes if isinstance(m, VmapMode)]
        if any(m.randomness == "error" for m in modes):
            raise RuntimeError(_random_error(what))
        batched = set().union(*(_levels(x) for x in inputs))
        if any(m.randomness == "same" and m.level in batched for m in modes):
            raise RuntimeError(f"vmap: {what}: randomness='same' does not support a batched "
                               f"tensor input (each example's draw would differ); use "
                               f"randomness='different'")
        diff = [m for m in modes if m.randomness == "different"]
        low = self._lower("random")
        if not diff:
            if low is not None:
                low.random(t, draw, inputs, what)
            return
        sizes = [m.size for m in diff]
        shape, dt = t._data.shape, t._dtype

        def draw_all(*_):
            draws = [np.asarray(draw(*(_example(x, {m.level: i for m, i in zip(diff, flat)})
                                       for x in inputs))) for flat in np.ndindex(*sizes)]
            arr = np.stack(draws).reshape(tuple(sizes) + shape) if draws else \
                np.zeros(tuple(sizes) + shape, dt.np)
            return np.ascontiguousarray(arr, dt.np)
        phys = _wrap(draw_all(), dt, t._device)
        if low is not None:           # a tracer: the graph draws the whole batch again
            if inputs:
                self.unsupported(f"{what} of batched parameters under vmap")
            else:
                low.random(phys, draw_all, (), what)
        for m in diff[:-1]:
            phys = make_batched(phys, 0, m.level)
        last = diff[-1]
        t.__class__ = BatchedTensor          # NOTE: the factory already returned this object
        t._phys, t._bdim, t._level = phys, 0, last.level
        t._data = make_batched(phys, 0, last.level)._data
        t._storage = phys._storage
        _batched.track(t)

    def on_data_access(self, t, what):
        if t.__class__ is BatchedTensor:
            if what == "item":
                raise RuntimeError("vmap: It looks like you're calling .item() on a Tensor. "
                                   "We don't support vmap over calling .item() on a Tensor, "
                                   "please try to rewrite what you're doing with other "
                                   "operations.")
            raise RuntimeError(f"vmap: It looks like you're attempting to use a Tensor in some "
                               f"data-dependent control flow ({what}()). We don't support "
                               f"that yet: use ember.where or other tensor ops instead.")
        if self._prev_hook is not None:
            self._prev_hook(t, what)


def _in_vmap(e, op, inputs, bdims, mode):
    """``e`` (raised on physical shapes) with the per-example shapes and batch dims; an
    inner level's view (closest to the user's code) replaces an outer level's."""
    root = getattr(e, "_vmap_root", None) or str(e)
    if root.startswith("vmap"):
        return e
    shapes = ", ".join(str(tuple(x.shape)) for x in inputs if isinstance(x, Tensor))
    dims = ", ".join(str(d) for x, d in zip(inputs, bdims) if isinstance(x, Tensor))
    try:
        new = type(e)(f"vmap: {op.name} on per-example shapes {shapes} (batch dims {dims}, "
                      f"batch size {mode.size}): {root}")
    except TypeError:
        return e
    new._vmap_root = root
    return new


def _random_error(what) -> str:
    return (f"vmap: called random operation {what} while in randomness error mode. Please "
            f"either use the 'same' or 'different' randomness flags on vmap or perform the "
            f"randomness operation out of vmap")


def _materialize_all(phys, bdims, n):
    from ..ops.batching import materialize
    return [materialize(p, d, n) if isinstance(p, Tensor) else p for p, d in zip(phys, bdims)]


def _promote(x, r, missing) -> bool:
    """Make ``x`` — a plain tensor a factory made inside every vmap level in ``missing`` —
    batched at those levels (its values copied to every example), so that writing the batched
    ``r`` into it is what each example would do on its own copy. False if ``x`` may be seen
    outside those levels (made earlier, or a view)."""
    if x.__class__ is not Tensor or x._base is not None:
        return False
    modes = [m for m in state.modes if isinstance(m, VmapMode) and m.level in missing]
    if len(modes) != len(missing) or any(
            (m.fresh.get(id(x)) or (lambda: None))() is not x for m in modes):
        return False
    sizes = tuple(m.size for m in modes)
    arr = np.ascontiguousarray(np.broadcast_to(x._data, sizes + x._data.shape))
    phys = _wrap(arr, x._dtype, x._device)
    for m in modes[:-1]:
        phys = make_batched(phys, 0, m.level)
    last = make_batched(phys, 0, modes[-1].level)
    x.__class__ = BatchedTensor
    x._phys, x._bdim, x._level = phys, 0, modes[-1].level
    x._data, x._storage = last._data, last._storage
    _batched.track(x)
    return True


def _tangent_batched_at(inputs, level) -> bool:
    for x in inputs:
        fw = getattr(x, "_fw", None)
        if fw and any(t.__class__ is BatchedTensor and level in _levels(t)
                      for t in fw.values()):
            return True
    return False


def _levels(x) -> set:
    out = set()
    while x.__class__ is BatchedTensor:
        out.add(x._level)
        x = x._phys
    return out


def _example(x, pick):
    """The array of one example of ``x`` (``pick``: level -> index; other levels: 0)."""
    chain = []
    while x.__class__ is BatchedTensor:
        chain.append((x._level, x._bdim))
        x = x._phys
    a = x._data
    for level, bd in reversed(chain):
        a = np.take(a, pick.get(level, 0), axis=bd)
    return a


__all__ = ["VmapMode"]
