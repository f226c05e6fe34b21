"""Regression tests of small correctness/speed fixes (issues 18/19 follow-ups).

Each test fails on the code before its fix:

1. ``x ** e`` for e in {1, 2, 3, 0.5, -1}: no pow call (PyTorch's values: ``x*x``, ``sqrt``...).
2. ``lgamma``/``digamma`` on the CPU through SciPy, with PyTorch's edge values.
3. complex gradients of ``gather``/``take_along_dim``/``scatter_add``.
4. in-place arithmetic refuses a result type it cannot cast to ``self``'s dtype.
5. ``ember.save``/``ember.load`` round-trip complex tensors.
6. Adam (foreach/fused) on 0-d parameters.
"""
import math

import numpy as np
import pytest

import ember
from ember import config
from ember.codegen import available, eager


# ----------------------------------------------------------------- 1. pow with a scalar
@pytest.mark.parametrize("e", [1, 2, 3, 0.5, -1, -2, -0.5, 2.0, -1.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_scalar_fast_exponents_match_pytorch_formulas(e, dtype):
    x = np.array([-0.0, 0.0, 1.5, -2.25, 3.0, np.inf, -np.inf, np.nan, 1e-30, 7e3], dtype)
    with np.errstate(all="ignore"):
        want = {1: x, 2: x * x, 3: x * x * x, 0.5: np.sqrt(x), -1: 1 / x, -2: 1 / (x * x),
                -0.5: 1 / np.sqrt(x)}[e]
    got = (ember.tensor(x) ** e).numpy()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)
    num = ~np.isnan(want)                           # NOTE: sqrt(-0.0) == -0.0, as PyTorch
    np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))


def test_pow_scalar_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.array([-0.0, 0.0, 2.5, -3.0, np.inf, -np.inf, 1e-20], np.float32)
    for e in (1, 2, 3, 0.5, -1, -2, -0.5):
        want = (torch.tensor(x) ** e).numpy()
        got = (ember.tensor(x) ** e).numpy()
        np.testing.assert_array_equal(got, want)
        num = ~np.isnan(want)                       # NOTE: a NaN's sign is unspecified
        np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))


def test_pow_scalar_complex_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.array([1 + 2j, -3 - 0.5j, 0j, -4 + 0j, -4 - 0j, complex(np.inf, 1)], np.complex64)
    for e in (1, 2, 3, 0.5, -2):
        np.testing.assert_array_equal((ember.tensor(x) ** e).numpy(),
                                      (torch.tensor(x) ** e).numpy())


def test_pow_scalar_float32_skips_the_pow_kernel():
    """Large ``x ** 2`` ran a generated kernel calling powf per element (~80x a multiply);
    now it is NumPy's multiply, as ``x * x``."""
    if not available():
        pytest.skip("no C compiler: no generated kernels to avoid")
    prev = config.set_eager_kernels(True)
    eager.configure(thresholds={"pow": 1}, warmup=0)
    try:
        x = ember.randn(4096)
        before = eager.stats["runs"]
        for e in (1, 2, 3, 0.5, -1, -2, -0.5):
            x ** e
        assert eager.stats["runs"] == before
        x ** 2.5                                   # NOTE: other exponents keep the kernel
        assert eager.stats["runs"] == before + 1
    finally:
        eager.configure(reset=True)
        config.set_eager_kernels(prev)


def test_pow_scalar_bfloat16_kernel_writes_the_exponent_in():
    if not available():
        pytest.skip("no C compiler: no generated kernels")
    prev = config.set_eager_kernels(True)
    eager.configure(warmup=0)
    try:
        x = (ember.randn(1 << 16) * 3).to(ember.bfloat16)
        before = eager.stats["runs"]
        sq, rec = x ** 2, x ** -1
        assert eager.stats["runs"] == before + 2
        xf = x.float().numpy()
        np.testing.assert_array_equal(sq.float().numpy(),
                                      ember.tensor(xf * xf).to(ember.bfloat16).float().numpy())
        np.testing.assert_array_equal(rec.float().numpy(),
                                      ember.tensor(1 / xf).to(ember.bfloat16).float().numpy())
    finally:
        eager.configure(reset=True)
        config.set_eager_kernels(prev)


