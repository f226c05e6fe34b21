"""Every kind of CUDA kernel the code generator emits, compiled to PTX by NVRTC (no GPU needed).

Elementwise kernels of every op with a C template in every dtype it takes (contiguous and
broadcast), reductions of every kind in both strategies (block-per-row with warp shuffles,
thread-per-row), multi-stage rows (softmax, layer norm), multi-output kernels, and the
kernels the fusion pass makes for real compiled programs (an MLP training step, a
transformer block). ``scripts/test.sh`` installs the ``nvrtc`` extra, so CI runs these.
"""
import re

import numpy as np
import pytest

import ember
from ember import dtypes as dt
from ember.codegen import nvrtc
from ember.codegen.ir import (InputSpec, Kernel, Load, OutSpec, Reduce, ReduceKernel, Row,
                              call, infer, typed)
from ember.codegen.render_cuda import render_cuda, render_cuda_many
from ember.ops.registry import REGISTRY

pytestmark = pytest.mark.skipif(
    not (nvrtc.available() and nvrtc.include_dirs()),
    reason="NVRTC or the CUDA fp16/bf16 headers are not installed (pip install "
    "'ember[nvrtc]': nvidia-cuda-nvrtc-cu12, cuda-bindings, nvidia-cuda-runtime-cu12; "
    "scripts/test.sh installs them)")

DTYPES = [dt.float32, dt.float64, dt.float16, dt.bfloat16, dt.int64, dt.int32, dt.int16,
          dt.int8, dt.uint8, dt.bool_]
PARAMS = {"clamp": {"min": -0.75, "max": 2.0}, "round": {"decimals": 2},
          "nan_to_num": {"nan": 1.0, "posinf": 2.0, "neginf": -2.0}}


def _entries(ptx: str) -> set:
    return set(re.findall(r"\.entry\s+(\w+)\(", ptx))


#: dtypes whose kernels are also compiled with NVRTC's optimiser on (the flags Ember ships);
#: the other dtypes' modules compile with ``-G`` (no optimisation: the same front end —
#: parsing, overloads, types — and PTX emission, ~15x faster; CI has two cores).
OPTIMISED = (dt.float32, dt.float16)


def _compile(kernels, name, strategy="block", optimise=True):
    src = render_cuda_many(kernels, strategy)
    ptx = nvrtc.compile_ptx(src, name, options=() if optimise else ("-G",))
    # an elementwise kernel has two entry points: strided NAME, contiguous NAME_c
    assert _entries(ptx) == {k.name for k in kernels} | {
        k.name + "_c" for k in kernels if isinstance(k, Kernel)}
    return ptx


def _op_kernel(op, d, name, broadcast):
    """An elementwise kernel of ``op`` on ``d`` inputs, or None if the op rejects ``d``."""
    o = REGISTRY[op]
    dts = [dt.bool_] + [d, d] if op == "where" else [d] * o.nin
    params = dict(PARAMS.get(op, {}))
    if op == "cast":
        params["dtype"] = dt.float32 if d is not dt.float32 else dt.bfloat16
    if op == "clamp" and not d.is_floating_point:
        params = {"min": 0, "max": 1} if d is dt.bool_ else {"min": -3, "max": 5}
    try:
        compute, _ = infer(op, dts, params)
        body = call(op, *[Load(i) for i in range(len(dts))], compute=compute, **params)
        strides = [(4, 1), (0, 1), (1, 0)] if broadcast else [(1,)] * 3
        shape = (3, 4) if broadcast else (12,)
        out = typed(body, dts).dtype
        k = Kernel([InputSpec(t, strides[i]) for i, t in enumerate(dts)], OutSpec(out, shape),
                   body, name)
    except (TypeError, ValueError):
        return None           # the op does not take this dtype (integral ops on floats...)
    return k


