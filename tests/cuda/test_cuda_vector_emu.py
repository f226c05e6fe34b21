"""Elementwise CUDA kernels' two entry points (strided ``NAME``, contiguous ``NAME_c``).

The contiguous variant loads and stores ``ILP`` elements per thread as one vector when
every pointer is aligned, element by element otherwise (misaligned views, the tail); the
strided one handles ``ILP`` elements ``blockDim.x`` apart. Here: which entry point the
launch plan picks for each layout; the kernels run from their text on the CPU emulator
(``_cuda_emu``: one or two blocks, so the grid-stride loops and the 32-bit index template
both run) on odd sizes, non-multiple-of-4 tails, misaligned views, scalar and broadcast
operands in every storage dtype, against the kernel IR's NumPy interpreter; and NVRTC +
ptxas: the contiguous float32 entry really issues 16-byte vector loads and stores, the
float64 one two per vector, and neither spills.
"""
import re
from dataclasses import replace

import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import interp, nvrtc
from ember.codegen.cuda_launch import kernel_plan, launch_plan
from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec, call
from ember.codegen.render_cuda import render_cuda_many
from ember.codegen.render_cuda_ew import ALIGNED, ILP

import _cuda_emu

DTYPES = [dt.float32, dt.float64, dt.float16, dt.bfloat16, dt.int32, dt.int8, dt.bool_]
SIZES = [1, 3, 4, 5, 63, 1023, 4097]


def _kernel(d, name, n=8, nd=1):
    """``x * y + x`` (``x | y`` for bools) with a bool second output ``x > y``."""
    x, y = Load(0), Load(1)
    body = call("logical_or", x, y) if d is dt.bool_ else x * y + x
    shape = (n,) * nd
    st = tuple([1] * nd)
    return Kernel([InputSpec(d, st), InputSpec(d, st)], OutSpec(d, shape), body, name,
                  extra=((dt.bool_, call("gt", x, y)),))


def _want(k, arrays, shape):
    """The interpreter's outputs; float16/bfloat16 computed in float32 and rounded once,
    as the kernels do (exactly: ``x * y + x`` has no library calls)."""
    d = k.out.dtype
    if d in (dt.float16, dt.bfloat16):
        k32 = _kernel(dt.float32, "ref", 1, len(shape))
        return [w.astype(o.np) for w, (o, _) in zip(
            _want(k32, [np.asarray(a).astype(np.float32) for a in arrays], shape), k.outputs)]
    k = replace(k, out=OutSpec(d, shape))
    r = interp.run_elementwise(k, [np.broadcast_to(a, shape) for a in arrays])
    return [np.asarray(w) for w in (r if isinstance(r, tuple) else (r,))]