@pytest.mark.parametrize("d", ["float32", "float64"])
def test_pow_scalar_c_template_equals_eager(d):
    """The generated C of ``x ** e`` (a constant e) is bit-equal to the eager values."""
    if not available():
        pytest.skip("no C compiler: no generated kernels")
    from ember.codegen import InputSpec, Kernel, Load, OutSpec, call, compile_many
    from ember.codegen.ir import infer
    dd = getattr(ember, d)
    x = np.array([-0.0, 0.0, 0.5, 2.5, -3.75, 1e-3, 40.0, np.inf, -np.inf, np.nan] +
                 list(np.random.default_rng(1).standard_normal(23) * 5), d)
    exps = (1, 2, 3, 0.5, -1, -2, -0.5)
    compute, _ = infer("pow", [dd, dd], {})
    fns = compile_many([Kernel([InputSpec(dd, (1,))], OutSpec(dd, (x.size,)),
                               call("pow", Load(0), e, compute=compute), name=f"p{i}")
                        for i, e in enumerate(exps)])
    for e, fn in zip(exps, fns):
        got, want = fn(x), (ember.tensor(x) ** e).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"x ** {e}")
        num = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))


def test_pow_scalar_compiled_is_sqrt_and_grads_unchanged():
    x = ember.tensor([-0.0, 0.25, 4.0, 9.0], requires_grad=True)
    f = ember.compile(lambda t: (t * 1.0) ** 0.5 + (t * 1.0) ** -1)
    got = f(x.detach()).numpy()
    xn = x.detach().numpy()
    with np.errstate(divide="ignore"):
        want = np.sqrt(xn) + 1 / xn
    np.testing.assert_array_equal(got, want)
    y = x[1:] ** 3
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy()[1:], 3 * xn[1:] ** 2, rtol=1e-6)


# ----------------------------------------------------------------- 2. lgamma / digamma
_EDGES = np.array([0.0, -0.0, -1.0, -2.0, -2.5, -np.inf, np.inf, np.nan, 1.0, 2.0, 0.5,
                   1e-300, -1e-300, 5e-324, -5e-324, 171.5, 1e300, -1e300, 2.5e305])


def test_lgamma_edge_values_are_pytorchs():
    got = ember.lgamma(ember.tensor(_EDGES)).numpy()
    with np.errstate(all="ignore"):
        want = np.array([math.lgamma(v) if np.isfinite(v) and not (v <= 0 and v == int(v))
                         else (math.nan if np.isnan(v) else math.inf) for v in _EDGES])
    np.testing.assert_allclose(got, want, rtol=1e-14)
    assert got[_EDGES == 1].item() == 0.0 and got[_EDGES == 2].item() == 0.0


def test_digamma_edge_values_are_pytorchs():
    got = ember.digamma(ember.tensor(_EDGES)).numpy()
    assert got[0] == -np.inf and got[1] == np.inf           # psi(+-0) = -+inf
    assert np.isnan(got[[2, 3, 5, 7]]).all()                # negative integers, -inf, nan
    assert got[6] == np.inf
    np.testing.assert_allclose(got[8], -0.5772156649015329, rtol=1e-15)


def test_lgamma_digamma_match_torch():
    torch = pytest.importorskip("torch")
    x = np.concatenate([_EDGES, np.linspace(-30.25, 40, 1001)])
    for fn, tfn in ((ember.lgamma, torch.lgamma), (ember.digamma, torch.digamma)):
        for d in (np.float32, np.float64):
            xs = x[np.abs(np.nan_to_num(x)) < 1e30] if d == np.float32 else x
            got = fn(ember.tensor(xs.astype(d))).numpy()
            want = tfn(torch.tensor(xs.astype(d))).numpy()
            assert got.dtype == d
            np.testing.assert_allclose(got, want, rtol=1e-5 if d == np.float32 else 1e-11,
                                       atol=1e-6 if d == np.float32 else 1e-12)


