"""Running generated CUDA kernels: ``cupy.RawModule`` over :func:`render_cuda`'s text.

:func:`launch_plan` turns a kernel and its arrays into the grid, block and argument list
the rendered signature expects (pure Python: tested in CI on NumPy arrays);
:class:`CudaModule` renders several kernels into one source, compiled once to PTX by NVRTC
and kept in Ember's kernel cache (:mod:`.cuda_cache`), loaded on first use; its
:meth:`~CudaModule.runner` is what a compiled graph's fused CUDA node calls (the memory
planner's ``out=``/``outs=`` buffers included). :class:`CudaKernel` is one kernel alone.

Reductions reduce over one trailing axis: a kernel over ``naxes > 1`` trailing axes gets
its inputs viewed (copied if need be) with those axes merged.
"""
from __future__ import annotations

import math

import numpy as np

from .ir import Kernel, ReduceKernel
from .render_cuda import render_cuda_many
from .render_cuda_ew import (ALIGNED, COL_BIT, ILP, ROW_BIT, render_multi_entry,
                              render_row_entry, vec_bytes)

#: threads per block (a multiple of 32: the block reduction's warp shuffles need it).
BLOCK = 256
#: at most this many blocks (grid-stride loops cover the rest).
MAX_BLOCKS = 65535
#: an elementwise kernel's grid: one block per BLOCK * ILP elements, up to this many.
MAX_BLOCKS_EW = 1 << 20


def _merged_shape(k) -> tuple:
    if isinstance(k, ReduceKernel):
        lead = tuple(k.shape[:len(k.shape) - k.naxes])
        return lead + (math.prod(k.shape[len(k.shape) - k.naxes:]),)
    return tuple(k.out.shape)


def launch_plan(k, arrays, xp=np, strategy: str = "block", outs=None, cache=None):
    """``(grid, block, args, outputs)`` to launch kernel ``k`` (its strided entry point
    ``k.name`` for an elementwise kernel) on ``arrays``.

    Inputs are broadcast to the loop shape (stride 0 where broadcast) and, for reductions,
    their reduced axes merged into one; outputs are made contiguous with ``xp.empty``,
    except where ``outs`` (one array or None per output) gives a C-contiguous array of the
    output's size and dtype to write into (the memory planner's buffers). ``cache`` (a
    dict) keeps the device copies of the shape and stride arrays per layout, so a launch
    on a layout seen before copies nothing to the device.
    """
    return kernel_plan(k, arrays, xp, strategy, outs, cache, contiguous=False)[1:]


