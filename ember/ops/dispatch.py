"""The dispatcher: applies a registry op to tensors.

Layers, outermost first:

1. dispatch modes (the tracer of ``ember.compile`` pushes one; it sees every op),
2. dtype rule (PyTorch promotion; inputs cast to the compute dtype),
3. shape validation (the op's ``check``; broadcasting for n-ary elementwise ops),
4. the kernel for the device's backend, written against its ``xp`` — or, for a large
   elementwise op, a generated C kernel (``ember/codegen/eager.py``; ``EMBER_EAGER_KERNELS``),
5. autograd recording (a :class:`~ember.autograd.graph.Node` when any input requires grad),
6. forward-mode AD (tangents pushed through the op's JVP rule),
7. anomaly checks.

This function is the eager hot path: every branch here costs every op.
"""
from __future__ import annotations

import functools
import warnings

from .. import dtypes as _dt
from ..autograd.grad_mode import state
from ..autograd.graph import Node
from ..device import get_backend
from ..device.base import _backends
from ..device.meta import placeholder as _meta_placeholder
from ..errors import EmberError, ShapeError, DTypeError, DeviceError, describe
from ..tensor import Tensor, _wrap
from . import registry
from .layout import inverse, memory_order

# NumPy warns on log(0), 0/0... like PyTorch, Ember returns inf/nan silently. The filter is
# scoped to warnings raised from Ember's own modules, so the user's NumPy state is untouched.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"ember(\.|$)")

_FLOAT, _INT = _dt.FLOAT, _dt.INT
_result_type = _dt.result_type
_bool, _int64 = _dt.bool_, _dt.int64


def _compute_dtype(op, kind, inputs, x0, params):
    """(compute dtype or None for 'leave inputs alone', output dtype)."""
    if kind == "same":
        return None, x0._dtype
    if kind == "bool":
        return None, _bool
    if kind == "int64":
        return None, _int64
    if kind.__class__ is not str:
        return kind(*inputs, **params)
    if len(inputs) == 2:
        a, b = inputs
        bc = b.__class__
        if a.__class__ is Tensor and (bc is Tensor and a._dtype is b._dtype or (
                bc is float and a._dtype.category == _FLOAT) or (
                bc is int and a._dtype.category == _INT)):
            ct = a._dtype      # same dtype, or a weak Python scalar of a lower category
        else:
            ct = _result_type(a, b)
    elif len(inputs) == 1:
        ct = x0._dtype
    else:
        ct = _result_type(*(x for x in inputs if x is not None))
    if kind == "float":
        if ct.category < _FLOAT:
            ct = _dt.get_default_dtype()
    elif kind == "integral":
        if ct.category >= _FLOAT:
            raise DTypeError(f"{op.name}: only integer and bool tensors are supported, got "
                             f"{describe(inputs)}")
    elif kind == "compare":
        return ct, _bool
    return ct, ct


#: how many ember.profiler windows record (any thread): a module global, so the check in
#: apply() costs ~2 ns when none does (``state.profiler``, thread-local, is read only then)
_profiling = 0


