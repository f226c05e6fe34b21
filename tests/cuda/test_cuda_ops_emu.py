"""Every elementwise op's CUDA kernel run from its text (``_cuda_emu``) against NumPy.

``test_nvrtc.py`` compiles one kernel per op with a C template in every dtype; here the
same kernels run on the CPU emulator (one block of 256 threads striding over the
elements; contiguous layouts through the ``NAME_c`` entry point, broadcast ones through the
strided ``NAME``) and must give what the registry's own NumPy
kernels give (:mod:`ember.codegen.interp`): exactly for integers and bools, within 2
ulps for float32/float64 (``expf`` and friends come from another libm). float16 and
bfloat16 compute in float32 inside and round once, so they are compared with the same
op evaluated in float64 and rounded to the dtype: within one ulp of the dtype.
"""
import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import interp
from ember.codegen.ir import InputSpec, Load, OutSpec, Reduce, ReduceKernel, Row, call
from ember.codegen.cuda_launch import kernel_plan, launch_plan
from ember.codegen.render_cuda import render_cuda_many
from ember.errors import EmberError
from ember.ops.registry import REGISTRY

import _cuda_emu
from test_nvrtc import _op_kernel

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")

EXACT = [dt.int64, dt.int32, dt.int16, dt.int8, dt.bool_]
ULP = {dt.float32: 2 * 2.0 ** -23, dt.float64: 2 * 2.0 ** -52, dt.float16: 2.0 ** -10,
       dt.bfloat16: 2.0 ** -7}
#: (op, dtype) pairs eager itself rejects for the sampled values (no reference).
_OPS = sorted(n for n, o in REGISTRY.items() if o.expr)


def _sample(k, rng):
    out = []
    for s in k.inputs:
        shape = k.out.shape
        if s.dtype.is_floating_point:
            out.append((rng.standard_normal(shape) * 2).astype(s.dtype.np))
        elif s.dtype is dt.bool_:
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:
            out.append(rng.integers(1, 6, shape).astype(s.dtype.np))   # no 0 divisors
    return out


def _reference(k, arrays):
    try:
        with np.errstate(all="ignore"):
            return np.asarray(interp.run_elementwise(k, [np.broadcast_to(a, k.out.shape)
                                                          for a in arrays]))
    except (EmberError, ValueError, TypeError):
        return None


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cuda_ops_emu"))


def _run_all(d, workdir):
    kernels = [(op, k) for i, op in enumerate(_OPS)
               if (k := _op_kernel(op, d, f"k{i}_{op}", broadcast=i % 2 == 1)) is not None]
    mod = _cuda_emu.EmuModule(render_cuda_many([k for _, k in kernels]), workdir, 1)
    rng = np.random.default_rng(0)
    for op, k in kernels:
        arrays = _sample(k, rng)
        # NOTE: contiguous kernels launch their NAME_c entry (vector loads), broadcast
        # ones the strided NAME: every op's text runs in both forms across the ops
        strided = any(0 in s.strides for s in k.inputs)
        name, grid, block, args, outs = kernel_plan(k, arrays, contiguous=not strided)
        assert name == k.name + ("" if strided else "_c")
        mod.get_function(name)(grid, block, args)
        yield op, k, arrays, outs[0]


@pytest.mark.parametrize("d", EXACT + [dt.float32, dt.float64], ids=str)
def test_kernels_equal_numpy(d, workdir):
    checked = 0
    for op, k, arrays, got in _run_all(d, workdir):
        want = _reference(k, arrays)
        if want is None:
            continue
        if d in EXACT and not got.dtype.kind == "f":
            np.testing.assert_array_equal(got, want, err_msg=op)
        else:
            u = ULP[dt.float64 if got.dtype == np.float64 else dt.float32]   # output's ulps
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=u, atol=u, equal_nan=True, err_msg=op)
        checked += 1
    assert checked >= (20 if d in EXACT else 60), checked


