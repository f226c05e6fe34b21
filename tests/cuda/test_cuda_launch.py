"""The launch plan of generated CUDA kernels, checked on the CPU.

``launch_plan`` builds the argument list of the rendered signature; here a Python model of
the kernel's index arithmetic (the same decomposition ``render_cuda`` emits) reads the
inputs through that plan, so shapes, broadcast strides and merged reduction axes are
checked without a GPU. Running the kernels themselves is ``test_gpu.py``'s job.
"""
import numpy as np

from ember import dtypes as dt
from ember.codegen.cuda_launch import BLOCK, launch_plan
from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec, Reduce, ReduceKernel, Row, call


def _gather(arg, shape, strides, k, ndim, idx):
    """Element ``idx`` of input ``k`` as the kernel addresses it."""
    rem, off = idx, 0
    for d in range(ndim - 1, -1, -1):
        c = rem % shape[d]
        rem //= shape[d]
        off += c * strides[k * ndim + d]
    base = np.lib.stride_tricks.as_strided(arg, shape=(arg.size or 1,), strides=(arg.itemsize,))
    return base[off]


def test_elementwise_plan_broadcasts_with_zero_strides():
    x = np.arange(5, dtype=np.float32).reshape(1, 5)
    y = np.arange(4, dtype=np.float64).reshape(4, 1)
    k = Kernel([InputSpec(dt.float32, (0, 1)), InputSpec(dt.float64, (1, 0))],
               OutSpec(dt.float64, (4, 5)), Load(0) + Load(1),
               extra=((dt.bool_, call("gt", Load(0), 2.0)),))
    grid, block, args, outs = launch_plan(k, [x, y])
    assert block == (BLOCK,) and grid == (1,)
    a0, a1, o0, o1, shape, strides, ndim, n = args
    assert o0.shape == (4, 5) and o1.dtype == np.bool_ and int(n) == 20 and int(ndim) == 2
    assert list(strides) == [0, 1, 1, 0]
    got = [[_gather(a0, shape, strides, 0, 2, i) + _gather(a1, shape, strides, 1, 2, i)
            for i in range(20)]]
    np.testing.assert_array_equal(np.reshape(got, (4, 5)), x + y)


def test_reduction_plan_merges_the_reduced_axes():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    k = ReduceKernel([InputSpec(dt.float32, (12, 4, 1))], (2, 3, 4), 2,
                     [Reduce("sum", Load(0))], None, OutSpec(dt.float32, (2,)),
                     extra=((dt.float32, Row(0) * 2.0, False),))
    grid, _, args, outs = launch_plan(k, [x])
    a0, o0, o1, shape, strides, ndim, n = args
    assert list(shape) == [2, 12] and int(n) == 2 and grid == (2,)
    assert o0.shape == (2,) and o1.shape == (2,)
    rows = [[_gather(a0, shape, strides, 0, 2, r * 12 + i) for i in range(12)] for r in range(2)]
    np.testing.assert_array_equal(np.sum(rows, 1), x.reshape(2, -1).sum(1))
    assert launch_plan(k, [x], strategy="thread")[0] == (1,)     # a thread per row


def test_full_reduction_output_and_zero_dim_kernels():
    x = np.ones((3, 7), np.float16)
    soft = ReduceKernel([InputSpec(dt.float16, (7, 1))], (3, 7), 1,
                        [Reduce("amax", Load(0))], call("exp", Load(0) - Row(0)),
                        OutSpec(dt.float16, (3, 7)), full=True)
    _, _, args, outs = launch_plan(soft, [x])
    assert outs[0].shape == (3, 7) and outs[0].dtype == np.float16
    k0 = Kernel([InputSpec(dt.float32, ())], OutSpec(dt.float32, ()), Load(0) * 2.0)
    grid, _, args, outs = launch_plan(k0, [np.float32(3.0)])
    assert outs[0].shape == () and list(args[2]) == [1] and list(args[3]) == [0]
    assert int(args[-1]) == 1 and grid == (1,)


