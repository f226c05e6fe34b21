"""The contiguous elementwise entry unrolled (``render_cuda_ew.UNROLL`` 2 and 4, what
``bench/cuda_ew_sweep.py`` times) on a real GPU (skip: "no CUDA GPU/CuPy"): equal to the
IR interpreter on tails, misaligned views and 0-d operands, as on the emulator
(``test_cuda_ew_unroll_emu.py``); NVRTC contracts ``x * y + x`` into an FMA, so floats
compare within an ulp-level tolerance there (``test_gpu_vector.py``'s)."""
import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen.cuda_launch import kernel_plan
from test_cuda_ew_unroll_emu import _source
from test_cuda_vector_emu import _kernel, _want
from _cuda_emu import sample as _sample
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


@pytest.mark.parametrize("unroll", [2, 4])
def test_gpu_unrolled_entry_equals_numpy(gpu, unroll):  # noqa: F811
    import cupy
    from ember.codegen.cuda_cache import load_module
    mod = load_module(_source(unroll, f"gu{unroll}"), f"gu{unroll}")
    rng = np.random.default_rng(unroll)
    for d in (dt.float32, dt.float16, dt.float64, dt.int8):
        tol = {"float32": 1e-6, "float64": 1e-15, "float16": 2e-3}.get(d.name, 0)
        k = _kernel(d, f"gu{unroll}_{d.name}")
        for n in (1, 5, 4097, 1 << 20, (1 << 20) + 3):
            a, b = _sample(d, n + 1, rng), _sample(d, n + 1, rng)
            da, db = cupy.asarray(a), cupy.asarray(b)
            for (x, y), (dx, dy) in (((a[:n], b[:n]), (da[:n], db[:n])),
                                     ((a[1:], b[:n]), (da[1:], db[:n])),
                                     ((a[:n], b[0]), (da[:n], db[0]))):
                name, grid, block, args, outs = kernel_plan(k, [dx, dy], cupy, shape=(n,))
                assert name == k.name + "_c"
                mod.get_function(name)(grid, block, args)
                for g, w in zip(outs, _want(k, [x, y], (n,))):
                    g = cupy.asnumpy(g)
                    if g.dtype.kind == "f":
                        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                                   rtol=tol, atol=tol)
                    else:
                        np.testing.assert_array_equal(g, w)
