"""The eager row-broadcast entry (``NAME_r``: a Linear's bias add under float16 autocast)
on a real GPU (skip: "no CUDA GPU/CuPy"). Run: ``python -m pytest -q
tests/cuda/test_gpu_row_bias.py``. Exact against NumPy's float16 add (the sum of two
float16 values, rounded once, is one value whichever way it is computed)."""
import numpy as np
import pytest

import ember as em
from ember.codegen import cuda_eager
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


@pytest.mark.parametrize("shape", [(8, 1024, 3072), (8192, 2304), (4099, 4097)],
                         ids=["gpt_fc", "gpt_qkv", "odd_cols"])
def test_bias_add_runs_the_row_entry_exactly(gpu, shape):  # noqa: F811
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32).astype(np.float16)
    b = rng.standard_normal(shape[-1:], dtype=np.float32).astype(np.float16)
    rows = cuda_eager.stats["rows"]
    got = em.tensor(x, device="cuda") + em.tensor(b, device="cuda")
    assert cuda_eager.stats["rows"] == rows + 1
    assert got.dtype == em.float16 and tuple(got.shape) == shape
    np.testing.assert_array_equal(got.cpu().numpy().view(np.uint16), (x + b).view(np.uint16))
