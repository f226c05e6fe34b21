"""float16/bfloat16 kernels: conversions, GEMMs, elementwise ops and sums (issue 16, part C).

Bounds checked here:

* conversions are bit-exact against ``ndarray.astype`` (NumPy's float16, ml_dtypes'
  bfloat16) on all 65,536 low bit patterns and on float32 ties, overflow, subnormals and
  NaN payloads;
* a float16/bfloat16 ``matmul``/``bmm``/``linear``/``conv2d`` forward equals the float32
  product of the same (upcast) operands rounded once — bit for bit where Ember computes the
  float32 product the same way, else within 1 ulp of the low dtype; backward within 1 ulp
  of the float32 gradient (2 ulp where two rounded products are added);
* elementwise ops equal the float32 op rounded once (exact ops bit for bit, libm ones
  within 1 ulp of the low dtype), NaN/inf where float32 has them.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember
from ember.codegen import convert_kernels as ck
from ember.codegen import eager
from ember.codegen import lowp_gemm

LOW = [ember.float16, ember.bfloat16]
needs_cc = pytest.mark.skipif(not ck.available(), reason="no C compiler")


def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint16 if np.asarray(a).dtype.itemsize == 2 else np.uint32)


def _ulps(got, ref, dt) -> np.ndarray:
    """|got - ref| in units of the low dtype's spacing at ref (both float32 arrays)."""
    fi = ember.finfo(dt)
    spacing = np.maximum(np.abs(ref), fi.tiny) * fi.eps
    # NOTE: below the smallest normal the spacing is constant (subnormals)
    return np.abs(got.astype(np.float64) - ref) / spacing


def _assert_close_low(got, ref32, dt, ulps=1.0):
    """``got`` (low dtype) within ``ulps`` of the float32 ``ref32``; same NaN/inf."""
    g = got.detach().float().numpy() if isinstance(got, ember.Tensor) else got
    r = np.asarray(ref32, np.float32)
    with np.errstate(all="ignore"):
        low = r.astype(dt.np).astype(np.float32)          # what rounding once gives
    assert np.array_equal(np.isnan(g), np.isnan(low))
    fin = np.isfinite(low)
    assert np.array_equal(g[~fin & ~np.isnan(low)], low[~fin & ~np.isnan(low)])
    err = _ulps(g[fin], r[fin], dt)
    assert err.max(initial=0) <= ulps, f"max error {err.max()} ulp of {dt.name}"


# ------------------------------------------------------------------ conversions
def _f32_specials(low) -> np.ndarray:
    """float32 values around every low value: the value, ties between neighbours, one f32
    ulp either side of each tie; NaN payloads, infinities, overflow, f32 subnormals."""
    h = np.arange(65536, dtype=np.uint16).view(low).astype(np.float32)
    h = h[np.isfinite(h)]
    u = h.view(np.uint32).astype(np.int64)
    half = 1 << (12 if low is np.float16 else 15)   # a tie's distance for normal lows
    cand = np.concatenate([u, u + half, u - half, u + half + 1, u + half - 1, u - half + 1])
    nan = [0x7F800001, 0xFF800001, 0x7FC00000, 0xFFC00001, 0x7F812345, 0x7FFFFFFF,
           0x7FBFFFFF, 0x7FC01FFF, 0x7F802000, 0xFF80E001]
    edges = [0, 0x80000000, 0x7F800000, 0xFF800000, 1, 0x80000001, 0x007FFFFF, 0x00800000,
             0x33000000, 0x33000001, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,
             0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x387FC000, 0x38800000]
    rnd = np.random.default_rng(0).integers(0, 2 ** 32, 200_000, dtype=np.uint64)
    cand = np.concatenate([cand, nan, edges, rnd.astype(np.int64)]) & 0xFFFFFFFF
    return cand.astype(np.uint32).view(np.float32)


# Conversion paths: float16 has a native (F16C) and a portable kernel; bfloat16 has one
# (a shift), so it is tested once.
PATHS = [(ember.float16, False), (ember.float16, True), (ember.bfloat16, False)]
PATH_IDS = ["float16-native", "float16-portable", "bfloat16"]


