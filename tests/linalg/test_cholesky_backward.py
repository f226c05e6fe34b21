"""linalg_cholesky_backward (issue 18): the BLAS/LAPACK kernel against PyTorch's composite
formula in Ember ops, on both kernel paths (batched GEMMs up to order 96, trmm + sygst /
trsm above), and second order through ``linalg.cholesky``."""
import numpy as np
import pytest

import ember as em
import ember.linalg as LA
from ember.ops import _lapack
from ember.ops.dispatch import apply
from ember.ops.linalg_lapack import cholesky_backward_composite, cholesky_backward_p


def _factor(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    n = shape[-1]
    A = a @ np.swapaxes(a, -1, -2).conj() / n + np.eye(n)
    return np.linalg.cholesky(A).astype(dtype)


def _grad(rng, shape, dtype):
    g = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        g = g + 1j * rng.standard_normal(shape)
    return g.astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "complex128", "float32"])
@pytest.mark.parametrize("shape", [(7, 7), (3, 40, 40), (96, 96), (97, 97), (2, 160, 160)])
def test_kernel_matches_composite_formula(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    L, g = _factor(rng, shape, dtype), _grad(rng, shape, dtype)
    got = apply(cholesky_backward_p, (em.tensor(g), em.tensor(L)), {}).numpy()
    ref = cholesky_backward_composite(em.tensor(g), em.tensor(L)).numpy()
    assert got.dtype == ref.dtype
    tol = 1e-12 if dtype != "float32" else 1e-4
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_kernel_ignores_upper_triangle_and_broadcasts():
    rng = np.random.default_rng(0)
    L = _factor(rng, (120, 120), "float64")
    junk = L + np.triu(rng.standard_normal(L.shape), 1)
    g = _grad(rng, (2, 120, 120), "float64")
    got = _lapack.cholesky_backward(np, g, junk)
    assert got.shape == (2, 120, 120)
    for i in range(2):
        np.testing.assert_allclose(got[i], _lapack.cholesky_backward(np, g[i], L), rtol=1e-13,
                                   atol=1e-13 * np.abs(got[i]).max())


def test_cholesky_grad_uses_the_primitive_and_matches_formula():
    rng = np.random.default_rng(1)
    L = _factor(rng, (130, 130), "float64")
    A = em.tensor(L @ L.T, requires_grad=True)
    w = em.tensor(rng.standard_normal(L.shape))
    (LA.cholesky(A) * w).sum().backward()
    ref = cholesky_backward_composite(w, em.tensor(L)).numpy()
    np.testing.assert_allclose(A.grad.numpy(), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_cholesky_second_order(dtype):
    rng = np.random.default_rng(2)
    L = _factor(rng, (2, 4, 4), dtype)
    A = em.tensor(L @ np.swapaxes(L, -1, -2).conj(), requires_grad=True)
    assert em.autograd.gradgradcheck(lambda a: LA.cholesky((a + a.mH) / 2), (A,))