def apply(op, inputs, params):
    """Run ``op`` on ``inputs`` (Tensors or Python scalars) with keyword ``params``."""
    # NOTE: the thread's switches read from its dict: one thread-local lookup, then plain
    # dict reads (each attribute of a threading.local costs ~35 ns; the dict read ~8 ns)
    st = state.__dict__
    if _profiling and st["profiler"] is not None:   # ember.profiler times this op
        return st["profiler"].op(op, inputs, params)
    if st["autocast"] is not None and op.name in st["autocast"]:
        inputs = _autocast(op.name, st["autocast"][op.name], inputs, None)[0]
    if st["modes"]:
        return st["modes"][-1].process(op, inputs, params)
    # One pass over the inputs: the first tensor, whether all tensors share one dtype and
    # device, whether any requires grad.
    x0 = None
    same = True
    req = False
    scalars = False
    pyfloat = pyint = False    # which Python numbers appear (PyTorch's weak scalars)
    for x in inputs:
        c = x.__class__
        if c is Tensor or (c is not float and c is not int and isinstance(x, Tensor)):
            if x0 is None:
                x0 = x
            elif x._dtype is not x0._dtype or x._device is not x0._device:
                same = False
            if x._requires_grad:
                req = True
        else:
            scalars = True
            if c is float:
                pyfloat = True
            elif c is int:
                pyint = True
            elif x is not None:
                same = False     # a bool, complex, NumPy scalar...: the promotion path
    if x0 is None:
        raise TypeError(f"{op.name}: expected at least one Tensor input, got "
                        f"{describe(inputs)}")
    dev = x0._device
    kind = op.dtype
    if scalars and same:
        # NOTE: PyTorch's weak scalars: a Python float beside a floating tensor, an int
        # beside an integer or floating one, leave the tensors' dtype alone (None is an
        # absent optional input); then an op with scalars skips promotion
        cat = x0._dtype.category
        if (pyfloat and cat != _FLOAT) or (pyint and cat != _FLOAT and cat != _INT):
            same = False
    if same and (kind == "promote" or kind == "same" or (
            kind == "float" and x0._dtype.category == _FLOAT)):
        ct, out_dt = None, x0._dtype      # the common case: nothing to promote or cast
        if scalars:
            if len(inputs) == 2:      # a tensor and a Python number (x * 1.5, 1 - x)
                a, b = inputs
                arrays = [a._data if a is x0 else a, b._data if b is x0 else b]
            else:
                arrays = []
                for x in inputs:
                    arrays.append(x._data if x.__class__ is Tensor or isinstance(x, Tensor)
                                  else x)
        elif len(inputs) == 2:
            # NOTE: no comprehension for the usual operand counts: on Python 3.11 each one
            # is a function call, a measurable part of a 100-element op's cost.
            arrays = [inputs[0]._data, inputs[1]._data]
        elif len(inputs) == 1:
            arrays = [x0._data]
        else:
            arrays = [x._data for x in inputs]
    else:
        ct, out_dt = _compute_dtype(op, kind, inputs, x0, params)
        if ct is None and same and not scalars:
            arrays = [x._data for x in inputs]
        else:
            if not same:
                dev = _common_device(inputs, dev)
            arrays = _input_arrays(op, inputs, ct, dev)
    if op.check is not None:
        op.check(*inputs, **params)
    dtype_ = dev.type
    xp = _backends[dtype_].xp
    kern = op._kcache.get(dtype_) or op.kernel_for(dtype_)
    # An elementwise op's output takes its first operand's layout (PyTorch's rule; NumPy
    # goes row-major when operands disagree): the kernel runs on the operands seen in that
    # dim order, and its result is seen back. Row-major first operands skip all of this, as
    # do small one-operand ops (NumPy keeps a lone operand's layout; the generated kernels
    # of large ones write row-major).
    order = None
    if (op.elementwise and (len(arrays) > 1 or x0._data.size >= _EAGER_MIN)
            and not x0._data.flags.c_contiguous and dtype_ != "meta" and not op.view
            and op.name != "contiguous"):
        arrays, order = _in_memory_order(arrays)
    # Eager fast path: a large elementwise op may run as a generated kernel (None: it did
    # not take the op). Small tensors pay this one size comparison only.
    if x0._data.size >= _EAGER_MIN and op.elementwise and (res := eager_elementwise(
            op, arrays, params, dtype_, (ct or x0._dtype).itemsize)) is not None:
        pass
    else:
        try:
            # NOTE: positional calls for the usual arities: a call through *args/**kwargs
            # costs ~0.1 us more than the kernel's own NumPy call on a small array
            if params:
                res = kern(xp, *arrays, **params)
            elif len(arrays) == 2:
                res = kern(xp, arrays[0], arrays[1])
            elif len(arrays) == 1:
                res = kern(xp, arrays[0])
            else:
                res = kern(xp, *arrays)
        except EmberError:
            raise
        except (ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError) as e:
            if op.elementwise and len(inputs) > 1:
                _check_broadcast(op, inputs)
            raise _kernel_error(op, inputs, params, e) from None
    if res.__class__ is not xp.ndarray:
        res = xp.asarray(res)
    if order is not None:
        res = res.transpose(order)
    odt = out_dt.np
    if res.dtype is not odt and res.dtype != odt:
        # NOTE: a meta placeholder changes dtype without a full-size cast copy
        res = res.astype(odt) if dtype_ != "meta" else _meta_placeholder(res.shape, odt)
    view = op.view
    if view and (view is True or res.size == 0 or xp.may_share_memory(res, x0._data)
                 or dtype_ == "meta"):   # NOTE: meta tensors are all contiguous: views
        out = _wrap(res, out_dt, dev, x0._storage, x0._base if x0._base is not None else x0)
    else:
        out = _wrap(res, out_dt, dev)
    if req and st["grad_enabled"] and op.differentiable and out_dt.category >= _FLOAT:
        # NOTE: record() inlined: one frame less per differentiable op
        save = op.save
        out._grad_fn = Node(op, params, inputs, save == "inputs" or save == "both",
                            out if save == "output" or save == "both" else None)
        out._requires_grad = True
        if out._base is not None:
            out._view_version = out._storage.version
    elif st["inference"] and not st["grad_enabled"]:
        out._inference = True
    if st["fw_levels"]:
        from ..autograd.forward_ad import push_tangents
        push_tangents(op, inputs, params, out)
    if st["anomaly"]:
        from ..autograd.anomaly import check_forward
        check_forward(op, inputs, params, out)
    return out


