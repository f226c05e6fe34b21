"""What the native bfloat16 GEMM's tests share: the dtype, float32's unit roundoff and the
``kernel`` fixture that runs a test once per native kernel (skipping, with the missing
instruction named, on a CPU without it)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ember.codegen import lowp_gemm as lg

BF = np.dtype(ml_dtypes.bfloat16)
U32 = 2.0 ** -24

KERNELS = {
    "amx": (lambda: lg.amx_available(), "auto",
            "CPU/OS without AMX-BF16 tiles (tdpbf16ps) or no permission for them"),
    "avx512": (lambda: lg.native_available(), "avx512",
               "CPU or compiler without AVX512-BF16 (vdpbf16ps)"),
}


@pytest.fixture(params=sorted(KERNELS))
def kernel(request, monkeypatch):
    """Sets :data:`lowp_gemm.mode` to run one native kernel; skips where it cannot run."""
    avail, mode, why = KERNELS[request.param]
    if not avail():
        pytest.skip(why)
    monkeypatch.setattr(lg, "mode", mode)
    monkeypatch.setattr(lg, "MIN_MACS", 0)        # tiny shapes too (edges, K = 1)
    return request.param
