"""In-place ops (``add_``, ``mul_``, ``copy_``, ``zero_``...) and ``out=`` arguments.

An in-place op computes its result out of place through the dispatcher (so the
graph records it like any other op) and commits it into the target's memory:
views see the write, the storage's version counter is bumped, and the target's
``grad_fn`` is rebased onto the new node. Values the new node saved that alias
the target are replaced by a copy first, so the rule still sees the old values.
When autograd is not involved, elementwise arithmetic writes straight into the
target with the kernel's ``out=`` (no temporary), which is what optimizers hit.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..autograd.grad_mode import state
from ..errors import DTypeError, ShapeError, GraphError
from ..tensor import Tensor, _wrap
from . import arith
from ..autograd import graph as _graph
from ..autograd.graph import _version_of
from ..device.base import _backends
from .dispatch import broadcast_shapes, backend_of


def check_inplace(x: Tensor, op: str) -> None:
    if not state.grad_enabled:
        return
    if x._requires_grad and x._grad_fn is None:
        raise GraphError(f"{op}: a leaf Variable that requires grad is being used in an "
                         f"in-place operation (wrap it in ember.no_grad() if intended)")
    b = x._base
    # NOTE: a view that does not require grad (``p.data``, ``p.detach()``) is a detached
    # alias: writing into it is how manual updates work, as in PyTorch.
    if b is not None and x._requires_grad and b._requires_grad and b._grad_fn is None:
        raise GraphError(f"{op}: a view of a leaf Variable that requires grad is being used in "
                         f"an in-place operation")


def check_cast(result: _dt.DType, out: _dt.DType, op: str) -> None:
    """PyTorch's ``can_cast`` for writing a ``result`` into an existing ``out`` tensor
    (in-place ops, ``out=``): no complex -> real, no floating -> integer, no number -> bool.

    Raises:
        DTypeError: (a TypeError and RuntimeError) with PyTorch's message, naming ``op``.
    """
    if result.category > out.category:
        raise DTypeError(f"{op}: result type {result.name} can't be cast to the desired "
                         f"output type {out.name}")


def check_alpha(input, other, alpha, op: str) -> None:
    """PyTorch's ``alpha_check`` of ``add``/``sub`` on the operands' result type."""
    c = alpha.__class__
    if c is int or c is float and getattr(input, "_dtype", _dt.bool_).category >= _dt.FLOAT:
        return                  # NOTE: the optimizers' add_(g, alpha=-lr): no result_type
    dtype = _dt.result_type(input, other)
    if c is bool and dtype is not _dt.bool_:
        raise DTypeError(f"{op}: Boolean alpha only supported for Boolean results.")
    if isinstance(alpha, complex) and dtype.category != _dt.COMPLEX:
        raise DTypeError(f"{op}: For non-complex input tensors, argument alpha must not be a "
                         f"complex number (alpha={alpha!r}, dtype {dtype.name}).")
    if isinstance(alpha, float) and dtype.category < _dt.FLOAT:
        raise DTypeError(f"{op}: For integral input tensors, argument alpha must not be a "
                         f"floating point number (alpha={alpha!r}, dtype {dtype.name}).")


def _abstract() -> bool:
    """Values are placeholders (``ember.estimate_memory``'s mode): in-place ops record their
    effect on the graph and on memory but write nothing (and never into real tensors)."""
    return bool(state.modes) and getattr(state.modes[-1], "abstract", False)


def _no_write(x: Tensor) -> bool:
    """Whether a write into ``x`` is skipped: an abstract mode (:func:`_abstract`) or a
    ``meta`` tensor, which has no data to write into."""
    return x._device.type == "meta" or _abstract()


def commit(x: Tensor, r: Tensor, op: str) -> Tensor:
    """Write result ``r`` into ``x`` (shape/dtype-checked) and rebase ``x``'s history."""
    if state.modes and hasattr(state.modes[-1], "check_write"):   # vmap: batched into plain?
        state.modes[-1].check_write(x, r, op)
    if r._dtype is not x._dtype:
        check_cast(r._dtype, x._dtype, op)
        r = r.to(x._dtype)
    if r._data.shape != x._data.shape:
        try:
            bs = broadcast_shapes(r._data.shape, x._data.shape, op=op)
        except ShapeError:
            bs = None
        if bs != x._data.shape:
            raise ShapeError(f"{op}: output with shape {tuple(x.shape)} doesn't match the "
                             f"broadcast shape {tuple(r.shape)}")
        r = r.expand(x._data.shape)
    abstract = _no_write(x)
    if not abstract:
        _check_overlap(x, op)
    node = r._grad_fn
    if node is not None and node.saved is not None and state.grad_enabled:
        node.saved = [_snapshot(s) if isinstance(s, Tensor) and s._storage is x._storage else s
                      for s in node.saved]
        node.versions = [_version_of(s)
                         for s in node.saved]
    grad = state.grad_enabled and _differentiable_view(x, node)
    if grad or (state.fw_levels and x._base is not None and
                (r._fw is not None or x._base._fw is not None)):
        return _commit_view(x, r, grad)
    if node is None and state.grad_enabled and x._requires_grad:
        # NOTE: overwritten by a constant: x keeps requires_grad (as in PyTorch) with a
        # zero gradient to its old history.
        from .select import where
        r = where(_true(x), r, x)
        node = r._grad_fn
    if not abstract and not hasattr(x, "_batched_copy"):   # vmap writes batched x in on_write
        x._data[...] = r._data
    x._storage.version += 1
    if state.modes:
        _tracer_write(x, r)
    if node is not None and state.grad_enabled:
        x._grad_fn, x._out_nr, x._requires_grad = node, r._out_nr, True
    if r._fw is not None:
        x._fw = r._fw
    return x


def _tracer_write(x: Tensor, r: Tensor) -> None:
    """Tell a tracer (ember.graph) that ``x`` now holds ``r``'s values."""
    m = state.modes[-1]
    if hasattr(m, "on_write"):
        m.on_write(x, r)


def _true(x):
    from .factories import tensor
    return tensor(True, device=x._device)


def _check_overlap(x: Tensor, op: str) -> None:
    if x._data.size > 1 and (not getattr(x._data.flags, "writeable", True) or any(
            s == 0 and n > 1 for s, n in zip(x._data.strides, x._data.shape))):
        raise ShapeError(f"{op}: unsupported operation: more than one element of the "
                         f"written-to tensor refers to a single memory location. Please "
                         f"clone() the tensor before performing the operation.")


def _differentiable_view(x: Tensor, node) -> bool:
    """Whether an in-place write into view ``x`` must rewrite its base's history."""
    b = x._base
    if b is None:
        return False
    if x._requires_grad:
        return True
    # A view that does not require grad of a base that does is a detached alias
    # (detach(), .data): writing into it leaves the base's history alone, as in PyTorch.
    return node is not None and not b._requires_grad


def _commit_view(x: Tensor, r: Tensor, grad: bool) -> Tensor:
    """In-place write ``r`` into the view ``x`` of a base in the graph (PyTorch's CopySlices).

    The base's new value is recorded out of place (its old value with the view's region
    replaced by ``r``) and becomes the base's history; ``x`` becomes that view of it.
    Forward-mode tangents follow the same path (``grad`` False: tangents only).
    """
    from . import dispatch
    from .index import index_p, index_put_p
    from .strided import as_strided_p, as_strided_scatter_p, view_geometry
    b = x._base
    geo = view_geometry(x, b)
    if isinstance(geo, tuple):
        p = {"size": geo[0], "stride": geo[1], "storage_offset": geo[2]}
        nb = dispatch.apply(as_strided_scatter_p, (b, r), p)
    else:   # a base that is not C-contiguous: put r at the base's flat indices of x
        ids = _wrap(geo.reshape(-1), _dt.int64, x._device) if x._device.type == "cpu" else \
            _wrap(backend_of(x).asarray(geo.reshape(-1)), _dt.int64, x._device)
        nb = dispatch.apply(index_put_p, (b.reshape(-1), r.reshape(-1), ids),
                            {"dims": (0,), "accumulate": False}).reshape(b.shape)
    if not _no_write(x) and not hasattr(x, "_batched_copy"):
        x._data[...] = r._data
    x._storage.version += 1
    if state.modes:
        _tracer_write(x, r)
    if grad:
        b._grad_fn, b._out_nr, b._requires_grad = nb._grad_fn, nb._out_nr, nb._requires_grad
    b._fw = nb._fw
    v = _view_of(b, x, geo)
    if grad:
        x._grad_fn, x._out_nr, x._requires_grad = v._grad_fn, v._out_nr, v._requires_grad
        x._view_version = x._storage.version
    x._fw = v._fw
    return x


def _view_of(b: Tensor, x: Tensor, geo) -> Tensor:
    """Re-take view ``x`` (geometry ``geo``) of base ``b`` through the dispatcher."""
    from . import dispatch
    from .index import index_p
    from .strided import as_strided_p
    if isinstance(geo, tuple):
        p = {"size": geo[0], "stride": geo[1], "storage_offset": geo[2]}
        return dispatch.apply(as_strided_p, (b,), p)
    ids = _wrap(backend_of(x).asarray(geo.reshape(-1)), _dt.int64, x._device)
    return dispatch.apply(index_p, (b.reshape(-1), ids), {"dims": (0,)}).reshape(x.shape)


def _refresh_view(x: Tensor) -> None:
    """Give a stale view the history of its base's current value (see graph.view_grad_fn)."""
    from .strided import view_geometry
    b = x._base
    x._view_version = x._storage.version
    if not b._requires_grad:
        return
    v = _view_of(b, x, view_geometry(x, b))
    x._grad_fn, x._out_nr, x._requires_grad = v._grad_fn, v._out_nr, True


_graph.refresh_view = _refresh_view


def _copy(s: Tensor) -> Tensor:
    """A new tensor holding a copy of ``s``'s values (every example's, inside vmap)."""
    if s.__class__ is not Tensor and hasattr(s, "_batched_copy"):
        return s._batched_copy()
    return _wrap(s._data.copy() if s._device.type != "meta" else s._data, s._dtype,
                 s._device)


def _snapshot(s: Tensor) -> Tensor:
    """A copy of ``s``'s current values that keeps its place in the graph."""
    t = _copy(s)
    t._grad_fn, t._out_nr, t._requires_grad = s._grad_fn, s._out_nr, s._requires_grad
    return t


def _no_autograd(x, other) -> bool:
    return (not state.grad_enabled or not (x._requires_grad or getattr(
        other, "_requires_grad", False))) and not state.fw_levels and not state.modes


def _ufunc_(name, fallback, method_name):
    """In-place elementwise arithmetic (``Tensor.<method_name>``) with a no-temporary fast path.

    Without autograd (optimizer updates under ``no_grad``) the kernel writes straight
    into ``self`` with ``out=``; ``alpha`` scales ``other`` on the raw arrays.
    """
    def method(self, other, *, alpha=1):
        if alpha.__class__ is Tensor:      # a traced learning rate (ember.compile)
            other, alpha = other * alpha, 1
        elif alpha != 1:
            check_alpha(self, other, alpha, method_name)
        if _no_autograd(self, other):
            is_t = other.__class__ is Tensor or isinstance(other, Tensor)
            if is_t and other._dtype is self._dtype and other._device is self._device or \
                    (not is_t or other._device == self._device) and \
                    _dt.result_type(self, other).category <= self._dtype.category:
                xp = _backends[self._device.type].xp
                o = other._data if is_t else other
                try:
                    if alpha != 1:
                        o = xp.multiply(o, alpha)
                    getattr(xp, name)(self._data, o, out=self._data, casting="unsafe")
                except ValueError:
                    pass  # shapes do not fit: the slow path raises the proper error
                else:
                    self._storage.version += 1
                    return self
        if alpha != 1:
            other = other * alpha
        check_inplace(self, method_name)
        return commit(self, fallback(self, other), method_name)
    method.__name__ = method_name
    return method


def copy_into_out(out: Tensor, r: Tensor) -> Tensor:
    """Implements ``out=``: resize-free copy of ``r`` into ``out`` (not differentiable)."""
    if state.modes and hasattr(state.modes[-1], "check_write"):
        state.modes[-1].check_write(out, r, "out=")
    if r._requires_grad and state.grad_enabled:
        raise GraphError("out= arguments don't support automatic differentiation, but one of "
                         "the arguments requires grad")
    if r._dtype is not out._dtype:
        check_cast(r._dtype, out._dtype, "out=")
    if out._data.shape != r._data.shape:
        raise ShapeError(f"out=: expected out to have shape {tuple(r.shape)}, got "
                         f"{tuple(out.shape)}")
    if not _no_write(out):
        out._data[...] = r._data
    out._storage.version += 1
    if state.modes:
        _tracer_write(out, r)
    return out


def copy_(self: Tensor, src, non_blocking: bool = False) -> Tensor:
    """Copy ``src`` into ``self`` (broadcasting, casting); differentiable w.r.t. ``src``."""
    check_inplace(self, "copy_")
    if not isinstance(src, Tensor):
        from .factories import tensor
        src = tensor(src, dtype=self._dtype)
    if src._device != self._device:      # NOTE: a copy between devices, as in PyTorch
        src = src.to(self._device)
    r = src.to(self._dtype) if src._dtype is not self._dtype else src
    if r._data.shape != self._data.shape:
        r = r.expand(self._data.shape)
    if r.requires_grad and state.grad_enabled:    # (inside vmap: also an outer grad's)
        r = r.clone()
    elif r._storage is self._storage:
        r = _copy(r)
    return commit(self, r, "copy_")


def fill_(self: Tensor, value) -> Tensor:
    if isinstance(value, Tensor):
        return copy_(self, value.expand(self._data.shape))
    check_inplace(self, "fill_")
    b = self._base
    if state.grad_enabled and (self._requires_grad or b is not None and b._requires_grad):
        from .factories import tensor
        return commit(self, tensor(value, dtype=self._dtype, device=self._device), "fill_")
    if not _no_write(self):
        _check_overlap(self, "fill_")
        self._data[...] = value
    self._storage.version += 1
    if state.modes and hasattr(state.modes[-1], "on_fill"):
        state.modes[-1].on_fill(self, value)
    return self


def zero_(self: Tensor) -> Tensor:
    return fill_(self, 0)


def inplace_from(fn, name):
    """Make ``Tensor.<name>_`` from an out-of-place ``fn(self, *args, **kw)``."""
    def method(self, *args, **kwargs):
        check_inplace(self, name + "_")
        return commit(self, fn(self, *args, **kwargs), name + "_")
    method.__name__ = name + "_"
    return method


Tensor.add_ = _ufunc_("add", arith.add, "add_")
Tensor.sub_ = _ufunc_("subtract", arith.sub, "sub_")
Tensor.mul_ = _ufunc_("multiply", arith.mul, "mul_")
Tensor.div_ = inplace_from(arith.div, "div")
Tensor.pow_ = inplace_from(arith.pow, "pow")
Tensor.neg_ = inplace_from(arith.neg, "neg")
Tensor.copy_ = copy_
Tensor.fill_ = fill_
Tensor.zero_ = zero_
Tensor.__iadd__ = lambda self, other: Tensor.add_(self, other)
Tensor.__isub__ = lambda self, other: Tensor.sub_(self, other)
Tensor.__imul__ = lambda self, other: Tensor.mul_(self, other)
Tensor.__itruediv__ = lambda self, other: Tensor.div_(self, other)
