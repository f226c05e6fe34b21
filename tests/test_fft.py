"""ember.fft and ember.stft/istft: values vs NumPy (always) and PyTorch (optional oracle),
gradients vs finite differences, PyTorch's argument rules and errors.

The generated op tests (``tests/opinfo/fft.py``) cover the transforms' primitives on random
shapes, dtypes, non-contiguous views and zero-size batches; this file adds the argument
handling, the helpers and the short-time transforms.
"""
import numpy as np
import pytest

import ember as em
from ember.autograd import gradcheck

RNG = np.random.default_rng(1234)
X = RNG.standard_normal((3, 10))
Z = X + 1j * RNG.standard_normal((3, 10))

_CASES = [
    ("fft", Z, {}), ("fft", X, {"n": 7, "norm": "ortho"}), ("ifft", Z, {"dim": 0, "n": 5}),
    ("rfft", X, {"n": 12}), ("irfft", Z, {"n": 9, "norm": "forward"}), ("hfft", Z, {}),
    ("ihfft", X, {"dim": 0}), ("fft2", Z, {"s": (4, 4)}), ("ifft2", X, {"norm": "forward"}),
    ("rfft2", X, {}), ("irfft2", Z, {"s": (3, 7)}), ("fftn", Z, {"dim": (1,)}),
    ("ifftn", Z, {"s": (2, 6)}), ("rfftn", X, {"dim": (1, 0)}), ("irfftn", Z, {}),
    ("hfft2", Z, {}), ("ihfft2", X, {"norm": "ortho"}), ("hfftn", Z, {"s": (3, 6)}),
    ("ihfftn", X, {}),
]


@pytest.mark.parametrize("name,data,kw", _CASES, ids=[f"{c[0]}{c[2]}" for c in _CASES])
def test_matches_pytorch(name, data, kw):
    torch = pytest.importorskip("torch")
    for dt, tdt in ((em.float64, torch.float64), (em.float32, torch.float32)):
        a = data if np.iscomplexobj(data) else data.astype(dt.np)
        e = em.tensor(a, dtype=dt.to_complex() if np.iscomplexobj(a) else dt)
        t = torch.tensor(np.asarray(e.numpy()))
        got, want = getattr(em.fft, name)(e, **kw), getattr(torch.fft, name)(t, **kw)
        want = want.resolve_conj().numpy()
        assert got.dtype.np == want.dtype and tuple(got.shape) == want.shape
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4 if dt is em.float32
                                   else 1e-10)