def test_lgamma_digamma_use_scipy_on_the_cpu():
    """The forward values are SciPy's (float64, rounded once), not the series kernels."""
    sc = pytest.importorskip("scipy.special")
    x = np.random.default_rng(0).uniform(-20, 50, 5000).astype(np.float32)
    np.testing.assert_array_equal(ember.lgamma(ember.tensor(x)).numpy(),
                                  sc.gammaln(x.astype(np.float64)).astype(np.float32))
    np.testing.assert_array_equal(ember.digamma(ember.tensor(x)).numpy(),
                                  sc.psi(x.astype(np.float64)).astype(np.float32))


# ----------------------------------------------------------------- 3. complex gather grads
def _complex(rng, *shape):
    return ember.tensor(rng.standard_normal(shape) + 1j * rng.standard_normal(shape),
                        dtype=ember.complex128, requires_grad=True)


def _fd_grad(f, x, eps=1e-6):
    """PyTorch's complex gradient of the real ``f`` by central differences:
    ``dL/dRe + i dL/dIm`` per element."""
    x0 = x.detach().numpy().copy()
    g = np.zeros_like(x0)
    for k in np.ndindex(x0.shape):
        for unit in (1, 1j):
            xp, xm = x0.copy(), x0.copy()
            xp[k] += eps * unit
            xm[k] -= eps * unit
            d = (f(ember.tensor(xp)).item() - f(ember.tensor(xm)).item()) / (2 * eps)
            g[k] += d * unit
    return g


@pytest.mark.parametrize("op", ["gather", "take_along_dim", "scatter_add_src",
                                "scatter_add_self"])
def test_complex_gradients_of_gather_family(op):
    rng = np.random.default_rng(3)
    x, c = _complex(rng, 4, 3), ember.tensor(rng.standard_normal((4, 3)) + 1j)
    idx = ember.tensor([[3, 0, 1], [3, 3, 2], [0, 1, 1], [2, 2, 0]])
    base = ember.tensor(rng.standard_normal((4, 3)) - 2j)
    fns = {
        "gather": lambda t: t.gather(0, idx),
        "take_along_dim": lambda t: ember.take_along_dim(t, idx, 0),
        "scatter_add_src": lambda t: base.scatter_add(0, idx, t),
        "scatter_add_self": lambda t: t.scatter_add(1, idx % 3, base),
    }

    def loss(t):
        return (fns[op](t) * c).real.sum() + (fns[op](t).abs() ** 2).sum()

    loss(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), _fd_grad(loss, x), rtol=1e-6, atol=1e-7)
    assert np.abs(x.grad.numpy().imag).max() > 0.1        # the imaginary part flows


def test_complex_gather_grad_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    xn = rng.standard_normal((5, 2)) + 1j * rng.standard_normal((5, 2))
    cn = rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))
    ix = np.array([[4, 0], [4, 1], [2, 0]])
    x = ember.tensor(xn, requires_grad=True)
    (x.gather(0, ember.tensor(ix)) * ember.tensor(cn)).real.sum().backward()
    t = torch.tensor(xn, requires_grad=True)
    (t.gather(0, torch.tensor(ix)) * torch.tensor(cn)).real.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-14)


# ----------------------------------------------------------------- 4. in-place casts
_CANT = [("float32", 1j), ("float64", ember.tensor([1j, 2, 3])), ("int64", 0.5),
         ("int64", ember.tensor([0.5, 1, 2])), ("bool", 2)]


@pytest.mark.parametrize("dtype,other,op", [
    (d, o, op) for d, o in _CANT for op in ("add_", "sub_", "mul_", "div_")
    if not (op == "sub_" and d == "bool")])    # NOTE: sub of a bool is refused as such
