"""The GPU recompute policy's kernels (issue 21) run from their CUDA text on the CPU.

``test_cuda_recompute.py``'s programs (a GELU-tanh MLP step, a layer-norm step, a
cross-entropy step) on the stand-in with a GPU's capabilities, each generated kernel
compiled from its text by g++ under ``_cuda_emu``'s shim (``test_cuda_fusion_emu.py``'s
``emu_gpu``): the backward kernels that recompute a tanh chain, a normalised ``x`` or a
softmax from the logits and a row's log-sum-exp must give the CPU's results.
"""
import numpy as np
import pytest

import _cuda_emu
from test_cuda_fusion_emu import _launched, emu_gpu  # noqa: F401 - the fixture
from test_cuda_recompute import _ce_step, _gelu_step, _ln_step

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")


@pytest.mark.parametrize("program", [_gelu_step, _ln_step, _ce_step])
def test_recomputing_kernels_run_from_their_text(emu_gpu, monkeypatch, program):  # noqa: F811
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    _, losses, params = program("cuda")
    assert _launched(emu_gpu, "ember_fused_")
    _, want_losses, want = program("cpu")
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(params, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
