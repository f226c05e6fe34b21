"""A compiled float16-autocast GPT step on the emulator with and without ``fuse_colsum``
(column sums inside the layer norms' backward row kernels: ``codegen/cuda_rowcols.py``).

The layer norms' dx kernels keep their stages, so the loss and every gradient the
grouping does not sum itself (every weight matrix's: they are products of dx) keep their
bits; the sums it moved (the norms' weight and bias gradients, a linear's bias gradient
read from a norm kernel's output) change only in summation order: with ``N`` rows summed
in float32 the difference is at most ``2 N eps32 sum|terms|`` (taken as at most
``2 N eps32 128 max|g|``), plus one float16 rounding (``2**-11`` relative) for a bias
gradient summed over float16 values and rounded once.
"""
import importlib

import numpy as np
import pytest

import ember as em
from ember.codegen.cuda_rowcols import ColReduceKernel
from ember.graph.passes import fuse_colsum

import _cuda_emu
from test_multi_launch import _TinyGPT, _program, emu_gpu  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")
fuse_cuda = importlib.import_module("ember.graph.passes.fuse_cuda")   # NOTE: not the function


def _grads(enabled, monkeypatch):
    monkeypatch.setattr(fuse_colsum, "ENABLED", enabled)
    em.manual_seed(0)
    model = _TinyGPT().to("cuda")
    x = em.randint(0, 32, (2, 8)).to("cuda")
    y = em.randint(0, 32, (2, 8)).to("cuda")

    def step(x, y):
        with em.autocast("cuda", dtype=em.float16):
            out = model(x)
            loss = em.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]),
                                                  y.reshape(-1))
        loss.backward()
        return loss
    fn = em.compile(step)
    for _ in range(2):                  # NOTE: the first (traced) call runs eagerly
        model.zero_grad(set_to_none=True)
        loss = fn(x, y)
    grads = [(name, p.grad.cpu().numpy()) for name, p in model.named_parameters()]
    return loss.cpu().numpy(), grads, fn


@pytest.mark.parametrize("warp", [False, True], ids=["block", "warp"])
def test_gpt_step_with_column_sums_in_row_kernels(emu_gpu, monkeypatch, warp):
    if warp:
        monkeypatch.setattr(fuse_cuda, "WARP_ROWS", 8)
    want_loss, want, fn0 = _grads(False, monkeypatch)
    loss, got, fn = _grads(True, monkeypatch)
    assert loss.tobytes() == want_loss.tobytes()
    moved = [n for n in _program(fn).graph.nodes
             if isinstance(getattr(n.op, "kernel", None), ColReduceKernel)]
    # 2 layers x 2 norms (pre-norm encoder layers, no final norm)
    assert len(moved) == 4 and not any(
        isinstance(getattr(n.op, "kernel", None), ColReduceKernel)
        for n in _program(fn0).graph.nodes)
    assert {fuse_cuda.strategy(n.op.kernel) for n in moved} == {"warp" if warp else "block"}
    rows, changed = 16, 0
    for (name, g), (name0, g0) in zip(got, want):
        assert name == name0 and g.dtype == g0.dtype and g.shape == g0.shape
        if g.ndim == 2:
            assert g.tobytes() == g0.tobytes(), name
            continue
        changed += g.tobytes() != g0.tobytes()
        # NOTE: sum|terms| is not at hand: it is taken as at most 128 max|g| (a sum
        # conditioned up to 128); plus one float16 rounding of a float16 sum
        tol = 2 * rows * 2.0 ** -24 * 128 * np.abs(g0).max() + 2.0 ** -11 * np.abs(g0)
        assert (np.abs(g.astype(np.float64) - g0) <= tol).all(), name
    assert changed          # NOTE: sums in another order: some bits differ
