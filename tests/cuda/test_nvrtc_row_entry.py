"""The eager kernels' row-broadcast entry (``NAME_r``, ``render_cuda_ew.render_row_entry``)
compiles under NVRTC for every floating dtype, a 1- and a 2-input op, one with params; the emulator
runs it in ``test_cuda_eager_emu.py::test_broadcast_rows_run_the_row_entry_exactly``."""
import re

import pytest

from ember import dtypes as dt
from ember.codegen import cuda_eager, nvrtc

pytestmark = pytest.mark.skipif(
    not (nvrtc.available() and nvrtc.include_dirs()),
    reason="NVRTC or the CUDA fp16/bf16 headers are not installed (pip install "
    "'ember[nvrtc]')")


@pytest.mark.parametrize("d", [dt.float32, dt.float64, dt.float16, dt.bfloat16], ids=str)
@pytest.mark.parametrize("op,nin,params", [("add", 2, {}), ("exp", 1, {}),
                                           ("clamp", 1, {"min": -1.0, "max": 2.0})])
def test_eager_module_has_strided_contiguous_and_row_entries(d, op, nin, params):
    made = cuda_eager._make(op, d, nin, params)
    if made is False:
        pytest.skip(f"{op} has no C template for {d}")          # not this test's subject
    mod, k = made
    ptx = nvrtc.compile_ptx(mod.source, k.name)
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
    assert entries == {k.name, k.name + "_c", k.name + "_r"}
    assert f"{k.name}_rbody" in mod.source and "% cols" in mod.source