@pytest.mark.parametrize("d", DTYPES, ids=str)
def test_every_expr_op_compiles_in_every_dtype(d):
    ops = sorted(n for n, o in REGISTRY.items() if o.expr)
    # NOTE: strides are runtime arguments, so a broadcast layout renders the same text
    kernels = [k for i, op in enumerate(ops)
               if (k := _op_kernel(op, d, f"k{i}_{op}", broadcast=i % 2 == 1)) is not None]
    floor = {True: 60, False: 20}[d.is_floating_point]
    assert len(kernels) >= floor, sorted(k.name for k in kernels)
    kernels += [Kernel([InputSpec(d, (1,))], OutSpec(t, (5,)), call("cast", Load(0), dtype=t),
                       f"cast_to_{t.name}") for t in DTYPES]      # every store conversion
    _compile(kernels, f"ops_{d.name}", optimise=d in OPTIMISED)


def _reductions(d):
    """Reduction kernels of every kind over ``d`` (sum/amax/amin always; mean on floats)."""
    kinds = ["sum", "amax", "amin"] + (["mean"] if d.is_floating_point else [])
    out = []
    for kind in kinds:
        k = ReduceKernel([InputSpec(d, (5, 1))], (4, 5), 1, [Reduce(kind, Load(0))], None,
                         OutSpec(_stage_out(kind, d), (4,)), name=f"r_{kind}_{d.name}")
        out.append(k)
    return out


def _stage_out(kind, d):
    if kind == "sum" and not d.is_floating_point:
        return dt.int64
    return d


def _rows_kernels():
    f32, f16 = dt.float32, dt.float16
    x = Load(0)
    softmax = ReduceKernel(
        [InputSpec(f16, (7, 1))], (3, 7), 1,
        [Reduce("amax", x), Reduce("sum", call("exp", x - Row(0)))],
        call("exp", x - Row(0)) / Row(1), OutSpec(f16, (3, 7)), full=True, name="softmax")
    mean = Reduce("mean", x)
    var = Reduce("mean", (x - Row(0)) * (x - Row(0)))
    layer_norm = ReduceKernel(
        [InputSpec(dt.bfloat16, (8, 1)), InputSpec(f32, (0, 1))], (6, 8), 1, [mean, var],
        (x - Row(0)) * (1.0 / call("sqrt", Row(1) + 1e-5)) * Load(1), OutSpec(dt.bfloat16, (6, 8)),
        full=True, name="layer_norm",
        extra=((f32, Row(0), False), (f32, (1.0 / call("sqrt", Row(1) + 1e-5)), False)))
    per_row = ReduceKernel([InputSpec(f32, (6, 1))], (2, 6), 1, [Reduce("sum", x * x)],
                           call("sqrt", Row(0)), OutSpec(f32, (2,)), name="norm_rows")
    strided = ReduceKernel([InputSpec(dt.float64, (1, 4))], (4, 3), 1,
                           [Reduce("amax", call("abs", x))], None,
                           OutSpec(dt.float64, (4,)), name="amax_strided")
    return [softmax, layer_norm, per_row, strided]


@pytest.mark.parametrize("strategy", ["block", "thread", "warp"])
def test_reductions_compile(strategy):
    kernels = [k for d in DTYPES for k in _reductions(d)] + _rows_kernels()
    ptx = _compile(kernels, f"reductions_{strategy}", strategy)
    if strategy == "block":            # the tree reduction really uses warp shuffles
        assert "shfl.sync.down" in ptx
    elif strategy == "warp":           # a warp per row: butterfly shuffles, no barrier
        assert "shfl.sync.bfly" in ptx and "bar.sync" not in ptx
    else:
        assert "shfl.sync" not in ptx