@pytest.mark.parametrize("d", [dt.float16, dt.bfloat16], ids=str)
def test_low_precision_kernels_round_once(d, workdir):
    checked = 0
    for op, k, arrays, got in _run_all(d, workdir):
        k64 = _op_kernel(op, dt.float64, k.name, broadcast=False)
        if k64 is None or got.dtype.kind == "b":
            continue
        want = _reference(k64, [a.astype(np.float64).reshape(k64.out.shape) for a in arrays])
        if want is None:
            continue
        want = want.astype(d.np).astype(np.float64).reshape(got.shape)
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=ULP[d], atol=ULP[d],
                                   equal_nan=True, err_msg=op)
        checked += 1
    assert checked >= 50, checked


@pytest.mark.parametrize("strategy", ["block", "thread", "warp"])
def test_reductions_and_row_kernels_equal_numpy(strategy, workdir):
    """Every reduction kind over every dtype, softmax / layer norm rows with per-row
    outputs, strided rows: block-per-row (warp shuffles + shared memory) and
    thread-per-row, 2 blocks striding over 4-6 rows."""
    from test_nvrtc import DTYPES, _reductions, _rows_kernels
    kernels = [k for d in DTYPES for k in _reductions(d)] + _rows_kernels()
    mod = _cuda_emu.EmuModule(render_cuda_many(kernels, strategy), workdir, 2)
    rng = np.random.default_rng(1)
    for k in kernels:
        arrays = [rng.standard_normal(k.shape).astype(s.dtype.np) if s.dtype.is_floating_point
                  else rng.integers(0, 2 if s.dtype is dt.bool_ else 9, k.shape).astype(
                      s.dtype.np) for s in k.inputs]
        grid, block, args, outs = launch_plan(k, arrays, strategy=strategy)
        mod.get_function(k.name)(grid, block, args)
        want = interp.run_reduction(k, arrays)
        want = want if isinstance(want, tuple) else (want,)
        for got, w in zip(outs, want):
            low = k.outputs[0][0] in (dt.float16, dt.bfloat16)
            tol = 1e-2 if low else 1e-6
            np.testing.assert_allclose(got.astype(np.float64), np.asarray(w).astype(np.float64)
                                       .reshape(got.shape), rtol=tol, atol=tol, err_msg=k.name)


def test_warp_per_row_layer_norm_over_long_rows_and_several_warps(workdir):
    """``strategy="warp"`` on rows longer than a warp (777: 24-25 elements a lane, not a
    multiple of 32) with per-row and full outputs, 2 warps a block and 1 block striding
    over 5 rows: each row's statistics and normalised values equal NumPy's."""
    f32 = dt.float32
    x = Load(0)
    mean = Reduce("mean", x)
    var = Reduce("mean", (x - Row(0)) * (x - Row(0)))
    rstd = 1.0 / call("sqrt", Row(1) + 1e-5)
    k = ReduceKernel([InputSpec(f32, (777, 1))], (5, 777), 1, [mean, var],
                     (x - Row(0)) * rstd, OutSpec(f32, (5, 777)), full=True, name="ln_warp",
                     extra=((f32, Row(0), False), (f32, rstd, False)))
    mod = _cuda_emu.EmuModule(render_cuda_many([k], "warp"), workdir, 1)
    a = np.random.default_rng(2).standard_normal((5, 777)).astype(np.float32) * 3 + 1
    _grid, _block, args, outs = launch_plan(k, [a], strategy="warp")
    mod.get_function(k.name)((1,), (64,), args)
    mu = a.astype(np.float64).mean(1)
    r = 1 / np.sqrt(a.astype(np.float64).var(1) + 1e-5)
    np.testing.assert_allclose(outs[1], mu, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outs[2], r, rtol=1e-6)
    np.testing.assert_allclose(outs[0], (a - mu[:, None]) * r[:, None], rtol=1e-5, atol=1e-5)
