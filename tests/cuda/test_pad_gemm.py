"""An LM head's padded GEMMs reading values padded once (``cuda_gemm.zero_padded``,
the ``pad_gemm`` pass), on the CPU: the NumPy model of cuBLAS (``run_plan``) runs each plan.

With padding forced (``PAD_MIN_FLOPS = 1``) an odd vocabulary makes the three products
pad: the weight is copied for the logits and again for dx, the logits gradient for dx and
again for dW, and the logits out of their padded buffer. Padded once, the GEMMs read the
padded buffers: the same cuBLAS calls (every field of the plan), the same bits, two big
copies and two zero fills fewer. The compiled step (``test_pad_gemm_emu.py``) and a GPU
(``test_gpu_pad_gemm.py``) check the pass end to end.
"""
import gc

import numpy as np
import pytest

from ember.codegen import cuda_gemm as cg
from test_cuda_gemm import BF16, _lm_head, run_plan

FIELDS = ("fn", "transa", "transb", "m", "n", "k", "lda", "ldb", "ldc", "strideA",
          "strideB", "strideC", "batch", "type", "compute", "copy", "shape")


def _counting(monkeypatch):
    """Per call of ``_copy`` its bytes, and the number of zero fills (``_padded``'s and
    ``zero_padded``'s pads)."""
    copies = []
    real = cg._copy

    def copy(dst, src):
        copies.append(dst.nbytes)
        real(dst, src)
    monkeypatch.setattr(cg, "_copy", copy)
    monkeypatch.setattr(cg, "PAD_MIN_FLOPS", 1)
    return copies


def _three(x, w, dl):
    """Plans and results of logits = x @ W.mT, dx = dl @ W (dl as (B, T, V), as the graph
    hands it), dW = dl.mT @ x."""
    b = 2
    pairs = {"logits": (x, w.T), "dx": (dl.reshape(b, -1, dl.shape[-1]), w),
             "dw": (dl.reshape(-1, dl.shape[-1]).T, x)}
    plans = {k: cg.gemm_plan(a, c) for k, (a, c) in pairs.items()}
    return plans, {k: run_plan(p) for k, p in plans.items()}


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_lm_head_reads_values_padded_once_same_calls_same_bits(dtype, monkeypatch):
    copies = _counting(monkeypatch)
    x, wt = _lm_head(dtype)["logits"]
    w, dl = wt.T.copy(), _lm_head(dtype)["dx"][0]
    before, want = _three(x, w, dl)
    n_before, bytes_before = len(copies), sum(copies)
    copies.clear()
    wp, dlp = cg.zero_padded(w, np, rows=True), cg.zero_padded(dl, np)
    assert wp.shape == w.shape and dlp.shape == dl.shape and dlp.strides[0] == 72 * 2
    assert np.array_equal(wp, w) and np.array_equal(dlp, dl)
    after, got = _three(x, wp, dlp)
    for name in before:
        for f in FIELDS:
            assert after[name][f] == before[name][f], (name, f)
        assert got[name].tobytes() == want[name].tobytes(), name
    # before: W twice, dl twice, the logits out; after: W and dl once each, the logits out
    assert n_before == 5 and len(copies) == 3
    v, d, n = 67, 48, 40
    assert bytes_before - sum(copies) == 2 * (v * d + n * v)   # one W, one dl (the values)
    # the GEMMs read the padded buffers themselves: dW as it is (aligned), dx widened
    assert after["dw"]["B"].base is dlp.base and after["dx"]["B"].base is dlp.base
    assert after["dx"]["A"].base is wp.base and after["logits"]["A"].base is wp.base


