"""Complex dtypes: promotion (PyTorch's table), creation, printing, views and autograd."""
import zlib

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


# ------------------------------------------------------------------ views and ops
def test_real_imag_are_writable_views():
    z = em.tensor([1 + 2j, 3 - 1j])
    r, i = z.real, z.imag
    assert r.dtype is em.float32 and i.dtype is em.float32
    r[0] = 7.0
    i.fill_(0.5)
    np.testing.assert_array_equal(z.numpy(), np.array([7 + 0.5j, 3 + 0.5j], np.complex64))
    z.real = em.tensor([1.0, 2.0])
    np.testing.assert_array_equal(z.numpy().real, [1.0, 2.0])
    x = em.tensor([1.0, 2.0])
    assert x.real is x
    with pytest.raises(RuntimeError, match="imag is not implemented"):
        x.imag


def test_view_as_real_and_complex_share_storage():
    z = em.tensor([[1 + 2j, 3 - 1j]], dtype=em.complex128)
    v = em.view_as_real(z)
    assert v.shape == (1, 2, 2) and v.dtype is em.float64
    v[0, 1, 1] = 9.0
    assert z.numpy()[0, 1] == 3 + 9j
    x = em.arange(8.0).reshape(2, 2, 2)
    c = em.view_as_complex(x)
    assert c.shape == (2, 2) and c.dtype is em.complex64
    x[1, 1, 0] = -1.0
    assert c.numpy()[1, 1] == -1 + 7j
    with pytest.raises(ValueError, match="stride 1"):
        em.view_as_complex(em.zeros(2, 4)[:, ::2])
    with pytest.raises(ValueError, match="last dimension of size 2"):
        em.view_as_complex(em.zeros(2, 3))
    with pytest.raises(TypeError, match="only supported for complex"):
        em.view_as_real(em.zeros(2))


def test_elementwise_math_matches_numpy():
    a = np.array([0.5 + 1j, -1.5 + 0.25j, 2 - 3j], np.complex128)
    b = np.array([1 - 1j, 0.5 + 2j, -1 + 0.5j], np.complex128)
    z, w = em.tensor(a), em.tensor(b)
    for got, want in [(z + w, a + b), (z - w, a - b), (z * w, a * b), (z / w, a / b),
                      (z ** w, a ** b), (z ** 2, a ** 2), (z.exp(), np.exp(a)),
                      (z.log(), np.log(a)), (z.sqrt(), np.sqrt(a)), (z.sin(), np.sin(a)),
                      (z.cos(), np.cos(a)), (z.tanh(), np.tanh(a)),
                      (z.sigmoid(), 1 / (1 + np.exp(-a))), (z.reciprocal(), 1 / a),
                      (z.abs(), np.abs(a)), (z.angle(), np.angle(a)), (z.conj(), np.conj(a)),
                      (em.sgn(z), a / np.abs(a)), (z.sum(), a.sum()), (z.mean(), a.mean()),
                      (z @ w, a @ b), (em.vdot(z, w), np.vdot(a, b)), (z * 2.5, a * 2.5),
                      (1j * z, 1j * a)]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    assert z.abs().dtype is em.float64 and z.angle().dtype is em.float64
    np.testing.assert_allclose(em.polar(em.tensor([2.0]), em.tensor([0.5])).numpy(),
                               2 * np.exp(0.5j), rtol=1e-6)
    c = em.complex(em.tensor([1.0, 2.0]), em.tensor([3.0]))
    assert c.dtype is em.complex64 and c.numpy().tolist() == [1 + 3j, 2 + 3j]
    with pytest.raises(TypeError, match="same floating dtype"):
        em.complex(em.tensor([1.0]), em.tensor([1.0], dtype=em.float64))
    assert em.is_complex(z) and z.is_complex() and not em.tensor([1.0]).is_complex()
    assert em.isreal(em.tensor([1 + 0j, 1j])).tolist() == [True, False]


@pytest.mark.parametrize("fn", [
    lambda z: z < 1, lambda z: z > z, lambda z: z.le(0), lambda z: z.ge(0), lambda z: z.max(),
    lambda z: z.min(), lambda z: em.amax(z, 0), lambda z: z.argmax(), lambda z: z.clamp(0, 1),
    lambda z: z.floor(), lambda z: z.ceil(), lambda z: z.trunc(), lambda z: z.round(),
    lambda z: em.relu(z), lambda z: z.sign(), lambda z: em.sort(z), lambda z: z.topk(1),
    lambda z: em.maximum(z, z), lambda z: em.erf(z),
])
def test_unordered_ops_refuse_complex(fn):
    with pytest.raises(TypeError, match="complex"):
        fn(em.tensor([1 + 1j, 2 - 1j]))


