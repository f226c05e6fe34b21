"""The GPU recompute policy (issue 21) on a real GPU: fewer stored values, same results.

Run on a GPU machine: ``python -m pytest -q tests/cuda/test_gpu_recompute.py`` (skips
without CuPy and a GPU). ``test_cuda_recompute.py``'s programs, compiled for the GPU: a
GELU-tanh MLP's forward kernel writes its activation only, a layer norm's forward writes
no normalised ``x``, a cross-entropy's forward writes per-row values only (the backward
recomputes the softmax from the logits); losses and parameters after four steps match
the CPU's (float16 autocast: float16's tolerance).
"""
import pytest

from test_cuda_recompute import (_ce_step, _close, _gelu_step, _ln_step, check_ce,
                                 check_gelu, check_ln)
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture

#: float32 tolerance against the CPU: cuBLAS and CuPy's reductions sum in another order
#: than OpenBLAS/NumPy (the stand-in runs NumPy's: 1e-5 there).
F32_GPU = dict(rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("autocast", [False, True])
def test_gelu_mlp_on_the_gpu(gpu, monkeypatch, autocast):  # noqa: F811
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    cf, losses, params = _gelu_step("cuda", autocast)
    check_gelu(cf)
    _, want_losses, want = _gelu_step("cpu", autocast)
    _close(losses, params, want_losses, want, autocast, F32_GPU)


def test_layer_norm_on_the_gpu(gpu, monkeypatch):  # noqa: F811
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    cf, losses, params = _ln_step("cuda")
    check_ln(cf)
    _, want_losses, want = _ln_step("cpu")
    _close(losses, params, want_losses, want, False, F32_GPU)


@pytest.mark.parametrize("autocast,kw", [(False, {}), (True, {}),
                                         (False, {"label_smoothing": 0.1})])
def test_cross_entropy_on_the_gpu(gpu, monkeypatch, autocast, kw):  # noqa: F811
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    cf, losses, params = _ce_step("cuda", autocast, **kw)
    check_ce(cf)
    _, want_losses, want = _ce_step("cpu", autocast, **kw)
    _close(losses, params, want_losses, want, autocast, F32_GPU)
