"""Compiled graphs' generated CUDA kernels run from their own text on the CPU.

The programs of ``test_cuda_fusion.py`` (W1 MLP step, CNN step, transformer block) on the
stand-in with a GPU's capabilities: ``fuse_cuda`` renders every group to CUDA C and the
module loader compiles that text with g++ under ``_cuda_emu``'s shim (a thread per CUDA
thread; block reductions' warp shuffles and ``__syncthreads`` included), so the kernels'
own index arithmetic, stores, reductions and epilogues produce the losses, which must
match the CPU's. Grid-stride kernels run with at most 2 blocks (any grid is right for
them; it exercises the stride loop). The attention kernels of the block run the same way.
"""
import numpy as np
import pytest

from ember.codegen import cuda_attention, cuda_cache

import _cuda_emu
from test_cuda_fusion import _block_grads, _cnn_losses, _mlp_losses

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")


@pytest.fixture
def emu_gpu(fake_cuda, monkeypatch, tmp_path):
    monkeypatch.setattr(fake_cuda, "capabilities",
                        fake_cuda.capabilities - {"host_kernels"} | {"cuda_kernels"})
    mods = []

    def loader(source, name):
        fused = "ember_flash_" not in source
        mods.append(_cuda_emu.EmuModule(source, str(tmp_path), 2 if fused else None))
        return mods[-1]
    monkeypatch.setattr(cuda_cache, "module_loader", loader)
    monkeypatch.setattr(cuda_attention, "_modules", {})
    return mods


def _launched(mods, prefix):
    return [n for m in mods for n in m.launches if n.startswith(prefix)]


def test_mlp_step_kernels_run_from_their_text(emu_gpu):
    want, _ = _mlp_losses("cpu")
    got, report = _mlp_losses("cuda")
    assert "fuse_cuda" in report and _launched(emu_gpu, "ember_fused_")
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_cnn_step_kernels_run_from_their_text(emu_gpu):
    want, _ = _cnn_losses("cpu")
    got, _ = _cnn_losses("cuda")
    assert _launched(emu_gpu, "ember_fused_")
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_transformer_block_kernels_run_from_their_text(emu_gpu):
    want_loss, want_grads, _ = _block_grads("cpu")
    loss, grads, _ = _block_grads("cuda")
    assert _launched(emu_gpu, "ember_fused_") and _launched(emu_gpu, "ember_flash_fwd")
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    for a, b in zip(grads, want_grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