def test_compile_keeps_complex_exact():
    z = em.tensor(np.linspace(-1, 1, 6) + 0.5j * np.linspace(1, -1, 6), dtype=em.complex128)
    f = em.compile(lambda a: (a * a + 1).exp() * a.conj())
    a = z.numpy()
    np.testing.assert_allclose(f(z).numpy(), np.exp(a * a + 1) * np.conj(a), rtol=1e-12)


# ------------------------------------------------------------------ autograd
def _c(rng, *shape):
    return em.tensor(rng.standard_normal(shape) + 1j * rng.standard_normal(shape),
                     dtype=em.complex128, requires_grad=True)


def test_abs_backward_is_z_over_abs():
    z = em.tensor([3 + 4j, -1 + 1j], requires_grad=True)
    z.abs().sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), np.array([0.6 + 0.8j, (-1 + 1j) / 2 ** 0.5]),
                               rtol=1e-6)


def test_real_input_meeting_complex_gets_real_grad():
    x = em.tensor([1.0, -2.0], dtype=em.float64, requires_grad=True)
    w = em.tensor([1 + 2j, 3 - 1j], dtype=em.complex128)
    (x * w).abs().sum().backward()
    # d/dx |x w| = |w| sign(x)
    np.testing.assert_allclose(x.grad.numpy(), np.abs(w.numpy()) * np.sign([1.0, -2.0]))
    assert x.grad.dtype is em.float64


def test_backward_of_complex_output_needs_gradient():
    z = em.tensor([1j], requires_grad=True)
    with pytest.raises(RuntimeError, match="real scalar outputs"):
        (z * 2).sum().backward()


_GRAD_FNS = {
    "mul": (lambda a, b: (a * b).abs().sum(), 2), "div": (lambda a, b: (a / b).real.sum(), 2),
    "exp": (lambda a: a.exp().imag.sum(), 1), "log": (lambda a: (a.log() * a).abs().sum(), 1),
    "sqrt": (lambda a: a.sqrt().abs().pow(3).sum(), 1),
    "tanh": (lambda a: em.view_as_real(a.tanh()).pow(2).sum(), 1),
    "matmul": (lambda a, b: (a.reshape(2, 2) @ b.reshape(2, 2)).abs().sum(), 2),
    "angle": (lambda a: a.angle().sum(), 1), "conj": (lambda a, b: (a.conj() * b).real.sum(), 2),
    "pow": (lambda a, b: (a ** b).abs().sum(), 2),
    "sigmoid": (lambda a: a.sigmoid().real.sum(), 1),
    "polar": (lambda a, b: em.polar(a.abs(), b.angle()).imag.sum(), 2),
}


@pytest.mark.parametrize("name", sorted(_GRAD_FNS))
def test_gradients_match_finite_differences(name):
    fn, n = _GRAD_FNS[name]
    rng = np.random.default_rng(len(name))
    args = tuple(_c(rng, 4) for _ in range(n))
    assert em.autograd.gradcheck(fn, args)


@pytest.mark.parametrize("name", sorted(_GRAD_FNS))
def test_gradients_match_pytorch(name):
    torch = pytest.importorskip("torch")
    fn, n = _GRAD_FNS[name]
    rng = np.random.default_rng(len(name) + 100)
    vals = [rng.standard_normal(4) + 1j * rng.standard_normal(4) for _ in range(n)]
    ours = [em.tensor(v, dtype=em.complex128, requires_grad=True) for v in vals]
    fn(*ours).backward()
    theirs = [torch.tensor(v, dtype=torch.complex128, requires_grad=True) for v in vals]
    tfn = {"polar": lambda a, b: torch.polar(a.abs(), b.angle()).imag.sum(),
           "tanh": lambda a: torch.view_as_real(a.tanh()).pow(2).sum()}.get(name, fn)
    tfn(*theirs).backward()
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.resolve_conj().numpy(), rtol=1e-10,
                                   atol=1e-12)


def test_gradcheck_catches_a_wrong_complex_gradient():
    bad = em.autograd.Function

    class Conj(bad):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2j          # wrong: should be 2 (conj of the derivative 2)

    z = _c(np.random.default_rng(0), 2)
    assert not em.autograd.gradcheck(Conj.apply, (z,), raise_exception=False,
                                     check_forward_ad=False)


def test_forward_mode_complex_tangent():
    import ember.autograd.forward_ad as fwad
    z = em.tensor([1 + 1j], dtype=em.complex128)
    t = em.tensor([0.5 - 1j], dtype=em.complex128)
    with fwad.dual_level():
        out = fwad.make_dual(z, t).exp()
        tan = fwad.unpack_dual(out).tangent
    np.testing.assert_allclose(tan.numpy(), np.exp(1 + 1j) * (0.5 - 1j))