def _autocast(name, entries, args, kwargs):
    # NOTE: imported on first need: ember.amp sits above the ops layer.
    from ..amp.autocast_mode import cast_inputs
    return cast_inputs(name, entries, args, kwargs)


def autocast_entry(name, leaf: bool = True):
    """Decorate a composite that is PyTorch op ``name`` (or ``name(*args, **kwargs)``, when
    the ATen op depends on the arguments): inside an ``ember.autocast`` region
    its tensor arguments are cast by ``name``'s policy (``ember/amp/op_lists.py``) and its
    body runs with autocast off, as PyTorch's autocast kernels redispatch. ``leaf=False``
    marks an op PyTorch decomposes (``tensordot``): off its lists, the body's ops autocast.
    """
    def wrap(fn):
        @functools.wraps(fn)
        def entry(*args, **kwargs):
            st = state
            table = st.autocast
            if table is None:
                return fn(*args, **kwargs)
            # NOTE: PyTorch autocasts functional overloads only: with out= nothing is cast.
            op = name(*args, **kwargs) if callable(name) else name
            entries = table.get(op) if kwargs.get("out") is None else None
            if entries is None and not leaf:
                return fn(*args, **kwargs)
            if entries is not None:
                args, kwargs = _autocast(op, entries, args, kwargs)
            st.autocast = None
            try:
                return fn(*args, **kwargs)
            finally:
                st.autocast = table
        return entry
    return wrap


def record(op, params, inputs, out) -> None:
    """Make ``out`` the output of a new autograd node of ``op`` (what the op's VJP saves)."""
    save = op.save
    out._grad_fn = Node(op, params, inputs, save == "inputs" or save == "both",
                        out if save == "output" or save == "both" else None)
    out._requires_grad = True
    if out._base is not None:
        out._view_version = out._storage.version

#: smallest output size ember.codegen.eager.THRESHOLDS lists (configure() keeps it in step;
#: a test checks the two agree). Below it the fast path is never asked.
_EAGER_MIN = 1 << 15


def _in_memory_order(arrays) -> tuple:
    """``(arrays seen with their dims in the output's memory order, the transpose that
    restores the output's dim order)``; ``(arrays, None)`` where that order is row-major."""
    nd = max((a.ndim for a in arrays if hasattr(a, "ndim")), default=0)
    order = memory_order(arrays, nd)
    if order is None:
        return arrays, None
    out = []
    for a in arrays:
        if hasattr(a, "ndim") and a.ndim:
            if a.ndim < nd:
                a = a.reshape((1,) * (nd - a.ndim) + a.shape)
            a = a.transpose(order)
        out.append(a)
    return out, inverse(order)
#: the ops ember.codegen.eager.THRESHOLDS lists (configure() keeps it in step; a test checks
#: the defaults agree): on CPU, another op is asked only in float16/bfloat16 (the eager
#: path takes every one there), so a large float32 relu/add/mul pays no probe
_EAGER_OPS = frozenset((
    "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "erfinv", "pow", "atan2",
    "hypot", "exp", "threshold_backward"))
_eager_run = []