def test_matches_numpy_batched_and_noncontiguous():
    big = RNG.standard_normal((4, 6, 16)) + 1j * RNG.standard_normal((4, 6, 16))
    view = em.tensor(big)[:, ::2, 1::2]          # non-contiguous, (4, 3, 8)
    want = np.fft.fft(big[:, ::2, 1::2], axis=-1)
    np.testing.assert_allclose(em.fft.fft(view).numpy(), want, rtol=1e-10, atol=1e-10)
    r = em.tensor(big.real).transpose(0, 2)     # (16, 6, 4)
    np.testing.assert_allclose(em.fft.rfftn(r, dim=(0, 1)).numpy(),
                               np.fft.rfftn(big.real.transpose(2, 1, 0), axes=(0, 1)),
                               rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(em.fft.fft(em.zeros(0, 5, dtype=em.complex128)).numpy(),
                               np.zeros((0, 5)))


def test_dtype_rules():
    assert em.fft.fft(em.arange(4)).dtype is em.complex64         # int -> default float
    assert em.fft.fft(em.ones(4, dtype=em.float64)).dtype is em.complex128
    assert em.fft.rfft(em.ones(4)).dtype is em.complex64
    assert em.fft.irfft(em.ones(3, dtype=em.complex128)).dtype is em.float64
    assert em.fft.irfft(em.ones(3)).shape == (4,)                  # real input promoted
    with pytest.raises(TypeError, match="rfft expects a real input"):
        em.fft.rfft(em.ones(4, dtype=em.complex64))
    with pytest.raises(TypeError, match="float16"):
        em.fft.fft(em.ones(4, dtype=em.float16))


@pytest.mark.parametrize("call,err,match", [
    (lambda: em.fft.fft(em.ones(4), norm="bogus"), ValueError, "invalid normalization"),
    (lambda: em.fft.fft(em.ones(0)), ValueError, r"number of data points \(0\)"),
    (lambda: em.fft.fft(em.ones(4), n=0), ValueError, "data points"),
    (lambda: em.fft.fftn(em.ones(2, 2), s=(2, 2), dim=(0,)), ValueError, "same length"),
    (lambda: em.fft.fftn(em.ones(2, 2), dim=(0, 0)), ValueError, "unique"),
    (lambda: em.fft.fft2(em.ones(4)), IndexError, "out of range"),
    (lambda: em.fft.irfft(em.ones(1, dtype=em.complex64)), ValueError, "data points"),
])
def test_errors(call, err, match):
    with pytest.raises(err, match=match):
        call()


def test_roundtrips():
    x = em.tensor(X)
    for norm in ("backward", "ortho", "forward"):
        np.testing.assert_allclose(em.fft.ifft(em.fft.fft(x, norm=norm), norm=norm).real.numpy(),
                                   X, atol=1e-12)
        np.testing.assert_allclose(em.fft.irfft(em.fft.rfft(x, norm=norm), n=10,
                                                norm=norm).numpy(), X, atol=1e-12)
        np.testing.assert_allclose(em.fft.hfft(em.fft.ihfft(x, norm=norm), n=10,
                                               norm=norm).numpy(), X, atol=1e-12)


def test_freqs_and_shifts_match_numpy():
    for n, d in ((5, 1.0), (8, 0.1), (1, 2.0)):
        np.testing.assert_allclose(em.fft.fftfreq(n, d, dtype=em.float64).numpy(),
                                   np.fft.fftfreq(n, d))
        np.testing.assert_allclose(em.fft.rfftfreq(n, d, dtype=em.float64).numpy(),
                                   np.fft.rfftfreq(n, d))
    assert em.fft.fftfreq(4).dtype is em.float32
    a = np.arange(30).reshape(5, 6)
    for dim in (None, 0, (1,), (0, 1)):
        axes = dim if not isinstance(dim, tuple) else list(dim)
        np.testing.assert_array_equal(em.fft.fftshift(em.tensor(a), dim).numpy(),
                                      np.fft.fftshift(a, axes))
        np.testing.assert_array_equal(em.fft.ifftshift(em.tensor(a), dim).numpy(),
                                      np.fft.ifftshift(a, axes))


@pytest.mark.parametrize("name,kw,cplx", [
    ("fft", {"n": 6}, True), ("rfft", {"norm": "ortho"}, False), ("irfft", {"n": 7}, True),
    ("hfft", {}, True), ("ihfft", {}, False), ("fft2", {"norm": "forward"}, False),
    ("irfft2", {}, True), ("rfftn", {"s": (2, 4)}, False),
])
def test_gradients_match_finite_differences(name, kw, cplx):
    a = RNG.standard_normal((2, 5)) + (1j * RNG.standard_normal((2, 5)) if cplx else 0)
    x = em.tensor(a, dtype=em.complex128 if cplx else em.float64, requires_grad=True)
    assert gradcheck(lambda t: getattr(em.fft, name)(t, **kw), (x,))


def test_fft_of_real_input_gradient_is_real():
    x = em.tensor(X[0], dtype=em.float64, requires_grad=True)
    em.fft.fft(x).abs().sum().backward()
    assert x.grad.dtype is em.float64
    assert gradcheck(lambda t: em.fft.fft(t).abs(), (em.tensor(X[0, :4], requires_grad=True),))


# ------------------------------------------------------------------ stft / istft
def _np_stft(x, n_fft, hop, window, center=True, normalized=False):
    """Independent reference: reflect-pad, frame, window, rfft (PyTorch's definition)."""
    if center:
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(n_fft // 2, n_fft // 2)], mode="reflect")
    n = 1 + (x.shape[-1] - n_fft) // hop
    frames = np.stack([x[..., t * hop:t * hop + n_fft] for t in range(n)], -2) * window
    spec = np.fft.rfft(frames, axis=-1, norm="ortho" if normalized else None)
    return np.swapaxes(spec, -1, -2)


@pytest.mark.parametrize("kw", [dict(n_fft=16, hop=4), dict(n_fft=12, hop=5, normalized=True),
                                dict(n_fft=8, hop=2, center=False)])
def test_stft_matches_numpy_reference(kw):
    n_fft, hop = kw["n_fft"], kw["hop"]
    w = np.hanning(n_fft + 1)[:-1]                      # periodic Hann
    got = em.stft(em.tensor(X), n_fft, hop, window=em.hann_window(n_fft, dtype=em.float64),
                  center=kw.get("center", True), normalized=kw.get("normalized", False),
                  return_complex=True)
    want = _np_stft(X, n_fft, hop, w, kw.get("center", True), kw.get("normalized", False))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(em.hann_window(n_fft, dtype=em.float64).numpy(), w, atol=1e-15)


def test_stft_istft_roundtrip_and_pytorch():
    w = em.hann_window(16, dtype=em.float64)
    x = em.tensor(X)
    spec = em.stft(x, 16, 4, window=w, return_complex=True)
    np.testing.assert_allclose(em.istft(spec, 16, 4, window=w, length=10).numpy(), X,
                               atol=1e-12)
    np.testing.assert_allclose(em.istft(spec[0], 16, 4, window=w, length=10).numpy(), X[0],
                               atol=1e-12)
    assert x.stft(16, 4, window=w, return_complex=True).shape == spec.shape
    torch = pytest.importorskip("torch")
    tw = torch.hann_window(16, dtype=torch.float64)
    tspec = torch.stft(torch.tensor(X), 16, 4, window=tw, return_complex=True)
    np.testing.assert_allclose(spec.numpy(), tspec.numpy(), atol=1e-10)
    np.testing.assert_allclose(em.istft(spec, 16, 4, window=w).numpy(),
                               torch.istft(tspec, 16, 4, window=tw).numpy(), atol=1e-10)


def test_stft_errors():
    with pytest.raises(RuntimeError, match="return_complex parameter be given"):
        em.stft(em.ones(32), 8)
    with pytest.raises(ValueError, match="win_length"):
        em.stft(em.ones(32), 8, win_length=9, return_complex=True)
    with pytest.raises(ValueError, match="window"):
        em.stft(em.ones(32), 8, window=em.ones(5), return_complex=True)
    with pytest.raises(TypeError, match="complex-valued input"):
        em.istft(em.ones(5, 3), 8)
    with pytest.raises(RuntimeError, match="overlap add"):
        em.istft(em.ones(5, 3, dtype=em.complex64), 8, 2, window=em.zeros(8))
    with pytest.warns(UserWarning, match="deprecated"):
        r = em.stft(em.ones(32), 8, window=em.ones(8), return_complex=False)
    assert r.shape == (5, 17, 2) and r.dtype is em.float32


def test_stft_istft_gradients():
    w = em.hann_window(8, dtype=em.float64)
    x = em.tensor(RNG.standard_normal(12), requires_grad=True)
    assert gradcheck(lambda t: em.stft(t, 8, 3, window=w, return_complex=True), (x,))
    spec = em.stft(em.tensor(RNG.standard_normal(12)), 8, 3, window=w, return_complex=True)
    s = spec.detach().contiguous().requires_grad_()
    assert gradcheck(lambda t: em.istft(t, 8, 3, window=w, length=12), (s,))
    wg = em.hann_window(8, dtype=em.float64).requires_grad_()
    assert gradcheck(lambda v: em.stft(x.detach(), 8, 3, window=v, return_complex=True), (wg,))


def test_bench_quick_smoke(capsys):
    """bench/numerics_fft.py runs and checks every library's result against NumPy."""
    import importlib.util
    import pathlib
    import sys
    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "numerics_fft.py"
    spec = importlib.util.spec_from_file_location("bench_numerics_fft", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    mod.main(["--quick", "--no-torch", "--rounds", "1"])
    out = capsys.readouterr().out
    assert "fft 1-D" in out and "rfft2 2-D" in out and "speed vs NumPy" in out


def test_stft_without_window_warns_like_pytorch():
    with pytest.warns(UserWarning, match="window was not provided"):
        em.stft(em.ones(32), 8, return_complex=True)


def test_autocast_runs_transforms_in_float32():
    x = em.tensor(X, dtype=em.bfloat16)
    with em.autocast("cpu", dtype=em.bfloat16):
        r = em.fft.rfft(x)
        s = em.stft(x[0], 4, window=em.ones(4), return_complex=True)
    assert r.dtype is em.complex64 and s.dtype is em.complex64
    np.testing.assert_allclose(r.numpy(), np.fft.rfft(x.float().numpy()), rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="bfloat16"):
        em.fft.rfft(x)                   # outside autocast: PyTorch's CPU refuses it too


def test_numerics_bench_fft_section_quick():
    """``bench/numerics.py --only fft --quick``: both cases run forward and backward."""
    import importlib.util
    import pathlib
    import sys
    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "numerics.py"
    spec = importlib.util.spec_from_file_location("bench_numerics_fft_section", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    fwd, bwd = mod.main(["--quick", "--reps", "1", "--only", "fft", "--threads", "0"])["fft"]
    assert [n.split()[0] for n, _, _ in fwd] == ["fft", "rfft2"]
    assert [n.split()[0] for n, _, _ in bwd] == ["fft", "rfft2"]
    assert all(ratio > 0 for _, _, ratio in fwd)


def test_out_argument():
    x = em.tensor(X)
    o = em.empty(3, 6, dtype=em.complex128)
    r = em.fft.rfft(x, out=o)
    assert r is o
    np.testing.assert_allclose(o.numpy(), np.fft.rfft(X), atol=1e-12)
    o2 = em.empty(3, 10, dtype=em.float64)
    em.fft.irfft(em.fft.rfft(x), n=10, out=o2)
    np.testing.assert_allclose(o2.numpy(), X, atol=1e-12)