def test_casts_across_the_boundary():
    x = em.tensor([1.0, -2.0], dtype=em.float64, requires_grad=True)
    z = x.to(em.complex128)
    assert z.dtype is em.complex128 and z.requires_grad
    (z * (1 + 1j)).abs().sum().backward()          # |x (1+i)| = sqrt(2)|x|
    np.testing.assert_allclose(x.grad.numpy(), 2 ** 0.5 * np.sign([1.0, -2.0]))
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        r = em.tensor([1 + 2j]).float()
    assert r.tolist() == [1.0]
    w = em.tensor([1 + 2j], dtype=em.complex128, requires_grad=True)
    with pytest.warns(UserWarning):
        w.to(em.float64).sum().backward()
    assert w.grad.tolist() == [1 + 0j]


def test_var_std_norm_of_complex_are_real():
    a = np.array([[1 + 2j, 3 - 1j, -2 + 0.5j], [0.5j, 1, 2 - 2j]])
    z = em.tensor(a)
    np.testing.assert_allclose(z.var().numpy(), np.var(a, ddof=1))       # NumPy: E|z-mu|^2
    np.testing.assert_allclose(z.std(1).numpy(), np.std(a, axis=1, ddof=1))
    np.testing.assert_allclose(z.norm().numpy(), np.linalg.norm(a))
    assert z.var().dtype is em.float64 and z.norm().dtype is em.float64
    w = em.tensor(a, requires_grad=True)
    assert em.autograd.gradcheck(lambda t: (t.var(0), t.norm()), (w,))


_HOLOMORPHIC = ["exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "sin", "cos",
                "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "reciprocal",
                "square"]


def _domain(rng, n=4):
    """Away from branch cuts and poles: real part in [0.3, 0.9], imaginary in [-0.5, 0.5]."""
    return rng.uniform(0.3, 0.9, n) + 1j * rng.uniform(-0.5, 0.5, n)


@pytest.mark.parametrize("name", _HOLOMORPHIC)
def test_holomorphic_unary_gradients(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    z = em.tensor(_domain(rng), dtype=em.complex128, requires_grad=True)
    f = getattr(em, name)
    assert em.autograd.gradcheck(f, (z,))          # VJP and JVP, real and imaginary parts
    c = rng.standard_normal(4) + 1j * rng.standard_normal(4)
    (f(z) * em.tensor(c)).real.sum().backward()
    torch = pytest.importorskip("torch")
    zt = torch.tensor(z.detach().numpy(), requires_grad=True)
    (getattr(torch, name)(zt) * torch.tensor(c)).real.sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), zt.grad.resolve_conj().numpy(), rtol=1e-10,
                               atol=1e-12)


def test_gradients_at_zero_are_zero_like_pytorch():
    for fn in (lambda z: z.angle(), lambda z: em.sgn(z).real, lambda z: z.abs()):
        z = em.tensor([0j, 1 + 1j], dtype=em.complex128, requires_grad=True)
        fn(z).sum().backward()
        assert z.grad.numpy()[0] == 0 and np.isfinite(z.grad.numpy()).all()
    assert em.tensor([complex(-0.0, 0.0)]).angle().item() == pytest.approx(np.pi)
    assert em.tensor([0j]).angle().item() == 0.0


_MORE = {
    "prod": (lambda a: a.prod(), (4,)), "prod_dim": (lambda a: a.prod(1), (2, 3)),
    "cumprod": (lambda a: a.cumprod(0), (4,)), "cumsum": (lambda a: a.cumsum(0), (4,)),
    "bmm": (lambda a: em.bmm(a[:, :, :2], a[:, :, 1:].mT), (2, 2, 3)),
    "einsum": (lambda a: em.einsum("ij,kj->ik", a, a * 1j), (2, 3)),
    "vdot": (lambda a: em.vdot(a[0], a[1]), (2, 3)), "outer": (lambda a: em.outer(a, a), (3,)),
    "linear": (lambda a: em.nn.functional.linear(a, a.mT @ a), (2, 2)),
    "lerp": (lambda a: em.lerp(a, a * a, 0.3), (3,)), "trace": (lambda a: a.trace(), (3, 3)),
    "where": (lambda a: em.where(a.real > 0, a, 2j * a), (4,)),
    "index_cat": (lambda a: em.cat([a[[0, 2]] * a[1], a]), (3,)),
}