@needs_cc
@pytest.mark.parametrize("dt, portable", PATHS, ids=PATH_IDS)
def test_low_to_f32_all_bit_patterns(dt, portable):
    x = np.arange(65536, dtype=np.uint16).view(dt.np)
    got = ck.convert(x, np.float32, portable=portable)
    assert np.array_equal(_bits(got), _bits(x.astype(np.float32)))


@needs_cc
@pytest.mark.parametrize("dt, portable", PATHS, ids=PATH_IDS)
def test_f32_to_low_ties_specials(dt, portable):
    f = _f32_specials(dt.np)
    with np.errstate(all="ignore"):
        ref = f.astype(dt.np)
    got = ck.convert(f, dt.np, portable=portable)
    bad = np.nonzero(_bits(got) != _bits(ref))[0]
    assert bad.size == 0, [hex(v) for v in f.view(np.uint32)[bad[:8]]]


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_tensor_casts_take_the_kernel_and_keep_bits(dt, monkeypatch):
    """``.float()``, ``.to()``, ``.half()``/``.bfloat16()``, eager and compiled: the
    conversion kernel (where a compiler exists), the bits ``astype`` gives."""
    calls = []
    convert = ck.convert
    monkeypatch.setattr(ck, "convert", lambda *a, **k: calls.append(1) or convert(*a, **k))
    x = ember.from_numpy(np.arange(65536, dtype=np.uint16).view(dt.np).copy())
    up = x.float()
    assert np.array_equal(_bits(up.numpy()), _bits(x.numpy().astype(np.float32)))
    f = _f32_specials(dt.np)
    with np.errstate(all="ignore"):
        ref = f.astype(dt.np)
    t = ember.from_numpy(f)
    short = t.half if dt is ember.float16 else t.bfloat16
    for down in (t.to(dt), short(), ember.compile(lambda v: v.to(dt))(t)):
        assert np.array_equal(_bits(down.numpy()), _bits(ref))
    back = ember.compile(lambda v: v.float())(x)
    assert np.array_equal(_bits(back.numpy()), _bits(up.numpy()))
    if ck.available():
        assert len(calls) >= 5


@needs_cc
@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_convert_on_the_thread_pool(dt, monkeypatch):
    """Chunks split over the pool (a size no 64-element boundary divides) join exactly."""
    monkeypatch.setattr(ck, "PARALLEL_MIN", 1)
    monkeypatch.setattr(ck, "num_threads", lambda: 2)
    f = _f32_specials(dt.np)[:100_003]
    with np.errstate(all="ignore"):
        ref = f.astype(dt.np)
    low = ck.convert(f, dt.np)
    assert np.array_equal(_bits(low), _bits(ref))
    assert np.array_equal(_bits(ck.convert(low, np.float32)), _bits(ref.astype(np.float32)))


@needs_cc
def test_convert_transposed_and_out():
    a = np.random.default_rng(1).standard_normal((3, 40, 50)).astype(np.float16)
    t = a.transpose(2, 0, 1)
    got = ck.convert(t, np.float32)
    assert got.shape == t.shape and np.array_equal(got, t.astype(np.float32))
    out = np.empty((3, 40, 50), ml_dtypes.bfloat16)
    f = a.astype(np.float32)
    assert ck.convert(f, ml_dtypes.bfloat16, out=out) is out
    assert np.array_equal(_bits(out), _bits(f.astype(ml_dtypes.bfloat16)))
    assert ck.convert(a[:, ::2], np.float32) is None        # not a permuted contiguous array


