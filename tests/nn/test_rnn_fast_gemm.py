"""The float32 LSTM sequence kernels (``ember/codegen/rnn_gemm.py``): every variant this
CPU runs against a float64 reference (forward and BPTT), strided and odd-sized operands,
NaN propagation, thread-count determinism, and the path ``lstm_layer`` takes."""
import numpy as np
import pytest

import ember as em
from ember import nn
from ember.codegen import rnn_gemm
from ember.ops import _rnn_cpu, rnn as rnn_ops

VARIANTS = ["generic", "avx2", "avx512"]
# (L, N, H, IN): N past and below the register tile's rows, H past and below its lanes, no
# input (IN = 0) and inputs wider than H
SHAPES = [(7, 5, 9, 4), (32, 32, 128, 64), (3, 1, 1, 0), (4, 9, 33, 70), (2, 3, 16, 1)]


def _variant(name):
    if not rnn_gemm.runnable():
        pytest.skip("no C compiler: lstm_layer runs its NumPy kernels")
    if name not in rnn_gemm.runnable():
        pytest.skip(f"this CPU does not run the {name} variant (runs {rnn_gemm.runnable()})")
    return name


def _operands(L, N, H, IN, seed=0):
    """``x, h0, c0, w_ih, w_hh, b, gout``: a time-reversed input (the reverse direction's
    flip) with a row stride past its width, an initial state likewise."""
    rng = np.random.default_rng(seed)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)        # noqa: E731
    x = r(L, 2 * N, IN)[::-1, ::2]
    w_ih = (r(4 * H, IN) / np.sqrt(max(IN, 1))).astype(np.float32)
    return x, r(N, 2 * H)[:, H:], r(N, H), w_ih, (r(4 * H, H) / np.sqrt(H)).astype(np.float32), \
        r(4 * H), r(L, N, 6 * H)


def _f64(*arrays):
    return [a.astype(np.float64) for a in arrays]


def _backward(g, out, c0, w_ih, w_hh, variant):
    """The sequence kernel's ``dG | dh0 | dc0 | dx``."""
    L, N, S = out.shape
    H, IN = S // 6, w_ih.shape[1]
    dg, dhr, dc, dh0, dx = (np.full(s, np.nan, np.float32) for s in
                            ((L, N, 4 * H), (N, H), (N, H), (N, H), (L, N, IN)))
    work = np.empty(rnn_gemm.work_size(H, IN), np.float32)
    assert rnn_gemm.lstm_backward(g, out, c0, w_ih, w_hh, work, dg, dhr, dc, dh0, dx,
                                  variant=variant)
    return np.concatenate([dg.ravel(), dh0.ravel(), dc.ravel(), dx.ravel()])


def _forward(x, h0, c0, w_ih, w_hh, b, variant=None):
    work = np.empty(rnn_gemm.work_size(h0.shape[1], x.shape[2], x.shape[1]), np.float32)
    return rnn_gemm.lstm_forward(x, h0, c0, w_ih, w_hh, b, work, variant=variant)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("L,N,H,IN", SHAPES)
def test_variant_matches_float64_reference(variant, L, N, H, IN):
    _variant(variant)
    x, h0, c0, wi, wh, b, g = _operands(L, N, H, IN)
    ref = rnn_ops._lstm_layer_np(np, *_f64(x, h0, c0, wi, wh, b))
    out = _forward(x, h0, c0, wi, wh, b, variant)
    # float32 products summed in another order than BLAS's: the same bound as the per-step
    # C kernels' test (tests/nn/test_rnn_fast.py), here against float64
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5)
    dg, dh, dc = rnn_ops._lstm_bptt_np(np, *_f64(g, ref, h0, c0, wh))
    gref = np.concatenate([dg.ravel(), dh.ravel(), dc.ravel(), (dg @ wi).ravel()])
    got = _backward(g, ref.astype(np.float32), c0, wi, wh, variant)
    np.testing.assert_allclose(got, gref, rtol=2e-4, atol=2e-4)


def test_variants_agree_and_threads_do_not_change_bits():
    if not rnn_gemm.runnable():
        pytest.skip("no C compiler")
    x, h0, c0, wi, wh, b, g = _operands(6, 13, 40, 21, seed=3)
    before = em.get_num_threads()
    try:
        res = {}
        for threads in (1, 2):
            em.set_num_threads(threads)
            out = _forward(x, h0, c0, wi, wh, b)
            res[threads] = (out, _backward(g, out, c0, wi, wh, None))
    finally:
        em.set_num_threads(before)
    # each batch row's arithmetic is the same however the rows are split between threads
    np.testing.assert_array_equal(res[1][0], res[2][0])
    np.testing.assert_array_equal(res[1][1], res[2][1])