@pytest.mark.parametrize("grad", [False, True])
def test_inplace_arith_refuses_uncastable_result(dtype, other, op, grad):
    if op == "div_" and dtype in ("int64", "bool"):
        other = 1j                             # NOTE: int / int is float: refused anyway
    x = ember.ones(3, dtype=getattr(ember, dtype))
    before = x.numpy().copy()
    with ember.set_grad_enabled(grad):
        with pytest.raises(RuntimeError, match=f"^{op}: result type .* can't be cast to the "
                                               f"desired output type {dtype}$"):
            getattr(x, op)(other)
    np.testing.assert_array_equal(x.numpy(), before)        # nothing written


@pytest.mark.parametrize("fn,args", [(ember.add, (1j,)), (ember.mul, (1j,)),
                                     (ember.div, (2,))])
def test_out_refuses_uncastable_result(fn, args):
    dtype = ember.int64 if fn is ember.div else ember.float32
    out = ember.full((3,), 7, dtype=dtype)
    with pytest.raises(RuntimeError, match="out=: result type .* can't be cast to the desired "
                                           "output type"):
        fn(ember.ones(3, dtype=dtype), *args, out=out)
    np.testing.assert_array_equal(out.numpy(), [7, 7, 7])
    wide = ember.zeros(3)                          # NOTE: int -> float out= still casts
    ember.add(ember.ones(3, dtype=ember.int64), 2, out=wide)
    np.testing.assert_array_equal(wide.numpy(), [3.0, 3.0, 3.0])


@pytest.mark.parametrize("inplace", [False, True])
def test_alpha_checks_are_pytorchs(inplace):
    def run(x, y, alpha):
        return x.add_(y, alpha=alpha) if inplace else x.add(y, alpha=alpha)
    f, i = ember.ones(3), ember.ones(3, dtype=ember.int64)
    with pytest.raises(TypeError, match="argument alpha must not be a complex number"):
        run(f.clone(), f, 1j)
    with pytest.raises(TypeError, match="argument alpha must not be a floating point number"):
        run(i.clone(), i, 1.5)
    with pytest.raises(TypeError, match="Boolean alpha only supported for Boolean results"):
        run(f.clone(), f, False)
    np.testing.assert_array_equal(run(f.clone(), f, 2.5).numpy(), [3.5] * 3)
    c = ember.ones(3, dtype=ember.complex64)
    np.testing.assert_array_equal(run(c.clone(), c, 1j).numpy(), [1 + 1j] * 3)


def test_inplace_cast_errors_match_torch():
    torch = pytest.importorskip("torch")
    for dtype, other in (("float32", 1j), ("int64", 0.5), ("bool", 2)):
        for op in ("add_", "mul_", "div_"):
            t = torch.ones(3, dtype=getattr(torch, dtype))
            x = ember.ones(3, dtype=getattr(ember, dtype))
            try:
                getattr(t, op)(other)
                torch_ok = True
            except RuntimeError:
                torch_ok = False
            try:
                getattr(x, op)(other)
                ember_ok = True
            except RuntimeError:
                ember_ok = False
            assert ember_ok == torch_ok, (dtype, op, other)


# ----------------------------------------------------------------- 5. complex checkpoints
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_save_load_complex_round_trip(tmp_path, dtype):
    rng = np.random.default_rng(5)
    full = rng.standard_normal((4, 6)) + 1j * rng.standard_normal((4, 6))
    base = ember.tensor(full, dtype=getattr(ember, dtype))
    w = ember.tensor(full[:2, :3], dtype=getattr(ember, dtype)).requires_grad_()
    obj = {"a": base, "strided": base.t()[::2], "scalar": ember.tensor(3 - 4j, dtype=base.dtype),
           "same": [w, w], "empty": ember.zeros(0, 3, dtype=base.dtype),
           "np": full.astype(dtype)[:, ::3], "real": ember.ones(2)}
    ember.save(obj, tmp_path / "c.safetensors")
    back = ember.load(tmp_path / "c.safetensors")
    for k in ("a", "strided", "scalar", "empty"):
        assert back[k].dtype == base.dtype and back[k].shape == obj[k].shape, k
        np.testing.assert_array_equal(back[k].numpy(), obj[k].numpy())
    assert back["same"][0] is back["same"][1] and back["same"][0].requires_grad
    np.testing.assert_array_equal(back["same"][0].detach().numpy(), w.detach().numpy())
    assert back["np"].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back["np"], obj["np"])
    assert back["real"].dtype == ember.float32