# ------------------------------------------------------------------ GEMMs
def _rand(shape, dt, seed=0, specials=False):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    if specials:
        flat = a.reshape(-1)
        flat[:4] = [np.inf, -np.inf, np.nan, 3e-8]          # 3e-8: a float16 subnormal
    return ember.from_numpy(a).to(dt)


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_matmul_is_float32_product_rounded_once(dt, monkeypatch):
    # the conversion path; bfloat16's native GEMM (AMX) has its own bounds: test_lowp_gemm.py
    monkeypatch.setattr(lowp_gemm, "mode", "off")
    x, y = _rand((64, 512), dt), _rand((512, 96), dt, 1)
    got = x @ y
    ref = (x.float() @ y.float()).numpy().astype(dt.np)
    assert got.dtype is dt
    assert np.array_equal(_bits(got.numpy()), _bits(ref))
    # transposed operand (a Linear weight), batched and broadcast forms
    w = _rand((96, 512), dt, 2)
    assert np.array_equal(_bits((x @ w.mT).numpy()),
                          _bits((x.float() @ w.float().mT).numpy().astype(dt.np)))
    b1, b2 = _rand((4, 16, 32), dt, 3), _rand((4, 32, 8), dt, 4)
    assert np.array_equal(_bits(ember.bmm(b1, b2).numpy()),
                          _bits(ember.bmm(b1.float(), b2.float()).numpy().astype(dt.np)))


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_matmul_inf_nan_denormal_inputs(dt):
    x, y = _rand((8, 64), dt, specials=True), _rand((64, 8), dt, 1, specials=True)
    got = (x @ y).float().numpy()
    ref = (x.float() @ y.float()).numpy()
    _assert_close_low(got, ref, dt, ulps=0.5)


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_linear_and_bmm_backward(dt):
    x = _rand((4, 10, 64), dt).requires_grad_()
    w = _rand((32, 64), dt, 1).requires_grad_()
    b = _rand((32,), dt, 2).requires_grad_()
    g = _rand((4, 10, 32), dt, 3)
    ember.nn.functional.linear(x, w, b).backward(g)
    xs = [t.detach().float().requires_grad_() for t in (x, w, b)]
    ember.nn.functional.linear(*xs).backward(g.float())
    for low, ref in zip((x, w, b), xs):
        assert low.grad.dtype is dt
        _assert_close_low(low.grad, ref.grad.numpy(), dt, ulps=1.0)
    p, q = _rand((3, 16, 24), dt, 4).requires_grad_(), _rand((3, 24, 8), dt, 5).requires_grad_()
    gq = _rand((3, 16, 8), dt, 6)
    ember.bmm(p, q).backward(gq)
    pf, qf = p.detach().float().requires_grad_(), q.detach().float().requires_grad_()
    ember.bmm(pf, qf).backward(gq.float())
    _assert_close_low(p.grad, pf.grad.numpy(), dt)
    _assert_close_low(q.grad, qf.grad.numpy(), dt)


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_conv2d_forward_backward(dt):
    F = ember.nn.functional
    x = _rand((8, 3, 12, 12), dt).requires_grad_()
    w = _rand((6, 3, 3, 3), dt, 1).requires_grad_()
    y = F.conv2d(x, w, padding=1)
    g = _rand(tuple(y.shape), dt, 2)
    y.backward(g)
    xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    yf = F.conv2d(xf, wf, padding=1)
    yf.backward(g.float())
    assert y.dtype is dt and x.grad.dtype is dt and w.grad.dtype is dt
    _assert_close_low(y, yf.detach().numpy(), dt, ulps=0.5)
    # The input gradient sums 9 overlapping window products (fold), the weight gradient
    # the batch's 8 per-sample products, both in float32 — but each product is a GEMM
    # result rounded to the low dtype first. Bound: |got - ref| <= eps * sum|terms| (half
    # an eps per rounded term, half for the final rounding), where sum|terms| is the same
    # float32 backward on |x|, |w|, |g|.
    xa, wa = xf.detach().abs().requires_grad_(), wf.detach().abs().requires_grad_()
    F.conv2d(xa, wa, padding=1).backward(g.float().abs())
    eps = ember.finfo(dt).eps
    for low, ref, mag in ((x, xf, xa), (w, wf, wa)):
        err = np.abs(low.grad.float().numpy() - ref.grad.numpy())
        assert np.all(err <= eps * mag.grad.numpy()), (err / mag.grad.numpy()).max() / eps


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_sum_accumulates_in_float32(dt):
    x = _rand((64, 300, 40), dt)
    for dim in (0, 1, 2, None):
        got = x.sum(dim) if dim is not None else x.sum()
        ref = x.float().sum(dim) if dim is not None else x.float().sum()
        assert np.array_equal(_bits(got.numpy()), _bits(ref.numpy().astype(dt.np))), dim


