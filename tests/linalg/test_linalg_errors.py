"""ember.linalg's errors: LinAlgError naming the batch element and LAPACK's info, the ``_ex``
variants' ``info`` instead, and shape/dtype errors naming the op and the shapes."""
import numpy as np
import pytest

import ember as em
import ember.linalg as LA


def _t(a, dtype=np.float64):
    return em.tensor(np.asarray(a, dtype=dtype))


def test_linalg_error_is_a_runtime_error():
    assert issubclass(LA.LinAlgError, RuntimeError)
    assert issubclass(LA.LinAlgError, em.EmberError)


def test_cholesky_names_batch_element_and_minor():
    A = np.stack([np.eye(3)] * 5)
    A[3] = [[1., 2., 0.], [2., 1., 0.], [0., 0., 1.]]       # minor of order 2 fails
    with pytest.raises(LA.LinAlgError) as e:
        LA.cholesky(_t(A))
    assert str(e.value) == (
        "linalg.cholesky: (Batch element 3): The factorization could not be completed because "
        "the input is not positive-definite (the leading minor of order 2 is not "
        "positive-definite).")


def test_cholesky_single_matrix_has_no_batch_prefix():
    with pytest.raises(LA.LinAlgError, match=r"^linalg.cholesky: The factorization .* order 1 "):
        LA.cholesky(_t([[-1., 0.], [0., 1.]]))


def test_cholesky_ex_returns_info_and_check_errors_raises():
    A = np.stack([np.eye(2), [[1., 2.], [2., 1.]], np.eye(2) * 4])
    L, info = LA.cholesky_ex(_t(A))
    assert info.dtype == em.int32
    assert info.tolist() == [0, 2, 0]
    np.testing.assert_allclose(L.numpy()[2], 2 * np.eye(2))
    with pytest.raises(LA.LinAlgError, match="Batch element 1"):
        LA.cholesky_ex(_t(A), check_errors=True)
    L, info = LA.cholesky_ex(_t(np.eye(3)))
    assert int(info) == 0


def test_inv_singular_message():
    with pytest.raises(LA.LinAlgError) as e:
        LA.inv(_t([[1., 2.], [2., 4.]]))
    assert str(e.value) == ("linalg.inv: The diagonal element 2 is zero, the inversion could "
                            "not be completed because the input matrix is singular.")
    A = np.stack([np.eye(2), np.zeros((2, 2))])
    with pytest.raises(LA.LinAlgError, match=r"\(Batch element 1\): The diagonal element 1"):
        LA.inv(_t(A))


def test_inv_ex_and_solve_ex_info():
    A = np.stack([np.eye(2), np.zeros((2, 2))])
    X, info = LA.inv_ex(_t(A))
    assert info.tolist() == [0, 1]
    np.testing.assert_allclose(X.numpy()[0], np.eye(2))
    R, info = LA.solve_ex(_t(A), _t(np.ones((2, 2, 1))))
    assert info.tolist() == [0, 1]
    np.testing.assert_allclose(R.numpy()[0], np.ones((2, 1)))


def test_solve_singular_names_batch_element():
    A = np.stack([np.eye(2), np.eye(2), np.ones((2, 2))])
    with pytest.raises(LA.LinAlgError, match=r"^linalg.solve: \(Batch element 2\): The solver "
                                             r"failed because the input matrix is singular."):
        LA.solve(_t(A), _t(np.ones((3, 2))))


def test_lu_factor_singular_and_ex():
    A = np.stack([np.eye(3), np.diag([1., 0., 2.])])
    with pytest.raises(LA.LinAlgError, match=r"\(Batch element 1\): U\[2,2\] is zero"):
        LA.lu_factor(_t(A))
    LU, piv, info = LA.lu_factor_ex(_t(A))
    assert info.tolist() == [0, 2]
    assert piv.dtype == em.int32


def test_square_shape_error_names_op_and_shapes():
    with pytest.raises(ValueError) as e:
        LA.solve(_t(np.ones((3, 4))), _t(np.ones((3, 1))))
    assert str(e.value) == ("linalg.solve: A must be batches of square matrices, but they are 3 "
                            "by 4 matrices")
    for fn in (LA.inv, LA.det, LA.cholesky, LA.eigh, LA.slogdet, LA.matrix_exp):
        with pytest.raises(ValueError, match=r"must be batches of square matrices, but they "
                                             r"are 2 by 3 matrices"):
            fn(_t(np.ones((2, 3))))


def test_too_few_dims_and_dtype_errors():
    with pytest.raises(ValueError, match="linalg.inv: The input tensor A must have at least 2 "
                                         "dimensions"):
        LA.inv(_t([1., 2.]))
    with pytest.raises(TypeError, match="linalg.cholesky: Expected a floating point or complex "
                                        "tensor as input. Got Long"):
        LA.cholesky(em.ones(2, 2, dtype=em.int64))
    with pytest.raises(TypeError, match="same dtype"):
        LA.solve(_t(np.eye(2)), _t(np.ones(2), np.float32))


def test_incompatible_rhs_and_batch():
    with pytest.raises(ValueError, match=r"linalg.solve: Incompatible shapes of A and B"):
        LA.solve(_t(np.eye(3)), _t(np.ones((2, 2))))
    with pytest.raises(ValueError, match=r"batch dims"):
        LA.solve(_t(np.ones((2, 3, 3))), _t(np.ones((4, 3, 1))))


def test_bad_options():
    with pytest.raises(ValueError, match="UPLO"):
        LA.eigh(_t(np.eye(2)), UPLO="X")
    with pytest.raises(ValueError, match="mode"):
        LA.qr(_t(np.eye(2)), mode="bad")
    with pytest.raises(ValueError, match="driver"):
        LA.lstsq(_t(np.eye(2)), _t(np.eye(2)), driver="bad")
    with pytest.raises(ValueError, match="Order 3 not supported"):
        LA.matrix_norm(_t(np.eye(2)), ord=3)
    with pytest.raises(ValueError, match="input must be 1D or 2D"):
        LA.norm(_t(np.ones((2, 2, 2))), ord=2)


def test_qr_mode_r_is_not_differentiable():
    A = _t(np.random.default_rng(0).standard_normal((3, 3))).requires_grad_()
    Q, R = LA.qr(A, mode="r")
    assert Q.numel() == 0
    with pytest.raises(RuntimeError, match="mode='r'"):
        R.sum().backward()


def test_qr_complete_tall_is_not_differentiable():
    A = _t(np.random.default_rng(0).standard_normal((4, 2))).requires_grad_()
    Q, R = LA.qr(A, mode="complete")
    with pytest.raises(RuntimeError, match="mode='complete' and nrows > ncols"):
        Q.sum().backward()


def test_out_argument_is_written_and_returned():
    A = _t(np.diag([2., 4.]))
    o = em.empty(2, 2, dtype=em.float64)
    assert LA.inv(A, out=o) is o
    np.testing.assert_allclose(o.numpy(), np.diag([0.5, 0.25]))
    w, v = em.empty(2, dtype=em.float64), em.empty(2, 2, dtype=em.float64)
    r = LA.eigh(A, out=(w, v))
    assert r.eigenvalues is w and w.tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="shape"):
        LA.det(A, out=em.empty(3, dtype=em.float64))
    with pytest.raises(TypeError, match="tuple of 2"):
        LA.eigh(A, out=w)