def kernel_plan(k, arrays, xp=np, strategy: str = "block", outs=None, cache=None,
                contiguous: bool = True, shape=None):
    """``(entry point, grid, block, args, outputs)`` of kernel ``k`` on ``arrays``: as
    :func:`launch_plan`, but an elementwise kernel whose loop collapses to one dim over
    contiguous or single-element inputs (``contiguous``) gets its ``NAME_c`` entry point
    (several consecutive elements per thread, vector loads when every pointer is aligned:
    :mod:`.render_cuda_ew`). ``shape``: an elementwise kernel's output shape for this call
    (the text does not depend on it: eager kernels serve every shape), else ``k``'s."""
    if shape is not None and not isinstance(k, ReduceKernel):
        space = loop = tuple(shape)
    else:
        space = tuple(k.shape) if isinstance(k, ReduceKernel) else tuple(k.out.shape)
        loop = _merged_shape(k)
    ins, strides = [], []
    nd = xp.ndarray
    for a, spec in zip(arrays, k.inputs):
        # NOTE: no copy when already a device array of the dtype; a host scalar is copied
        # once (_asarray); a full-shape operand skips broadcast_to (~5 us a call in CuPy)
        if isinstance(a, nd) and a.shape == space and a.dtype == spec.dtype.np:
            v = a
        else:
            v = xp.broadcast_to(_asarray(xp, a, spec.dtype.np), space)
        if len(loop) != len(space):
            v = v.reshape(loop)      # NOTE: copies only when the reduced axes can't merge
        ins.append(v)
        strides.append([s // v.itemsize for s in v.strides])
    red = isinstance(k, ReduceKernel)
    loop, strides = collapse(loop, strides, len(loop) - 1 if red else len(loop))
    given = list(outs) if outs is not None else [None] * len(k.outputs)
    outs = []
    for (d, _e, *full), o in zip(k.outputs, given):   # Kernel: (dtype, expr); + full
        per_row = red and not full[0]
        shape = space[:len(space) - k.naxes] if per_row else space
        outs.append(xp.empty(shape, d.np) if o is None else _checked_out(o, shape, d, k))
    if not red:
        n = math.prod(loop)
        grid = (min(max(-(-n // (BLOCK * ILP)), 1), MAX_BLOCKS_EW),)
        if contiguous and len(loop) <= 1 and all(st[0] in (0, 1) for st in strides
                                                  if st):
            flags = sum(1 << i for i, st in enumerate(strides) if not st or st[0] == 0)
            if _aligned([v for i, v in enumerate(ins) if not flags >> i & 1] + outs):
                flags |= ALIGNED
            args = tuple(ins) + tuple(outs) + (np.int32(flags), np.int64(n))
            return k.name + "_c", grid, (BLOCK,), args, outs
    strides = [s for st in strides for s in st]
    if not loop:                        # NOTE: a 0-d kernel loops over one element
        loop, strides = (1,), [0] * len(ins)
    ndim = len(loop)
    geo = None if cache is None else cache.get(key := tuple(strides))
    if geo is None:
        geo = (xp.asarray(loop, dtype=np.int64), xp.asarray(strides or [0], dtype=np.int64))
        if cache is not None:
            cache[key] = geo
    shape_arr, stride_arr = geo
    if red:
        n = math.prod(loop[:-1])
        per = {"block": 1, "warp": BLOCK // 32}.get(strategy, BLOCK)   # rows a block
        grid = (min(max(-(-n // per), 1), MAX_BLOCKS),)
    args = tuple(ins) + tuple(outs) + (shape_arr, stride_arr, np.int32(ndim), np.int64(n))
    return k.name, grid, (BLOCK,), args, outs


def row_plan(k, arrays, shape, xp, given=None):
    """The ``NAME_r`` launch ``(name, grid, block, args, outputs)`` of elementwise kernel
    ``k`` (:func:`~.render_cuda_ew.render_row_entry`) when every operand is a number, a
    C-contiguous array of the output's ``shape``, a C-contiguous row repeated over its
    leading dims (a bias: shape ``shape[-j:]``, leading 1s allowed) or a C-contiguous
    column of per-row values (shape ``shape[:-1] + (1,)``: keepdims statistics), at least
    one a row or column, all of one ``cols``; outputs new, or ``given`` C-contiguous
    arrays of the output's size. Else None (:func:`kernel_plan`'s entries).

    Why: with a bias or per-row operand the strided entry divides per element and dim and
    loads element by element (a fused float16 GELU with its bias: ~0.5 TB/s on an H100)."""
    shape = tuple(shape)
    if len(arrays) > COL_BIT or len(shape) < 1:
        return None         # NOTE: scalar bits 0..7 and column bits 8..15 must not meet
    flags, cols, ins = 0, None, []
    rows_of = math.prod(shape[:-1])
    for i, a in enumerate(arrays):
        if not isinstance(a, xp.ndarray):
            a = _asarray(xp, a, k.inputs[i].dtype.np)
        if a.size == 1 or not any(a.strides):  # NOTE: or a pre-broadcast host scalar
            flags |= 1 << i
        elif not a.flags.c_contiguous:
            return None
        elif a.shape != shape:
            s = a.shape
            while s and s[0] == 1:
                s = s[1:]
            if s == shape[len(shape) - len(s):]:
                c, bit = a.size, ROW_BIT + i
            elif s and s[-1] == 1 and a.size == rows_of and \
                    s[:-1] == shape[len(shape) - len(s):-1]:
                c, bit = shape[-1], COL_BIT + i
            else:
                return None
            if cols is not None and cols != c:
                return None
            flags, cols = flags | 1 << bit, c
        ins.append(a)
    if cols is None:
        return None
    outs = []
    for (d, *_), o in zip(k.outputs, given or [None] * len(k.outputs)):
        if o is None:
            o = xp.empty(shape, d.np)
        elif o.dtype != d.np or o.size != math.prod(shape) or not o.flags.c_contiguous:
            return None
        outs.append(o)
    if cols % ILP == 0 and _aligned([a for i, a in enumerate(ins) if not flags >> i & 1]
                                    + outs):
        flags |= ALIGNED
    n = math.prod(shape)
    grid = (min(max(-(-n // (BLOCK * ILP)), 1), MAX_BLOCKS_EW),)
    args = tuple(ins) + tuple(outs) + (np.int32(flags), np.int64(n), np.int64(cols))
    return k.name + "_r", grid, (BLOCK,), args, outs


def _c_strides(shape) -> tuple:
    return tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))


def wants_rows(k) -> bool:
    """Whether elementwise kernel ``k``'s inputs, by their specs, include a repeated row or
    a column of per-row values beside full and scalar ones: :class:`CudaModule` renders its
    ``NAME_r`` entry then (only then: NVRTC time)."""
    if not isinstance(k, Kernel) or len(k.inputs) > COL_BIT or len(k.out.shape) < 2:
        return False
    shape = tuple(k.out.shape)
    found = False
    for spec in k.inputs:
        st = tuple(spec.strides)
        if not any(st) or st == _c_strides(shape):
            continue
        j = next(i for i, x in enumerate(st) if x)
        if (j and st[j:] == _c_strides(shape[j:])) or \
                (st[-1] == 0 and st[:-1] == _c_strides(shape[:-1])):
            found = True
            continue
        return False
    return found


def wants_multi(k) -> bool:
    """Whether elementwise kernel ``k``'s launches take its ``NAME_c`` entry by their
    specs (every input C-contiguous over the output or one element, no row entry), so a
    group of them can be one ``NAME_m`` launch (:func:`~.render_cuda_ew.render_multi_entry`)."""
    if not isinstance(k, Kernel) or wants_rows(k):
        return False
    full = _c_strides(tuple(k.out.shape))
    return all(not any(s.strides) or tuple(s.strides) == full for s in k.inputs)


#: device copies of Python scalar operands, by (value's type, value, dtype): ``x * 2`` in
#: a loop copies its 2 to the device once.
_scalars: dict = {}


def _asarray(xp, a, np_dtype):
    if isinstance(a, (int, float, bool)):
        dev = xp.cuda.runtime.getDevice() if hasattr(xp, "cuda") else -1
        key = (a.__class__, a, np.dtype(np_dtype).str, xp.__name__, dev)
        v = _scalars.get(key)
        if v is None:
            if len(_scalars) > 1024:
                _scalars.clear()
            v = _scalars[key] = xp.asarray(a, dtype=np_dtype)
        return v
    return xp.asarray(a, dtype=np_dtype)


def _ptr(a) -> int:
    if isinstance(a, np.ndarray):           # NOTE: .data of a bfloat16 array raises
        return a.__array_interface__["data"][0]
    return a.data.ptr                       # a CuPy array


def _aligned(arrays) -> bool:
    """Whether every array's first element sits on its vector size (vector loads/stores)."""
    return all(_ptr(a) % vec_bytes(a.dtype.itemsize) == 0 for a in arrays)


def collapse(loop: tuple, strides: list, lead: int) -> tuple:
    """``(loop, strides)`` with size-1 dims dropped and neighbouring dims merged wherever
    every input steps through them as through one (``stride[d] == stride[d+1] * size[d+1]``),
    among the first ``lead`` dims (a reduction's reduced last dim stays).

    NOTE: the kernel turns a flat index into per-dim coordinates with a 64-bit division
    and remainder per dim and element; an elementwise kernel over contiguous or
    row-broadcast operands collapses to one or two dims, so it stays memory-bound.

    Example:
        >>> collapse((4, 5, 6), [[30, 6, 1], [0, 0, 1]], 3)
        ((20, 6), [[6, 1], [0, 1]])
    """
    dims = []                                   # [(size, [stride per input])], inner first
    for d in range(lead - 1, -1, -1):
        size, st = loop[d], [s[d] for s in strides]
        if size == 1:
            continue
        if dims and all(a == b * dims[-1][0] for a, b in zip(st, dims[-1][1])):
            dims[-1] = (dims[-1][0] * size, dims[-1][1])
        else:
            dims.append((size, st))
    dims.reverse()
    tail = [(loop[d], [s[d] for s in strides]) for d in range(lead, len(loop))]
    dims += tail
    new_loop = tuple(sz for sz, _ in dims)
    return new_loop, [[st[k] for _, st in dims] for k in range(len(strides))]


def _checked_out(o, shape, d, k):
    if o.dtype != d.np or o.size != math.prod(shape) or not o.flags.c_contiguous:
        raise ValueError(f"{k.name}: an output buffer must be C-contiguous {d.name} with "
                         f"{math.prod(shape)} elements (shape {tuple(shape)}); got "
                         f"{o.dtype} {tuple(o.shape)}")
    return o


class CudaModule:
    """Kernels rendered into one CUDA source and loaded as one module, on first use
    (:func:`ember.codegen.cuda_cache.load_module`: disk-cached PTX, ``cupy`` module).

    Example:
        >>> mod = CudaModule([k1, k2])             # one NVRTC run for both
        >>> fn = mod.function(k1.name)             # doctest: +SKIP (loads: needs a GPU)
    """

    def __init__(self, kernels, strategy: str = "block", name: str = "ember_cuda",
                 multi: bool = False):
        self.kernels = list(kernels)
        self.strategy, self.name = strategy, name
        self.source = render_cuda_many(self.kernels, strategy)
        # NOTE: kernels reading a bias / per-row values get the row entry too (wants_rows)
        self.rows = frozenset(k.name for k in self.kernels if wants_rows(k))
        self.source += "".join(render_row_entry(k) for k in self.kernels
                               if k.name in self.rows)
        # NOTE: ``multi``: contiguous kernels get the multi-launch entry (NVRTC time: only
        # for kernels a graph launches several times)
        self.multi = frozenset(k.name for k in self.kernels if multi and wants_multi(k))
        self.source += "".join(render_multi_entry(k) for k in self.kernels
                               if k.name in self.multi)
        self._module = None

    def function(self, kernel_name: str):
        if self._module is None:
            from .cuda_cache import load_module
            self._module = load_module(self.source, self.name)
        return self._module.get_function(kernel_name)

    def runner(self, kernel, metas=None, xp=None):
        """``run(xp, *arrays, out=None, outs=None) -> array or tuple`` launching ``kernel``
        (one of this module's) the way :class:`~ember.graph.passes.fuse_lower.FusedOp`'s
        runner does on the CPU: new outputs (of ``metas``' ``(shape, NumPy dtype)`` when
        given: a graph value's shape, e.g. a row value with its kept size-1 dims), or
        ``out=``/``outs=`` buffers. ``xp``: the device's array module, used whatever the
        caller passes (an executor whose first input is a CPU scalar passes NumPy).
        A row reduction with column sums runs :func:`~.cuda_rowcols.col_runner`."""
        if getattr(kernel, "cols", ()):
            from .cuda_rowcols import col_runner
            return col_runner(self, kernel, metas, xp)
        return _runner(self, kernel, metas, xp)

    def multi_runner(self, kernels, metas, xp=None):
        """``run(xp, *arrays, outs=None) -> tuple``: one launch of the ``NAME_m`` entry
        for the records of ``kernels`` (one name in :attr:`multi`, each with its own
        shapes; ``metas``: per record its outputs' ``(shape, NumPy dtype)``) over the
        records' arrays one after another (:class:`~.cuda_multi.MultiLaunch`)."""
        from .cuda_multi import MultiLaunch
        return MultiLaunch(self, kernels, metas, xp)


def _runner(module, k, metas, dev_xp):
    fn = []
    geo: dict = {}
    plans: dict = {}
    entries: dict = {}
    single = len(k.outputs) == 1
    rows = k.name in getattr(module, "rows", ())

    def entry(name):
        f = entries.get(name)
        if f is None:
            f = entries[name] = module.function(name)
        return f

    def run(xp, *arrays, out=None, outs=None, **_params):
        xp = dev_xp or xp
        if not fn:
            fn.append(module.function(k.name))
        given = list(outs) if outs is not None else [out] + [None] * (len(k.outputs) - 1)
        if metas is not None:
            given = [xp.empty(sh, dt) if o is None else o for o, (sh, dt) in zip(given, metas)]
        key = _layout_key(arrays, given, xp.ndarray)
        plan = plans.get(key) if key is not None else None
        if plan is not None:
            name, grid, block, args, res = plan.args(xp, arrays, given)
        else:
            made = row_plan(k, arrays, k.out.shape, xp, given) if rows else None
            made = made or kernel_plan(k, arrays, xp, module.strategy, given, geo)
            name, grid, block, args, res = made
            if key is not None:
                if len(plans) > 64:
                    plans.clear()
                plans[key] = _Plan(k, arrays, name, grid, block, args, res, xp.ndarray)
        if metas is not None:
            res = given                     # NOTE: the graph's shapes (the plan flattens)
        if int(args[-2] if name[-2:] == "_r" else args[-1]):   # NOTE: no launch for none
            f = fn[0] if name == k.name else entry(name)
            f(grid, block, args)
        return res[0] if single else tuple(res)
    return run


def _layout_key(arrays, given, nd):
    """What :func:`kernel_plan`'s result depends on besides the data: each array's shape,
    strides and dtype (a host scalar's type and value), and which outputs are given (their
    shapes). None when something else is passed (the plan is then made each call)."""
    key = []
    for a in arrays:
        if isinstance(a, nd):
            key.append((a.shape, a.strides, a.dtype.char))
        elif isinstance(a, (int, float, bool)):
            key.append((a.__class__, a))
        else:
            return None                     # NOTE: a host array (a CPU 0-d value) etc.
    key.append(tuple(None if o is None else (o.shape, o.strides, o.dtype.char) for o in given))
    return tuple(key)


class _Plan:
    """A kernel's launch for one layout of its arrays (:func:`_layout_key`), replayed on
    new arrays of that layout without :func:`kernel_plan`'s work (~60 us a launch of
    Python on a GPT step's ~450 fused launches: the compiled step was host-bound).

    Kept: the entry point, grid, block and the arguments after the arrays (the device
    shape/stride arrays, or the ``_c`` entry's flags and size); per input (``prep``): as
    is, also where the plan broadcasts it (:func:`_passing`: a launch reads an array's
    pointer only), a number's device copy, or broadcast (and reshaped: a reduction's
    merged axes) each call. The ``_c`` entry's ALIGNED flag is worked out again."""

    __slots__ = ("name", "grid", "block", "tail", "prep", "space", "loop", "outs",
                 "base_flags", "dtypes", "row", "vec")

    def __init__(self, k, arrays, name, grid, block, args, res, nd):
        self.name, self.grid, self.block = name, grid, block
        n_io = len(arrays) + len(res)
        self.tail = args[n_io:]
        red = isinstance(k, ReduceKernel)
        self.space = tuple(k.shape) if red else tuple(k.out.shape)
        self.loop = _merged_shape(k)
        self.dtypes = [spec.dtype.np for spec in k.inputs]
        self.row = name.endswith("_r")
        # NOTE: the row entry takes its arrays as they are (numbers copied once)
        self.prep = [isinstance(a, nd) and (self.row or a.shape == self.space and
                                            a.dtype == d and len(self.loop) == len(self.space))
                     for a, d in zip(arrays, self.dtypes)]
        if not self.row:
            for i, (a, d, v) in enumerate(zip(arrays, self.dtypes, args)):
                if not self.prep[i]:
                    self.prep[i] = _passing(a, d, v, nd)
        self.outs = [(o.shape, o.dtype) for o in res]
        self.base_flags = None
        if (name.endswith("_c") or self.row) and not red:
            self.base_flags = int(self.tail[0]) & ~ALIGNED
            self.vec = not self.row or int(self.tail[2]) % ILP == 0

    def args(self, xp, arrays, given):
        ins = []
        for a, direct, d in zip(arrays, self.prep, self.dtypes):
            if direct is _CONST or self.row and not direct:
                a = _asarray(xp, a, d)
            elif not direct:
                a = xp.broadcast_to(_asarray(xp, a, d), self.space)
                if len(self.loop) != len(self.space):
                    a = a.reshape(self.loop)
            ins.append(a)
        outs = [xp.empty(sh, dt) if o is None else o for o, (sh, dt) in zip(given, self.outs)]
        tail = self.tail
        if self.base_flags is not None:
            flags = self.base_flags
            if self.vec and _aligned([v for i, v in enumerate(ins) if not flags >> i & 1]
                                     + outs):
                flags |= ALIGNED
            tail = (np.int32(flags),) + tail[1:]
        return self.name, self.grid, self.block, tuple(ins) + tuple(outs) + tail, outs


#: :attr:`_Plan.prep` of an array passed as is although the plan broadcasts it / of a
#: number passed as its (cached, per device) device copy, not broadcast.
_ALIAS, _CONST = 2, 3


def _passing(a, d, v, nd):
    """How :class:`_Plan` passes input ``a``, planned as ``v`` (broadcast, maybe reshaped):
    :data:`_ALIAS` when ``a`` is a device array of dtype ``d`` and ``v`` starts at its
    first element (no copy: a reshape that can't merge axes copies); :data:`_CONST` for a
    number whose 0-d device copy ``v`` starts at (:func:`_asarray`'s, by device); else
    False (broadcast each call). NOTE: ``broadcast_to`` is ~3-5 us in CuPy, ~8 us in
    NumPy; a GPT step's fused launches made ~150 a call."""
    if isinstance(a, nd):
        return _ALIAS if a.dtype == d and _ptr(v) == _ptr(a) else False
    if a.__class__ in (int, float, bool) and v.base is not None:
        root = v
        while isinstance(root.base, nd):
            root = root.base
        if root.ndim == 0 and _ptr(root) == _ptr(v):
            return _CONST
    return False


def load_all(modules) -> None:
    """Load each of ``modules`` not loaded yet, their sources compiled concurrently first
    (:func:`ember.codegen.cuda_cache.load_modules`): a graph's kernels, before its first
    run."""
    todo = list({id(m): m for m in modules if m._module is None}.values())
    if not todo:
        return
    from .cuda_cache import load_modules
    for m, loaded in zip(todo, load_modules([(m.source, m.name) for m in todo])):
        m._module = loaded


class CudaKernel:
    """A generated kernel compiled for the GPU (needs CuPy and a GPU to run).

    Example:
        >>> k = CudaKernel(Kernel([InputSpec(float32, (1,))], OutSpec(float32, (n,)),
        ...                       call("exp", Load(0))))
        >>> (y,) = k(cupy.arange(n, dtype=cupy.float32))
    """

    def __init__(self, kernel, strategy: str = "block"):
        import cupy
        self.kernel, self.strategy, self.cupy = kernel, strategy, cupy
        self.module = CudaModule([kernel], strategy, kernel.name)
        self.source = self.module.source
        self.fn = self.module.function(kernel.name)

    def __call__(self, *arrays):
        name, grid, block, args, outs = kernel_plan(self.kernel, arrays, self.cupy,
                                                    self.strategy)
        if int(args[-1]):
            self.module.function(name)(grid, block, args)
        return tuple(outs)


__all__ = ["BLOCK", "CudaKernel", "CudaModule", "kernel_plan", "launch_plan", "load_all",
           "wants_multi", "Kernel", "ReduceKernel"]
