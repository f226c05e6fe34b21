"""Complex dtypes: promotion (PyTorch's table), creation, printing, views and autograd."""
import numpy as np
import pytest

import ember as em


@pytest.mark.parametrize("a,b,want", [
    ("float32", "complex64", "complex64"), ("float64", "complex64", "complex128"),
    ("complex64", "complex128", "complex128"), ("int64", "complex64", "complex64"),
    ("float16", "complex64", "complex64"), ("bool", "complex128", "complex128"),
    ("complex64", "float32", "complex64"),
])
def test_promote_types_table(a, b, want):
    got = em.promote_types(em.dtypes.as_dtype(a), em.dtypes.as_dtype(b))
    assert got is em.dtypes.as_dtype(want)


def test_result_type_scalars_and_zero_dim():
    f32, f64 = em.ones(2), em.ones(2, dtype=em.float64)
    assert (f32 + 1j).dtype is em.complex64
    assert (f64 + 1j).dtype is em.complex128
    assert (em.ones(2, dtype=em.int64) * 2j).dtype is em.complex64
    # a zero-dim complex128 tensor keeps the dimensioned float32's precision (PyTorch)
    assert (f32 + em.tensor(1j, dtype=em.complex128)).dtype is em.complex64
    assert (f64 + em.tensor(1j)).dtype is em.complex128
    assert (em.ones(2, dtype=em.complex64) + 2.5).dtype is em.complex64
    assert (em.ones(2, dtype=em.complex64) + f64).dtype is em.complex128


def test_default_complex_follows_default_float():
    old = em.get_default_dtype()
    try:
        em.set_default_dtype(em.float64)
        assert em.tensor([1j]).dtype is em.complex128
        assert (em.ones(2, dtype=em.int32) + 1j).dtype is em.complex128
    finally:
        em.set_default_dtype(old)
    assert em.tensor([1j]).dtype is em.complex64


def test_dtype_attributes_and_aliases():
    assert em.cfloat is em.complex64 and em.cdouble is em.complex128
    assert em.complex64.is_complex and not em.complex64.is_floating_point
    assert not em.float32.is_complex
    assert em.complex128.to_real() is em.float64
    assert em.finfo(em.complex64).eps == em.finfo(em.float32).eps
    assert em.complex64.itemsize == 8


def test_creation():
    t = em.tensor([1 + 2j, 3 - 1j])
    assert t.dtype is em.complex64 and t.shape == (2,)
    np.testing.assert_array_equal(t.numpy(), np.array([1 + 2j, 3 - 1j], np.complex64))
    assert em.zeros(2, 3, dtype=em.cfloat).numpy().dtype == np.complex64
    assert em.ones(2, dtype=em.complex128).numpy().tolist() == [1 + 0j, 1 + 0j]
    assert em.tensor(np.array([1j], np.complex128)).dtype is em.complex128
    assert not em.tensor([1j]).is_floating_point()


def test_randn_complex_has_half_variance_parts():
    em.manual_seed(0)
    z = em.randn(200_000, dtype=em.complex128).numpy()
    # each part N(0, 1/2): sample variance within ~6 standard errors (sd of var est ~ 0.0016)
    assert abs(z.real.var() - 0.5) < 0.01 and abs(z.imag.var() - 0.5) < 0.01
    assert abs(np.mean(np.abs(z) ** 2) - 1.0) < 0.02
    em.manual_seed(1)
    a = em.randn(3, dtype=em.complex64)
    em.manual_seed(1)
    np.testing.assert_array_equal(a.numpy(), em.randn(3, dtype=em.complex64).numpy())
    assert em.rand(4, dtype=em.complex64).dtype is em.complex64


@pytest.mark.parametrize("data,dtype,want", [
    ([1 + 2j, 3 - 1j], None, "tensor([1.+2.j, 3.-1.j])"),
    ([[1.5 + 2j, 3 - 1j], [0j, -2.25 - 0.5j]], "complex128",
     "tensor([[ 1.5000+2.0000j,  3.0000-1.0000j],\n"
     "        [ 0.0000+0.0000j, -2.2500-0.5000j]], dtype=ember.complex128)"),
    (1 + 1j, None, "tensor(1.+1.j)"),
    ([], "complex64", "tensor([], dtype=ember.complex64)"),
])
def test_printing_like_pytorch(data, dtype, want):
    assert repr(em.tensor(data, dtype=dtype)) == want


def test_requires_grad_allowed_for_complex():
    z = em.tensor([1j], requires_grad=True)
    assert z.requires_grad
    with pytest.raises(RuntimeError, match="floating point and complex"):
        em.tensor([1]).requires_grad_()