def test_complex_file_is_plain_safetensors(tmp_path):
    """The file stays valid safetensors: a plain reader sees the (real, imag) pairs."""
    z = ember.tensor([1 + 2j, -3j])
    ember.save({"z": z}, tmp_path / "z.st")
    raw = (tmp_path / "z.st").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    import json
    header = json.loads(raw[8:8 + n])
    assert header["z"]["dtype"] == "F32" and header["z"]["shape"] == [2, 2]
    pairs = np.frombuffer(raw[8 + n:], "<f4").reshape(2, 2)
    np.testing.assert_array_equal(pairs, [[1, 2], [0, -3]])


def test_complex_marker_on_wrong_storage_is_corrupt(tmp_path):
    import json
    ember.save({"z": ember.tensor([1 + 2j])}, tmp_path / "z.st")
    raw = bytearray((tmp_path / "z.st").read_bytes())
    n = int.from_bytes(raw[:8], "little")
    text = raw[8:8 + n].decode()
    bad = text.replace('\\"complex\\":\\"complex64\\"', '\\"complex\\":\\"complex128\\"')
    assert bad != text and bad.endswith(" ")
    bad = bad[:-1]                           # NOTE: one pad space less: same header size
    json.loads(bad)
    raw[8:8 + n] = bad.encode()
    (tmp_path / "bad.st").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="marked 'complex128' but stored as float32"):
        ember.load(tmp_path / "bad.st")


# ----------------------------------------------------------------- 6. optimizers, 0-d params
_OPTS = [("Adam", {}), ("Adam", {"fused": True}), ("Adam", {"foreach": False}),
         ("Adam", {"fused": True, "amsgrad": True}), ("AdamW", {}), ("AdamW", {"fused": True}),
         ("SGD", {"momentum": 0.9}), ("RMSprop", {}), ("Adagrad", {}), ("Adamax", {}),
         ("NAdam", {}), ("RAdam", {}), ("Adadelta", {})]


def _trajectory(lib, cls, kw, shape, steps=4):
    p = lib.nn.Parameter(lib.tensor([1.5]).reshape(shape))
    opt = getattr(lib.optim, cls)([p], lr=0.1, **kw)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
        out.append(p.detach().numpy().copy())
    return np.array(out)


@pytest.mark.parametrize("cls,kw", _OPTS)
def test_optimizer_steps_zero_dim_parameter(cls, kw):
    """A 0-d parameter ("return arrays must be of ArrayType" in the raw update kernels: a
    NumPy ufunc on 0-d operands returns a scalar) steps as the same 1-element vector does."""
    from ember.optim import _fused
    before = _fused.stats["steps"]
    zero_d = _trajectory(ember, cls, kw, ())
    assert zero_d.shape == (4,)
    if kw.get("fused") and available():          # NOTE: steps 2-4 replay the compiled update
        assert _fused.stats["steps"] == before + 3
    vec = _trajectory(ember, cls, kw, (1,)).reshape(4)
    if kw.get("fused"):
        # NOTE: the compiled update's rounding depends on its loop (a few ulp, as vs foreach)
        np.testing.assert_allclose(zero_d, vec, rtol=5e-7)
        np.testing.assert_allclose(zero_d, _trajectory(ember, cls, {**kw, "fused": None}, ()),
                                   rtol=5e-7)
    else:
        np.testing.assert_array_equal(zero_d, vec)


@pytest.mark.parametrize("cls,kw", [c for c in _OPTS if "fused" not in c[1]])
def test_optimizer_zero_dim_parameter_matches_torch(cls, kw):
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(_trajectory(ember, cls, kw, ()),
                               _trajectory(torch, cls, kw, ()), rtol=1e-5, atol=1e-7)