def test_widening_needs_exactly_the_values_of_a_live_registered_buffer(monkeypatch):
    _counting(monkeypatch)
    dl = _lm_head(np.float16)["dx"][0]
    v = cg.zero_padded(dl, np)
    w = cg._widen(v, 40, 72)
    assert w.shape == (40, 72) and not w[:, 67:].any() and np.array_equal(w[:, :67], dl)
    assert cg._widen(v[1:], 39, 72) is None              # not at the buffer's origin
    assert cg._widen(v[:, :60], 40, 64) is None          # fewer columns than the values
    assert cg._widen(v[:20], 20, 72) is None             # fewer rows
    assert cg._widen(v, 40, 80) is None                  # past the buffer
    assert cg._widen(v.reshape(2, 20, 67), 20, 72).shape == (2, 20, 72)
    assert cg._widen(v.T, 72, 40).shape == (72, 40)
    plain = np.zeros((40, 72), np.float16)[:, :67]       # pitched, but nobody's padding
    assert cg._widen(plain, 40, 72) is None and cg._root(plain) is None
    key = id(v.base)
    assert key in cg._ZERO_PADDED
    del v, w
    gc.collect()
    assert key not in cg._ZERO_PADDED                    # weak: gone with the buffer


def test_an_unregistered_pitched_operand_plans_as_before(monkeypatch):
    """A view with an aligned pitch that no ``zero_padded`` made is no padded value: a
    GEMM on it is the direct call (odd k kept), as before."""
    _counting(monkeypatch)
    rng = np.random.default_rng(4)
    buf = rng.standard_normal((40, 72)).astype(np.float16)
    x = buf[:, :67]
    w = rng.standard_normal((67, 48)).astype(np.float16)
    p = cg.gemm_plan(x, w)
    assert p["B"] is x and p["A"] is w and p["k"] == 67 and p["ldb"] == 72
    ref = run_plan(p)
    np.testing.assert_allclose(ref.astype(np.float32),
                               x.astype(np.float32) @ w.astype(np.float32), rtol=2e-3,
                               atol=2e-2)


def test_plans_of_padded_values_are_not_replayed_for_plain_ones(monkeypatch):
    """The plan cache's key tells a registered padded value from a plain array of the
    same layout (the first pads as its value did, the second is the direct call)."""
    _counting(monkeypatch)
    monkeypatch.setattr(cg, "_plans", {})
    monkeypatch.setattr(cg, "_cublas", lambda p: run_plan(dict(p, copy=False)))
    rng = np.random.default_rng(5)
    dl = rng.standard_normal((40, 67)).astype(np.float16)
    x = rng.standard_normal((40, 48)).astype(np.float16)
    plain = np.zeros((40, 72), np.float16)[:, :67]
    plain[...] = dl
    assert cg._plan_key(plain.T, x, np, False, None) != \
        cg._plan_key(cg.zero_padded(dl, np).T, x, np, False, None)


def test_bench_counts_the_lm_heads_copies_on_the_stand_in():
    """bench/cuda_pad_gemm.py (own process: its stand-in patches the kernel loader and
    cuBLAS call) at a small size with padding forced: 5 copies a step without the pass,
    1 with it (the weight)."""
    import os
    import re
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, EMBER_GRAPH_CACHE="0")
    env.pop("EMBER_FAKE_CUDA", None)
    env.pop("EMBER_FAKE_CUDA_STRICT", None)        # NOTE: its own stand-in, no-op kernels
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "cuda_pad_gemm.py"),
                        "--d", "32", "--heads", "1", "--t", "8", "--batch", "2", "--vocab",
                        "67", "--pad-min-flops", "1"], capture_output=True, text=True,
                       env=env, timeout=600, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = dict(re.findall(r"^\s+(without|with) pad_gemm\s+copies (\d+)", r.stdout, re.M))
    assert rows == {"without": "5", "with": "1"}, r.stdout


def test_arrays_over_foreign_memory_are_no_padded_values(monkeypatch):
    """A base that is no array (``frombuffer``'s bytes) ends the walk to the root."""
    _counting(monkeypatch)
    keep = cg.zero_padded(np.ones((8, 9), np.float16), np)      # the registry not empty
    a = np.frombuffer(bytes(40 * 72 * 2), np.float16).reshape(40, 72)[:, :67]
    assert cg._root(a) is None and cg._widen(a, 40, 72) is None
    assert cg._root(keep) is not None