@pytest.mark.parametrize("kind", ["sum", "mean", "amax", "amin"])
def test_every_reduction_kind_reduces_with_warp_shuffles_and_assembles(kind):
    d = dt.float32
    k = ReduceKernel([InputSpec(d, (9, 1))], (4, 9), 1, [Reduce(kind, Load(0) * 2.0)], None,
                     OutSpec(d, (4,)), name=f"r_{kind}")
    src = render_cuda(k)
    op = {"sum": "EmberSum", "mean": "EmberSum", "amax": "EmberMax", "amin": "EmberMin"}[kind]
    assert f"ember_block_reduce<{op}>" in src
    assert "shfl.sync.down" in nvrtc.compile_ptx(src, f"r_{kind}")
    # down to sm_90 machine code (ptxas: what the driver's JIT would run), no spills
    _, log = nvrtc.compile_sass(src, f"r_{kind}")
    assert f"Compiling entry function 'r_{kind}'" in log
    assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", log), log


def test_multi_output_elementwise_compiles():
    x, y = Load(0), Load(1)
    h = x * 0.5
    k = Kernel([InputSpec(dt.float32, (1,)), InputSpec(dt.float16, (1,))],
               OutSpec(dt.float32, (9,)), h * call("tanh", h) + call("cast", y, dtype=dt.float32),
               name="multi", extra=((dt.float16, h), (dt.bool_, call("gt", x, 0.0))))
    src = render_cuda(k)
    assert "__half *__restrict__ out1" in src and "bool *__restrict__ out2" in src
    _compile([k], "multi")


def test_block_reduction_text_is_a_tree_over_the_row():
    k = _reductions(dt.float32)[0]
    src = render_cuda(k)
    assert "for (int64_t idx = blockIdx.x; idx < n; idx += gridDim.x)" in src
    assert "ember_block_reduce<EmberSum>" in src and "__shfl_down_sync" in src


def test_source_needs_no_libc_headers_under_nvrtc():
    src = render_cuda(_reductions(dt.int64)[0])
    head = src[:src.index("#else")]
    assert "#if defined(__CUDACC_RTC__)" in head and "typedef long int64_t;" in head
    assert "#include <stdint.h>" in src[src.index("#else"):src.index("#endif")]


def test_nvrtc_error_carries_the_log():
    with pytest.raises(nvrtc.NVRTCError, match=r"(?s)'broken'.*undefined"):
        nvrtc.compile_ptx('extern "C" __global__ void k(float *x) { x[0] = nope; }', "broken")


def test_unknown_strategy_is_rejected():
    with pytest.raises(ValueError, match="strategy must be one of"):
        render_cuda(_reductions(dt.float32)[0], strategy="lane")


def _fused_kernels(fn, *args):
    cf = ember.compile(fn)
    cf(*args)
    ks = [n.op.kernel for g in cf.graphs() for n in g.nodes if hasattr(n.op, "kernel")]
    return ks


def test_fusion_pass_kernels_of_real_programs_compile():
    from ember.codegen import available
    if not available():
        pytest.skip("no C compiler: the fusion pass makes no kernels here")
    nn, F = ember.nn, ember.nn.functional
    ember.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 10))
    opt = ember.optim.AdamW(mlp.parameters(), lr=1e-3)
    x, y = ember.randn(128, 64), ember.randint(0, 10, (128,))

    def step(x, y):
        loss = F.cross_entropy(mlp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    ln = nn.LayerNorm(64)

    def block(h):
        a = F.softmax(h @ h.transpose(-1, -2) / 4.0, dim=-1) @ h
        return F.gelu(ln(a + h)).sum()

    h = ember.randn(4, 64, 64, requires_grad=True)
    kernels = _fused_kernels(step, x, y) + _fused_kernels(
        lambda h: ember.autograd.grad(block(h), h)[0], h)
    kinds = {type(k).__name__ for k in kernels}
    assert kinds == {"Kernel", "ReduceKernel"} and len(kernels) >= 4, kernels
    renamed = [_renamed(k, f"f{i}") for i, k in enumerate(kernels)]
    _compile(renamed, "fused_programs")
    assert np.isfinite(float(step(x, y)))


def _renamed(k, name):
    from dataclasses import replace
    return replace(k, name=name)