def test_plan_picks_the_contiguous_entry_for_contiguous_and_scalar_operands():
    k = _kernel(dt.float32, "k", 4096)
    x = np.zeros(4096 + 1, np.float32)
    name, grid, block, args, _ = kernel_plan(k, [x[:4096], np.float32(2.0)])
    assert name == "k_c" and int(args[-2]) == (2 | ALIGNED) and int(args[-1]) == 4096
    assert grid == (-(-4096 // (block[0] * ILP)),)
    name, _, _, args, _ = kernel_plan(k, [x[1:], x[:4096]])        # misaligned view
    assert name == "k_c" and int(args[-2]) == 0
    k2 = _kernel(dt.float32, "k2", 4, 2)
    m = np.zeros((4, 4), np.float32)
    assert kernel_plan(k2, [m, m[0]])[0] == "k2"                   # a broadcast row
    assert kernel_plan(k2, [m, m.T])[0] == "k2"                    # transposed
    assert kernel_plan(k2, [m, m])[0] == "k2_c"                    # collapses to 1-d
    assert len(launch_plan(k2, [m, m])) == 4                       # strided, always


needs_emu = pytest.mark.skipif(not _cuda_emu.available(),
                               reason="no g++ with C++20 <barrier> to run the CUDA text on")


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    kernels = [_kernel(d, f"v_{d.name}") for d in DTYPES] + \
        [_kernel(d, f"m_{d.name}", 4, 2) for d in DTYPES]
    return _cuda_emu.EmuModule(render_cuda_many(kernels),
                               str(tmp_path_factory.mktemp("vec_emu")), 2)


def _run(module, k, arrays, shape):
    name, grid, block, args, outs = kernel_plan(k, arrays, shape=shape)
    module.get_function(name)(grid, block, args)
    for got, want in zip(outs, _want(k, arrays, shape)):
        np.testing.assert_array_equal(got.reshape(shape), want.reshape(shape),
                                      err_msg=f"{k.name} {name} {shape}")
    return name


@needs_emu
@pytest.mark.parametrize("d", DTYPES, ids=str)
def test_contiguous_entry_equals_numpy_on_tails_and_misaligned_views(module, d):
    rng = np.random.default_rng(0)
    k = _kernel(d, f"v_{d.name}")
    used = set()
    for n in SIZES:
        a, b = _cuda_emu.sample(d, n + 1, rng), _cuda_emu.sample(d, n + 1, rng)
        used.add(_run(module, k, [a[:n], b[:n]], (n,)))              # aligned
        used.add(_run(module, k, [a[1:], b[:n]], (n,)))              # misaligned view
        used.add(_run(module, k, [a[1:], b[1:2]], (n,)))             # scalar operand
        used.add(_run(module, k, [a[:n], np.asarray(b[0], d.np)], (n,)))   # 0-d
    assert used == {k.name + "_c"}


@needs_emu
@pytest.mark.parametrize("d", DTYPES, ids=str)
def test_strided_entry_equals_numpy_on_broadcast_and_transposed_operands(module, d):
    rng = np.random.default_rng(1)
    k = _kernel(d, f"m_{d.name}", 4, 2)
    used = set()
    for r, c in [(1, 1), (3, 5), (7, 33), (65, 31)]:
        a = _cuda_emu.sample(d, r * c, rng).reshape(r, c)
        used.add(_run(module, k, [a, _cuda_emu.sample(d, c, rng)], (r, c)))        # row broadcast
        used.add(_run(module, k, [a, _cuda_emu.sample(d, r, rng)[:, None]], (r, c)))
        t = _cuda_emu.sample(d, r * c, rng).reshape(c, r).T
        used.add(_run(module, k, [a, t], (r, c)))                         # transposed
        used.add(_run(module, k, [a[:, ::-1], a], (r, c)))                # negative stride
    assert k.name in used


needs_nvrtc = pytest.mark.skipif(not (nvrtc.available() and nvrtc.include_dirs()),
                                 reason="NVRTC or the CUDA fp16/bf16 headers are not installed")


def _entry(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    nxt = ptx.find(".entry ", start + 1)
    return ptx[start:nxt if nxt >= 0 else len(ptx)]


@needs_nvrtc
def test_contiguous_entry_uses_vector_loads_and_does_not_spill():
    k = Kernel([InputSpec(dt.float32, (1,))], OutSpec(dt.float32, (8,)),
               Load(0) * 0.5 * (1.0 + call("tanh", Load(0) * 0.7978845608 * (
                   1.0 + 0.044715 * Load(0) * Load(0)))), name="gelu")
    k64 = Kernel([InputSpec(dt.float64, (1,)), InputSpec(dt.float64, (1,))],
                 OutSpec(dt.float64, (8,)), Load(0) * Load(1), name="mul64")
    src = render_cuda_many([k, k64])
    ptx = nvrtc.compile_ptx(src, "vec")
    # NOTE: the loads and stores of the helper template are inlined into the entry
    c = _entry(ptx, "gelu_c")
    assert re.search(r"ld\.global(\.nc)?\.v4\.(u32|b32|f32)", c), c[:2000]
    assert re.search(r"st\.global\.v4\.(u32|b32|f32)", c)
    assert len(re.findall(r"ld\.global(\.nc)?\.v4\.", _entry(ptx, "mul64_c"))) >= 4
    _, log = nvrtc.compile_sass(src, "vec")
    for name in ("gelu", "gelu_c", "mul64", "mul64_c"):
        assert f"Compiling entry function '{name}'" in log
    assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", log), log
    # the per-thread element arrays live in registers (no local-memory stack frame)
    assert not re.search(r"[1-9]\d* bytes stack frame", log), log


@needs_nvrtc
def test_block_reduction_row_loop_is_unrolled():
    """A block-per-row reduction's row loop issues 4 loads an iteration (4 in flight per
    thread): more global loads in the PTX than the rolled loop's one, no spills."""
    from ember.codegen.ir import Reduce, ReduceKernel
    k = ReduceKernel([InputSpec(dt.float32, (9, 1))], (4, 9), 1, [Reduce("sum", Load(0))],
                     None, OutSpec(dt.float32, (4,)), name="rsum")
    src = render_cuda_many([k])
    ptx = nvrtc.compile_ptx(src, "rsum")
    assert len(re.findall(r"ld\.global(\.nc)?\.f32", ptx)) >= 4, ptx     # rolled: 1
    _, log = nvrtc.compile_sass(src, "rsum")
    assert not re.search(r"[1-9]\d* bytes (spill (stores|loads)|stack frame)", log), log