def eager_elementwise(op, arrays, params, device_type: str, itemsize: int):
    """The eager fast path of a large elementwise ``op`` (at least :data:`_EAGER_MIN`
    elements) on raw ``arrays``: a generated kernel's result, or None where :func:`apply`
    runs the op's own kernel. On the CPU only the ops of :data:`_EAGER_OPS` are asked, and
    every op in float16/bfloat16 (``itemsize`` 2: NumPy's loops convert element by
    element); on a GPU every op (its generated CUDA kernels)."""
    if device_type == "cpu":
        if op.name in _EAGER_OPS or itemsize == 2:
            return _eager_kernel(op, arrays, params)
        return None
    if device_type == "meta":
        return None
    return _eager_device_kernel(op, arrays, params)


def _eager_kernel(op, arrays, params):
    # NOTE: imported on first need: codegen sits above the ops layer, and a program with
    # no large elementwise op never loads it.
    if not _eager_run:
        from ..codegen.eager import run
        _eager_run.append(run)
    return _eager_run[0](op, arrays, params)


def _eager_device_kernel(op, arrays, params):
    # NOTE: a GPU's generated CUDA kernels (ember/codegen/cuda_eager.py); the stand-in
    # without them hands its NumPy arrays to the CPU's
    if not _eager_cuda:
        from ..codegen.cuda_eager import run
        _eager_cuda.append(run)
    return _eager_cuda[0](op, arrays, params)


_eager_cuda = []


def _input_arrays(op, inputs, ct, dev):
    # NOTE: a bool operand of an elementwise op is left to the kernel when another tensor
    # already has the compute dtype: NumPy mixes bools in exactly, in its buffered inner
    # loop, without a full-size cast copy (relu's backward multiplies by a bool mask).
    keep_bool = op.elementwise and ct is not None and any(
        getattr(x, "_dtype", None) is ct for x in inputs)
    arrays = []
    for x in inputs:
        if x.__class__ is Tensor or isinstance(x, Tensor):
            a = x._data
            if x._device is not dev and x._device != dev:
                if a.ndim != 0 or x._device.type != "cpu":
                    raise DeviceError(
                        f"{op.name}: Expected all tensors to be on the same device, but found "
                        f"at least two devices, {dev} and {x._device}! (move one with "
                        f".to(device); inputs: {describe(inputs)})")
                a = _backends[dev.type].asarray(a)   # NOTE: a 0-d CPU tensor is a scalar
            if ct is not None and x._dtype is not ct and not (keep_bool and x._dtype is _bool):
                a = a.astype(ct.np) if dev.type != "meta" else _meta_placeholder(a.shape, ct.np)
            arrays.append(a)
        else:
            arrays.append(x)
    return arrays


def _common_device(inputs, dev):
    """The device of the first input that is not a 0-d CPU tensor (PyTorch lets those mix
    with tensors on any device, like Python scalars); ``dev`` if there is none."""
    for x in inputs:
        if isinstance(x, Tensor) and (x._data.ndim != 0 or x._device.type != "cpu"):
            return x._device
    return dev


def _check_broadcast(op, inputs) -> None:
    shapes = [x._data.shape for x in inputs if isinstance(x, Tensor)]
    s0 = shapes[0]
    for s in shapes:
        if s != s0:
            broadcast_shapes(*shapes, op=op.name, inputs=inputs)
            return


def broadcast_shapes(*shapes, op: str = "broadcast_shapes", inputs=None) -> tuple:
    """The shape ``shapes`` broadcast to, or a :class:`ShapeError` naming the op."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        off = ndim - len(s)
        for i, n in enumerate(s):
            cur = out[off + i]
            if n != cur:
                if cur == 1:
                    out[off + i] = n
                elif n != 1:
                    what = describe(inputs) if inputs is not None else \
                        ", ".join(str(tuple(x)) for x in shapes)
                    raise ShapeError(
                        f"{op}: shapes {' and '.join(str(tuple(x)) for x in shapes)} cannot be "
                        f"broadcast together (dimension {i - len(s)} is {cur} vs {n}; sizes "
                        f"must match or be 1). Inputs: {what}")
    return tuple(out)


def _kernel_error(op, inputs, params, e) -> Exception:
    kind = {TypeError: DTypeError, IndexError: IndexError}.get(type(e), ShapeError)
    ps = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return kind(f"{op.name}: invalid arguments {describe(inputs)}" + (f" with {ps}" if ps
                else "") + f": {e}")


def backend_of(t: Tensor):
    return get_backend(t._device)


registry._install_dispatcher(apply)