class _Module:
    """A CudaModule stand-in: ``function(name)`` records each launch's (name, grid, block,
    args)."""

    strategy = "block"

    def __init__(self):
        self.calls = []

    def function(self, name):
        return lambda grid, block, args: self.calls.append((name, grid, block, args))


def _same_args(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray) and x.ndim:
            assert x.shape == y.shape and x.strides == y.strides and x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)
        else:
            assert type(x) is type(y) and x == y, (x, y)


def _ptr(a):
    return a.__array_interface__["data"][0]


def _same_pointers(a, b):
    """What a launch reads of its array arguments: each one's pointer and dtype (a replayed
    plan may pass a bias as is where kernel_plan passed its broadcast view)."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
        assert _ptr(x) == _ptr(y) and x.dtype == y.dtype


def _same_inputs(got, want, arrays):
    """A replayed launch's inputs against kernel_plan's: the same pointers where
    kernel_plan's view starts at the array's own first element, else (a copy made each
    call, or a number's device copy) the same layout and values."""
    for x, y, a in zip(got, want, arrays):
        if isinstance(a, np.ndarray) and _ptr(y) == _ptr(a):
            _same_pointers([x], [y])
        elif isinstance(a, np.ndarray):
            _same_args([x], [y])
        else:
            assert x.dtype == y.dtype and np.all(x == y)


def _kernels():
    ew = Kernel([InputSpec(dt.float32, (0, 1)), InputSpec(dt.float32, (1, 0)),
                 InputSpec(dt.float32, (0, 0))], OutSpec(dt.float32, (4, 5)),
                Load(0) * Load(1) + Load(2))
    red = ReduceKernel([InputSpec(dt.float32, (12, 4, 1))], (2, 3, 4), 2,
                       [Reduce("sum", Load(0))], None, OutSpec(dt.float32, (2,)))
    flat = Kernel([InputSpec(dt.float16, (1,)), InputSpec(dt.float16, (0,))],
                  OutSpec(dt.float16, (64,)), Load(0) * Load(1))
    return ew, red, flat


def _arrays(rng, which, variant):
    if which == 0:
        x = rng.standard_normal((4, 5)).astype(np.float32)
        y = rng.standard_normal((4, 1)).astype(np.float32)
        z = rng.standard_normal(()).astype(np.float32)
        return [x if variant == 0 else np.asfortranarray(x), y, z]
    if which == 1:
        x = rng.standard_normal((2, 3, 4)).astype(np.float32)
        return [x if variant == 0 else x.transpose(0, 2, 1).copy().transpose(0, 2, 1)]
    buf = rng.standard_normal(72).astype(np.float16)
    return [buf[:64] if variant == 0 else buf[1:65], 2.0]      # aligned / not


def test_runner_replays_its_plan_on_a_layout_seen_before():
    # A compiled graph calls each fused kernel's runner with the same layouts every step:
    # the second call of a layout reuses the plan (no kernel_plan), launching exactly what
    # kernel_plan would on the new arrays -- also when the layout or alignment changes.
    from ember.codegen import cuda_launch as cl
    rng = np.random.default_rng(0)
    for which, k in enumerate(_kernels()):
        mod = _Module()
        run = cl._runner(mod, k, None, np)
        for variant in (0, 0, 1, 1, 0):
            arrays = _arrays(rng, which, variant)
            res = run(np, *arrays)
            name, grid, block, args, outs = cl.kernel_plan(k, arrays, np, "block")
            got = mod.calls[-1]
            assert got[:3] == (name, grid, block)
            n_in = len(arrays)
            _same_inputs(got[3][:n_in], args[:n_in], arrays)
            _same_args(got[3][n_in + len(outs):], args[n_in + len(outs):])
            assert np.shape(res) == outs[0].shape
        assert len(mod.calls) == 5


def test_runner_plan_is_made_once_per_layout(monkeypatch):
    from ember.codegen import cuda_launch as cl
    made = []
    real = cl.kernel_plan
    monkeypatch.setattr(cl, "kernel_plan", lambda *a, **kw: made.append(1) or real(*a, **kw))
    k = _kernels()[0]
    run = cl._runner(_Module(), k, None, np)
    rng = np.random.default_rng(1)
    for variant in (0, 0, 0, 1, 1, 0):
        run(np, *_arrays(rng, 0, variant))
    assert len(made) == 2


def test_runner_replays_row_entry_plans():
    # a kernel reading a bias row and per-row values takes the _r entry (wants_rows: the
    # module renders it); the replayed plan equals row_plan's on each new call
    from ember.codegen import cuda_launch as cl
    k = Kernel([InputSpec(dt.float32, (6, 1)), InputSpec(dt.float32, (0, 1)),
                InputSpec(dt.float32, (1, 0))], OutSpec(dt.float32, (4, 6)),
               Load(0) * Load(1) + Load(2))
    assert cl.wants_rows(k)
    assert not cl.wants_rows(_kernels()[1])               # a reduction: never
    mod = _Module()
    mod.rows = frozenset({k.name})
    run = cl._runner(mod, k, None, np)
    rng = np.random.default_rng(2)
    for cols_off in (0, 0, 1, 0):
        buf = rng.standard_normal(30).astype(np.float32)
        x = buf[cols_off:cols_off + 24].reshape(4, 6)
        b, c = rng.standard_normal(6).astype(np.float32), rng.standard_normal((4, 1)).astype(
            np.float32)
        run(np, x, b, c)
        name, grid, block, args, outs = cl.row_plan(k, [x, b, c], (4, 6), np)
        got = mod.calls[-1]
        assert got[0] == name == k.name + "_r" and got[1:3] == (grid, block)
        _same_args(got[3][:3], args[:3])
        _same_args(got[3][4:], args[4:])
    flags = int(mod.calls[-1][3][4])
    assert flags >> (cl.ROW_BIT + 1) & 1 and flags >> (cl.COL_BIT + 2) & 1


def test_replayed_plan_passes_broadcast_inputs_and_numbers_without_broadcast_to(monkeypatch):
    # a bias row (broadcast view at its own first element) is passed as is and a number as
    # its cached 0-d device copy: no broadcast_to per replayed launch; a reduction
    # whose reshape copies (axes that can't merge) still broadcasts and copies each call
    from ember.codegen import cuda_launch as cl
    k = _kernels()[0]
    mod = _Module()
    run = cl._runner(mod, k, None, np)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal(
        (4, 1)).astype(np.float32)
    run(np, x, y, 2.0)
    calls = []
    real = np.broadcast_to
    monkeypatch.setattr(np, "broadcast_to", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    x2, y2 = x + 1, y * 3
    run(np, x2, y2, 2.0)
    assert not calls
    got = mod.calls[-1][3]
    assert got[0] is x2 and got[1] is y2 and got[2].ndim == 0 and got[2] == 2.0
    ref = cl.kernel_plan(k, [x2, y2, 2.0], np, "block")[3]
    _same_pointers(got[:3], ref[:3])
    _same_args(got[4:], ref[4:])
    red = ReduceKernel([InputSpec(dt.float32, (12, 4, 1))], (2, 3, 4), 2,
                       [Reduce("sum", Load(0))], None, OutSpec(dt.float32, (2,)))
    run = cl._runner(mod, red, None, np)
    for _ in range(2):
        z = rng.standard_normal((2, 4, 3)).astype(np.float32).transpose(0, 2, 1)
        run(np, z)
        ref = cl.kernel_plan(red, [z], np, "block")[3]
        assert _ptr(mod.calls[-1][3][0]) != _ptr(z)            # the merged copy
        _same_args(mod.calls[-1][3][:1], ref[:1])
    assert calls