# ------------------------------------------------------------------ elementwise
_EXACT = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b, "maximum": ember.maximum,
          "sqrt": lambda a, b: a.abs().sqrt(), "relu": lambda a, b: ember.relu(a)}
_LIBM = {"exp": lambda a, b: a.exp(), "tanh": lambda a, b: a.tanh(),
         "sigmoid": lambda a, b: a.sigmoid(), "erf": lambda a, b: ember.erf(a),
         "log": lambda a, b: a.abs().log(), "pow": lambda a, b: a.abs() ** b}


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(_EXACT) + list(_LIBM))
def test_elementwise_through_kernels(dt, name):
    fn = {**_EXACT, **_LIBM}[name]
    a, b = _rand((256, 160), dt, specials=True), _rand((256, 160), dt, 1, specials=True)
    runs = eager.stats["runs"]
    got = fn(a, b)
    used = eager.stats["runs"] > runs
    ref = fn(a.float(), b.float()).numpy()
    assert got.dtype is dt
    _assert_close_low(got, ref, dt, ulps=0.5 if name in _EXACT else 1.0)
    if ck.available() and name != "relu":
        lib = eager._numpy_f16_simd() if dt is ember.float16 else ()
        assert used == (name not in lib), "float16/bfloat16 op did not take the kernel"