@pytest.mark.parametrize("variant", VARIANTS)
def test_nan_stays_in_its_batch_row(variant):
    _variant(variant)
    x, h0, c0, wi, wh, b, _ = _operands(4, 6, 20, 7, seed=1)
    x = x.copy()
    x[1, 2, 5] = np.nan
    out = _forward(x, h0, c0, wi, wh, b, variant)
    assert not np.isnan(out[0]).any()
    assert np.isnan(out[1, 2, :40]).all()                  # row 2's h and c at step 1,
    assert np.isnan(out[2:, 2, :40]).all()                 # and after
    assert not np.isnan(np.delete(out, 2, axis=1)).any()   # batch rows never mix


def test_unknown_variant_and_off(monkeypatch):
    if not rnn_gemm.runnable():
        pytest.skip("no C compiler")
    x, h0, c0, wi, wh, b, _ = _operands(2, 2, 3, 2)
    with pytest.raises(ValueError, match="rnn_gemm: unknown variant 'sse9'"):
        _forward(x, h0, c0, wi, wh, b, "sse9")
    assert _forward(x, h0, c0, wi, wh, b, "off") is None
    assert _forward(x.astype(np.float64), h0, c0, wi, wh, b) is None
    # a packing space smaller than work_size would be written past its end: refused
    with pytest.raises(ValueError, match=r"rnn_gemm: work must be .* \(work_size\)"):
        rnn_gemm.lstm_forward(x, h0, c0, wi, wh, b, np.empty(rnn_gemm.work_size(3, 2), np.float32))


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_primitive_float32_paths_match_numpy(mode, monkeypatch):
    """``lstm_layer``'s cpu kernels in float32 (sequence kernels, or with them off the
    projection GEMM and the per-step C kernels) against the NumPy kernels, forward and
    gradient (x, h0, c0, both weights, bias)."""
    if not rnn_gemm.runnable():
        pytest.skip("no C compiler")
    monkeypatch.setattr(rnn_gemm, "mode", mode)
    x, h0, c0, wi, wh, b, g = _operands(7, 3, 9, 5)
    ref = rnn_ops._lstm_layer_np(np, x, h0, c0, wi, wh, b)
    np.testing.assert_allclose(_rnn_cpu.lstm_layer(np, x, h0, c0, wi, wh, b, None), ref,
                               rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(_rnn_cpu.lstm_layer_grad(np, g, ref, x, h0, c0, wi, wh, b, None),
                               rnn_ops._lstm_layer_grad_np(np, g, ref, x, h0, c0, wi, wh, b),
                               rtol=2e-4, atol=2e-4)


def test_lstm_module_float32_matches_torch():
    torch = pytest.importorskip("torch")
    kw = {"num_layers": 2, "bidirectional": True, "batch_first": True}
    em.manual_seed(0)
    mine, ref = nn.LSTM(5, 24, **kw), torch.nn.LSTM(5, 24, **kw)
    with torch.no_grad():
        for n, p in ref.named_parameters():
            p.copy_(torch.from_numpy(getattr(mine, n).detach().numpy().copy()))
    x = np.random.default_rng(2).standard_normal((3, 11, 5)).astype(np.float32)
    ex, tx = em.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (eo, (eh, ec)), (to, (th, tc)) = mine(ex), ref(tx)
    (eo.sum() + eh.sum() * 2 + ec.sum() * 3).backward()
    (to.sum() + th.sum() * 2 + tc.sum() * 3).backward()
    np.testing.assert_allclose(eo.detach().numpy(), to.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for n, p in ref.named_parameters():
        np.testing.assert_allclose(getattr(mine, n).grad.numpy(), p.grad.numpy(),
                                   rtol=1e-4, atol=1e-4, err_msg=n)


def test_env_var_forces_the_variant(tmp_path):
    """``EMBER_RNN_GEMM=avx2`` makes ``lstm_layer``'s float32 kernel run the AVX2 variant
    (what an AVX2-only CPU runs) in a new process: its output is the in-process avx2
    call's, bit for bit; ``EMBER_RNN_GEMM=off`` runs the per-step path there."""
    import os
    import subprocess
    import sys
    _variant("avx2")
    x, h0, c0, wi, wh, b, _ = _operands(5, 7, 20, 9, seed=4)
    args = [np.ascontiguousarray(a) for a in (x, h0, c0, wi, wh, b)]
    np.savez(tmp_path / "in.npz", *args)
    code = ("import sys, numpy as np\n"
            "from ember.codegen import rnn_gemm\n"
            "from ember.ops import _rnn_cpu\n"
            "a = np.load(sys.argv[1])\n"
            "out = _rnn_cpu.lstm_layer(np, *[a[f'arr_{i}'] for i in range(6)], None)\n"
            "np.save(sys.argv[2], out)\n"
            "print(rnn_gemm.mode)\n")
    want = _forward(*args, variant="avx2")
    for mode in ("avx2", "off"):
        env = dict(os.environ, EMBER_RNN_GEMM=mode)
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "in.npz"),
                            str(tmp_path / f"{mode}.npy")], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split()[-1] == mode
        got = np.load(tmp_path / f"{mode}.npy")
        if mode == "avx2":
            np.testing.assert_array_equal(got, want)
        else:     # NumPy's GEMM per step: another summation order, the same values
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
