"""Functions that compute on the host (NumPy/LAPACK algorithms over a tensor's values) on
``cuda`` tensors: each reads a host copy (``.cpu()``) and returns its result on the input's
device, equal to the CPU's. They read ``.numpy()`` of their input, which refuses a device
tensor, or made CPU results (``info`` of the ``_ex`` solvers), so on a GPU they raised or
left a CPU tensor beside cuda ones; found by a sweep on the strict stand-in. Also
``linalg.inv`` on a GPU: CuPy returns inf/nan for a singular matrix, so a non-finite result
is computed again on the host for LAPACK's error (``_lapack.inv_device``).
"""
import numpy as np
import pytest

import ember as em

F = em.nn.functional


def _cases(dev):
    rng = np.random.default_rng(0)

    def T(a, **k):
        return em.tensor(np.asarray(a), **k).to(dev)
    x = T(rng.standard_normal((6, 2)).astype(np.float32))
    img = T(rng.standard_normal((1, 2, 8, 8)).astype(np.float32))
    half = T(np.full((1, 2, 2), 0.5, np.float32))
    lu = em.linalg.lu_factor(T(np.array([[4., 1.], [2., 3.]])))
    return {
        "histogramdd": lambda: em.histogramdd(x, bins=2).hist,
        "histogramdd_edges": lambda: em.histogramdd(
            x, bins=[T([-3., 0., 3.]), T([-3., 0., 3.])], weight=x[:, 0].abs()).hist,
        "histogram": lambda: em.histogram(x.reshape(-1), bins=T([-3., 0., 3.]))[0],
        "isin": lambda: em.isin(T([1, 2, 3]), T([2, 5])),
        "frexp": lambda: em.frexp(x)[1],
        "gcd": lambda: em.gcd(T([4, 6]), T([6, 9])),
        "nextafter": lambda: em.nextafter(x, em.zeros_like(x)),
        "unravel_index": lambda: em.unravel_index(T([3, 5]), (2, 3))[1],
        "fill_diagonal_": lambda: em.zeros(3, 3, device=dev).fill_diagonal_(2.0),
        "searchsorted": lambda: em.searchsorted(T(np.arange(5.0)), x),
        "searchsorted_rows": lambda: em.searchsorted(
            T(np.sort(rng.standard_normal((6, 4)), 1)), x, right=True),
        "bucketize": lambda: em.bucketize(x, T([-1., 0., 1.]), out_int32=True),
        "multilabel_margin_loss": lambda: F.multilabel_margin_loss(
            x.reshape(3, 4), T([[1, 0, -1, 2], [3, -1, 0, 0], [0, 1, 2, 3]])),
        "fractional_max_pool2d_indices": lambda: F.fractional_max_pool2d(
            img, 2, output_size=(4, 4), return_indices=True, _random_samples=half)[1],
        "cholesky_ex_info": lambda: em.linalg.cholesky_ex(T(-np.eye(3))).info,
        "cholesky_ex_ok": lambda: em.linalg.cholesky_ex(T(np.eye(3) * 2)).info,
        "lu_factor_ex_info": lambda: em.linalg.lu_factor_ex(
            T(np.array([[1., 2.], [2., 4.]]))).info,
        "lu_solve_adjoint": lambda: em.linalg.lu_solve(*lu, T(np.eye(2)), adjoint=True),
        "inv_ex_singular": lambda: em.linalg.inv_ex(T(np.zeros((2, 2)))).info,
        "inv_ex_ok": lambda: em.linalg.inv_ex(T(np.eye(2) * 2)).inverse,
        "solve_ex_singular": lambda: em.linalg.solve_ex(T(np.zeros((2, 2))), T(np.ones(2))).info,
        "solve_ex_ok": lambda: em.linalg.solve_ex(T(np.eye(2)), T(np.ones(2))).info,
    }


@pytest.mark.parametrize("name", sorted(_cases("cpu")))
def test_host_algorithms_take_device_tensors(fake_cuda, name):
    em.manual_seed(0)
    want = _cases("cpu")[name]()
    em.manual_seed(0)
    got = _cases("cuda")[name]()
    assert got.device.type == "cuda" and got.dtype is want.dtype, (got.device, got.dtype)
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-6, atol=1e-7)


def test_inv_of_a_singular_matrix_raises_on_the_device(fake_cuda):
    a = em.zeros(2, 2, device="cuda")
    with pytest.raises(em.linalg.LinAlgError, match="singular"):
        em.linalg.inv(a)
    np.testing.assert_allclose(em.linalg.inv(a + em.eye(2, device="cuda")).cpu().numpy(),
                               np.eye(2))


def test_modules_with_host_steps_on_the_device(fake_cuda):
    """AdaptiveLogSoftmaxWithLoss (its targets' clusters) and the orthogonal
    parametrization (QR on the host) on cuda equal the CPU's."""
    res = {}
    for dev in ("cpu", "cuda"):
        em.manual_seed(0)
        m = em.nn.AdaptiveLogSoftmaxWithLoss(4, 10, [4, 8]).to(dev)
        x = em.linspace(-1, 1, 20).reshape(5, 4).to(dev)
        out = m(x, em.tensor([0, 3, 5, 9, 7]).to(dev))
        lin = em.nn.Linear(4, 3).to(dev)                   # not square: QR of [W, randn]
        em.nn.utils.parametrizations.orthogonal(lin)
        res[dev] = [out.loss, m.predict(x), lin.weight]
    for g, w in zip(res["cuda"], res["cpu"]):
        assert g.device.type == "cuda"
        np.testing.assert_allclose(g.detach().cpu().numpy(), w.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic_axes"])
def test_onnx_export_of_a_gpu_model(fake_cuda, dynamic):
    """A cuda model's weights are device arrays: the exporter copies them to the host (it
    handed them to NumPy), and the dynamic-axes probe's index stays on the model's device."""
    ort = pytest.importorskip("onnxruntime")
    import io
    em.manual_seed(0)
    m = em.nn.Sequential(em.nn.Linear(4, 4), em.nn.ReLU(), em.nn.Linear(4, 2)).cuda().eval()
    x = em.linspace(-1, 1, 12).reshape(3, 4).cuda()
    f = io.BytesIO()
    em.onnx.export(m, (x,), f, dynamic_axes={"input0": {0: "b"}} if dynamic else None)
    got = ort.InferenceSession(f.getvalue()).run(None, {"input0": x.cpu().numpy()})[0]
    np.testing.assert_allclose(got, m(x).detach().cpu().numpy(), rtol=1e-6, atol=1e-7)