# ------------------------------------------------------------------ compiled graphs
@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_compiled_matches_eager(dt):
    w = _rand((64, 64), dt, 1)

    def f(x):
        h = (x @ w).tanh() * 2.0 + 1.0
        return (h @ w.mT).sum(0), h.exp()

    x = _rand((128, 64), dt)
    c = ember.compile(f)
    for got, ref in zip(c(x), f(x)):
        assert got.dtype is dt
        _assert_close_low(got, ref.float().numpy(), dt, ulps=1.0)


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_compiled_loads_stores_every_bit_pattern(dt):
    """Generated kernels' float16/bfloat16 loads and stores: every pattern, like eager."""
    bits = np.arange(65536, dtype=np.uint16)
    x = ember.from_numpy(bits.view(dt.np).copy())
    got = ember.compile(lambda t: t * 1.0 + 0.0)(x).numpy()
    ref = (x * 1.0 + 0.0).numpy()
    nan = np.isnan(ref.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert np.array_equal(_bits(got)[~nan], _bits(ref)[~nan])
    if dt is ember.bfloat16:     # ml_dtypes' NaN: 0x7FC0 with the sign
        f = np.array([0x7F812345, 0xFF800001, 0x7FFFFFFF], np.uint32).view(np.float32)
        t = ember.from_numpy(np.repeat(f, 4))
        got = ember.compile(lambda v: (v * 1.0).to(ember.bfloat16))(t).numpy()
        with np.errstate(all="ignore"):
            assert np.array_equal(_bits(got), _bits(np.repeat(f, 4).astype(dt.np)))


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_compiled_matmul_into_a_reused_buffer(dt, monkeypatch):
    """The executor's ``out=`` GEMM (a matmul planned into a dead buffer) is the kernel's
    float32 product rounded once, like eager — not NumPy's float16 loop."""
    from ember.graph import executor
    outfns = []
    init = executor.Program.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        outfns.extend(s.outfn for s in self.steps if s.name == "matmul" and s.outfn)

    monkeypatch.setattr(executor.Program, "__init__", spy)
    w = _rand((64, 64), dt, 1)

    def f(x):
        b = (x * 2.0) @ w
        return (b @ w) @ w

    x = _rand((64, 64), dt)
    got = ember.compile(f)(x)
    assert np.array_equal(_bits(got.numpy()), _bits(f(x).numpy()))
    assert outfns and all(fn is not np.matmul for fn in outfns)


def test_bench_amp_quick_runs(capsys):
    """``bench/amp.py --quick`` runs every table (tiny sizes; no PyTorch)."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "amp.py"
    spec = importlib.util.spec_from_file_location("bench_amp", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--quick", "--no-torch"]) == 0
    out = capsys.readouterr().out
    assert "GFLOP/s" in out and "GB/s" in out and "error" not in out
    assert out.count("W3 GPT AdamW") == 7     # 3 eager, 4 compiled (fp16-whole)


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_forward_backward_in_float32_inside(dt, causal):
    """Attention in float16/bfloat16: the float32 kernel's values rounded once (forward and
    each gradient), eager and compiled — not NumPy's float16 loops."""
    F = ember.nn.functional
    q, k, v = (_rand((2, 4, 64, 32), dt, s).requires_grad_() for s in range(3))
    g = _rand((2, 4, 64, 32), dt, 3)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    y.backward(g)
    f32 = [t.detach().float().requires_grad_() for t in (q, k, v)]
    yf = F.scaled_dot_product_attention(*f32, is_causal=causal)
    yf.backward(g.float())
    assert np.array_equal(_bits(y.detach().numpy()), _bits(yf.detach().numpy().astype(dt.np)))
    for low, ref in zip((q, k, v), f32):
        assert np.array_equal(_bits(low.grad.numpy()), _bits(ref.grad.numpy().astype(dt.np)))

    def step(a, b, c):
        out = F.scaled_dot_product_attention(a, b, c, is_causal=causal)
        return ember.autograd.grad((out * g).sum(), (a, b, c))

    ins = [t.detach().requires_grad_() for t in (q, k, v)]
    for got, ref in zip(ember.compile(step)(*ins), (q.grad, k.grad, v.grad)):
        assert np.array_equal(_bits(got.numpy()), _bits(ref.numpy()))


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_extrema_and_arg_extrema_exact(dt):
    """amax/amin/argmax/argmin (max-pool's) in float16/bfloat16: exactly NumPy's answer on
    the low values (computed on exact float32 copies), NaN and ties included."""
    x = _rand((512, 4, 40), dt, specials=True)
    a = x.numpy()
    a32 = a.astype(np.float32)
    for dim in (0, 1, 2):
        assert np.array_equal(x.amax(dim).float().numpy(), a32.max(dim), equal_nan=True)
        assert np.array_equal(x.amin(dim).float().numpy(), a32.min(dim), equal_nan=True)
        assert np.array_equal(x.argmax(dim).numpy(), a.argmax(dim))
        assert np.array_equal(x.argmin(dim).numpy(), a.argmin(dim))
    t = ember.from_numpy(np.array([[1, 3, 3, -0.0, 0.0]], np.float32)).to(dt)
    assert x.argmax().item() == a.argmax() and t.argmax(1).item() == 1
    assert t.argmin(1).item() == 3 and t.neg().argmax(1).item() == 3   # -0 == 0: first


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_compiled_lone_low_precision_op_gets_a_kernel(dt):
    """A single large float16/bfloat16 op in a compiled graph runs as a generated kernel
    (float32 inside), not NumPy's element-at-a-time loop; same bits as eager."""
    if not ck.available():
        pytest.skip("no C compiler")
    x, y = _rand((256, 256), dt), _rand((256, 256), dt, 1)
    f = ember.compile(lambda a, b: a * b)
    got = f(x, y)
    assert np.array_equal(_bits(got.numpy()), _bits((x * y).numpy()))
    fuse = [ln for ln in str(f.explain()).splitlines() if "pass fuse" in ln]
    assert fuse and "kernels 1" in fuse[0], fuse


@pytest.mark.parametrize("dt", LOW, ids=lambda d: d.name)
def test_without_a_compiler_the_same_bits(dt, monkeypatch):
    """No C compiler: conversions fall back to ``astype``, GEMMs still run in float32."""
    x, y = _rand((64, 128), dt), _rand((128, 32), dt, 1)
    want_mm, want_up = (x @ y).numpy().copy(), x.float().numpy().copy()
    monkeypatch.setitem(ck._state, "fns", {})
    assert not ck.available() and ck.convert(x.numpy(), np.float32) is None
    assert np.array_equal(_bits((x @ y).numpy()), _bits(want_mm))
    assert np.array_equal(_bits(x.float().numpy()), _bits(want_up))