@pytest.mark.parametrize("name", sorted(_MORE))
def test_more_gradients_match_finite_differences(name):
    fn, shape = _MORE[name]
    z = _c(np.random.default_rng(zlib.crc32(name.encode())), *shape)
    assert em.autograd.gradcheck(fn, (z,))


def test_bool_cast_of_complex_is_nonzero_without_warning():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert em.tensor([0j, 1j, 2 + 0j]).bool().tolist() == [False, True, True]


def test_inplace_rules():
    with pytest.raises(TypeError, match="In-place abs"):
        em.tensor([1j]).abs_()
    with pytest.raises(TypeError, match="can't be cast"):
        em.tensor([1.0]).add_(1j)
    z = em.tensor([1 + 1j])
    z.mul_(2j)
    assert z.tolist() == [-2 + 2j]
    assert em.tensor([-2.0]).abs_().tolist() == [2.0]


_OPTIMS = [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.1)),
           ("AdamW", dict(lr=0.1, weight_decay=0.1)), ("Adam", dict(lr=0.1, amsgrad=True)),
           ("RMSprop", dict(lr=0.01)), ("Adagrad", dict(lr=0.1)), ("NAdam", dict(lr=0.1)),
           ("RAdam", dict(lr=0.1)), ("Adamax", dict(lr=0.1)), ("Adadelta", dict(lr=1.0)),
           ("Rprop", dict(lr=0.1)), ("ASGD", dict(lr=0.1)), ("Adam", dict(lr=0.1, foreach=True))]
_P0 = np.array([1 + 2j, -0.5 + 0.3j, 2 - 1j])
_TGT = np.array([0.5j, 1 + 0j, -1 - 1j])


def _optimize(lib, name, kw, as_pairs=False, steps=4):
    """Minimise |p - t|^2 with ``lib.optim.<name>``; ``as_pairs``: the same problem on a
    real (3, 2) parameter holding (re, im) pairs."""
    if as_pairs:
        p0, t = np.stack([_P0.real, _P0.imag], -1), np.stack([_TGT.real, _TGT.imag], -1)
        p = lib.tensor(p0.astype(np.float32), requires_grad=True)
        t = lib.tensor(t.astype(np.float32))
    else:
        p = lib.tensor(_P0.astype(np.complex64), requires_grad=True)
        t = lib.tensor(_TGT.astype(np.complex64))
    opt = getattr(lib.optim, name)([p], **kw)
    for _ in range(steps):
        opt.zero_grad()
        d = p - t
        ((d * d).sum() if as_pairs else (d.abs() ** 2).sum()).backward()
        opt.step()
    r = p.detach().numpy()
    return (r[..., 0] + 1j * r[..., 1]) if as_pairs else r, opt


@pytest.mark.parametrize("name,kw", _OPTIMS, ids=[f"{n}{sorted(k)}" for n, k in _OPTIMS])
def test_optimizers_update_complex_params_as_real_pairs(name, kw):
    got, opt = _optimize(em, name, kw)
    want, _ = _optimize(em, name, kw, as_pairs=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    state = next(iter(opt.state.values()))
    assert all(v.dtype is em.complex64 for k, v in state.items()
               if isinstance(v, em.Tensor) and v.ndim)   # state stays complex, as PyTorch's
    torch = pytest.importorskip("torch")
    theirs, _ = _optimize(torch, name, kw)
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-6)


def test_optimizers_that_refuse_complex_still_do():
    p = em.tensor([1j], requires_grad=True)
    (p.abs() ** 2).sum().backward()
    with pytest.raises(RuntimeError, match="complex"):
        em.optim.Adafactor([p]).step()


def test_python_scalar_conversions():
    t = em.tensor(1 + 2j)
    assert complex(t) == 1 + 2j and t.item() == 1 + 2j and bool(t)
    assert complex(em.tensor(2.5)) == 2.5 + 0j
    with pytest.raises(TypeError):
        float(t)
    with pytest.raises((ValueError, RuntimeError)):
        complex(em.tensor([1j, 2j]))


def test_inplace_random_fills_of_complex():
    em.manual_seed(0)
    z = em.zeros(200_000, dtype=em.complex128).normal_(mean=1.0, std=2.0).numpy()
    # each part N(1, 2): variance estimate's sd ~ 2 * sqrt(2 / n) ~ 0.006
    for part in (z.real, z.imag):
        assert abs(part.mean() - 1.0) < 0.02 and abs(part.var() - 2.0) < 0.04
    u = em.zeros(10_000, dtype=em.complex64).uniform_(-1, 3).numpy()
    assert u.real.min() >= -1 and u.real.max() < 3 and u.imag.min() >= -1 and u.imag.max() < 3
    assert u.real.std() > 1 and u.imag.std() > 1
