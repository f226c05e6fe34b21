"""The tensor-core building blocks (:mod:`ember.codegen.cuda_mma`): through NVRTC and ptxas
for sm_80 and sm_90 (``mma.sync``/``ldmatrix`` in the machine code), and run on the CPU
emulator (``_cuda_emu``: the documented fragment layouts) against NumPy. The same kernels
run on a real GPU in ``test_gpu_mma.py``.
"""
import re

import numpy as np
import pytest

import _cuda_emu
import mma_kernels
from ember.codegen import nvrtc


@pytest.mark.skipif(not _cuda_emu.available(), reason="no g++ with C++20 <barrier>")
@pytest.mark.parametrize("ty", ["f16", "bf16"])
@pytest.mark.parametrize("seed", [0, 1])
def test_mma_ldmatrix_pack_on_the_emulator(ty, seed, tmp_path):
    mod = _cuda_emu.EmuModule(mma_kernels.source(ty), str(tmp_path))
    (a, b, ct), vals = mma_kernels.inputs(ty, seed)
    ab = np.zeros((16, 16), np.float32)
    d = np.zeros((16, 8), np.float32)
    mod.get_function(f"ember_mma_test_{ty}")((1,), (32,), (a, b, ct, ab, d))
    want_ab, want_d = mma_kernels.reference(ty, *vals)
    np.testing.assert_allclose(ab, want_ab, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(d, want_d, rtol=1e-5, atol=1e-4)


def test_a_wrong_layout_is_caught(tmp_path):
    """The check above can fail: the second product with C's fragment from the wrong rows."""
    if not _cuda_emu.available():
        pytest.skip("no g++ with C++20 <barrier>")
    src = mma_kernels.source("f16").replace("(lane >> 3) & 1", "(lane >> 4) & 1")
    mod = _cuda_emu.EmuModule(src, str(tmp_path))
    (a, b, ct), vals = mma_kernels.inputs("f16")
    ab = np.zeros((16, 16), np.float32)
    d = np.zeros((16, 8), np.float32)
    mod.get_function("ember_mma_test_f16")((1,), (32,), (a, b, ct, ab, d))
    assert not np.allclose(d, mma_kernels.reference("f16", *vals)[1], atol=1e-2)


NVRTC = nvrtc.available() and bool(nvrtc.include_dirs())


@pytest.mark.skipif(not NVRTC, reason="NVRTC or the CUDA headers are not installed "
                    "(pip install 'ember[nvrtc]')")
@pytest.mark.parametrize("ty", ["f16", "bf16"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_mma_text_compiles_to_tensor_core_code(ty, arch):
    src = mma_kernels.source(ty)
    ptx = nvrtc.compile_ptx(src, f"mma_{ty}", "compute_" + arch[3:])
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx
    _, log = nvrtc.compile_sass(src, f"mma_{ty}", arch)
    assert f"Compiling entry function 'ember_mma_test_{ty}'" in log
    assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", log), log
