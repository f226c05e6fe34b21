"""The fusion pass: which groups form, and fused graphs agree with the unfused ones.

Tolerances are derived, not tuned: a fused chain of ``depth`` ops rounds once per op in
either version, so results differ by at most about ``depth * eps`` relative (float16 and
bfloat16: the fused kernel computes in float32 and rounds once, the unfused ops round
after every op). Integer and bool results must be equal.
"""
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember import codegen
from ember.graph.passes import EXACT_PASSES
from ember.graph.ir import Var
from ember.graph.passes.fuse import fuse

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from train import WORKLOADS  # noqa: E402

FUSED = ["simplify", "fold", "cse", "fuse", "dce"]


@pytest.fixture(autouse=True)
def _need_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "kernels"))
    if not codegen.available():
        pytest.skip("no C compiler: the fuse pass leaves graphs unchanged (tested below)")


def _compiled(f, *args, passes=FUSED):
    cf = em.compile(f, passes=passes)
    cf(*args)
    return cf


def _names(g) -> list:
    return [n.op.name for n in g.nodes]


def _eps(dtype) -> float:
    return float(em.finfo(dtype).eps)


# ---------------------------------------------------------------- group formation
def test_elementwise_chain_becomes_one_node():
    x, b = em.randn(4, 5), em.randn(5)
    cf = _compiled(lambda x, b: em.tanh(x * 2 + b) * 0.5 - 1, x, b)
    g = cf.graph
    assert _names(g) == ["fused"], g
    node = g.nodes[0]
    assert node.op.ops == "mul,add,tanh,mul,sub"
    assert "fused(" in str(g) and "ops='mul,add,tanh,mul,sub'" in str(g)


def test_matmul_stays_and_its_bias_relu_epilogue_fuses():
    x, w, b = em.randn(8, 6), em.randn(6, 3), em.randn(3)
    cf = _compiled(lambda x, w, b: em.relu(x @ w + b), x, w, b)
    names = _names(cf.graph)
    assert names == ["matmul", "fused"], cf.graph
    assert cf.graph.nodes[1].inputs[0] is cf.graph.nodes[0].out   # starts at the matmul


def test_reduction_absorbs_prologue_and_epilogue():
    x = em.randn(6, 7)

    def layer_norm(x):
        mu = x.sum(-1, keepdim=True) / 7
        d = x - mu
        var = (d * d).sum(-1, keepdim=True) / 7
        return d / (var + 1e-5).sqrt()
    cf = _compiled(layer_norm, x)
    assert _names(cf.graph) == ["fused_reduce"], cf.graph
    np.testing.assert_allclose(cf(x).numpy(), layer_norm(x).numpy(), rtol=20 * _eps(em.float32),
                               atol=20 * _eps(em.float32))


def test_softmax_and_log_softmax_are_one_kernel_each():
    x = em.randn(5, 9)
    for fn in (lambda x: em.softmax(x * 2, -1), lambda x: em.log_softmax(x, -1) + 1):
        cf = _compiled(fn, x)
        assert _names(cf.graph) == ["fused_reduce"], cf.graph
        np.testing.assert_allclose(cf(x).numpy(), fn(x).numpy(), rtol=10 * _eps(em.float32),
                                   atol=10 * _eps(em.float32))


def test_value_needed_outside_becomes_a_second_output():
    x = em.randn(4, 4)
    cf = _compiled(lambda x: (lambda h: (h, (h * 3).exp()))(x + 1), x)
    g = cf.graph
    assert _names(g) == ["fused"] and len(g.nodes[0].outs) == 2, g
    a, b = cf(x)
    np.testing.assert_allclose(a.numpy(), (x + 1).numpy(), rtol=0)
    np.testing.assert_allclose(b.numpy(), ((x + 1) * 3).exp().numpy(), rtol=4 * _eps(em.float32))


def test_reader_between_members_splits_the_group():
    # m is read by a matmul before the chain goes on: the chain after it is a new kernel
    x, w = em.randn(4, 4), em.randn(4, 4)

    def f(x, w):
        m = (x * 2).exp()
        y = m @ w
        return (m + 1).sin() * 2 + y
    cf = _compiled(f, x, w)
    names = _names(cf.graph)
    assert names.count("matmul") == 1 and names.index("matmul") < len(names) - 1, cf.graph
    np.testing.assert_allclose(cf(x, w).numpy(), f(x, w).numpy(), rtol=1e-5, atol=1e-5)


def test_column_reductions_and_random_draws_stay_unfused():
    x = em.randn(6, 5)
    cf = _compiled(lambda x: ((x * 2).exp().sum(0), em.rand(6, 5) + x * 3), x)
    names = _names(cf.graph)
    assert "sum" in names and any(n.startswith("fused") for n in names), cf.graph
    assert any(n.is_random() for n in cf.graph.nodes)


# ---------------------------------------------------------------- numerics
_UNARY = ["exp", "log1p", "tanh", "sigmoid", "erf", "sqrt", "abs", "neg", "sin", "relu",
          "floor", "sign"]
_DTYPES = [em.float32, em.float64, em.float16, em.bfloat16]


def _rel(dtype, depth):
    # fp16/bf16: unfused eager rounds to the narrow type after every op, the kernel once
    return depth * _eps(dtype)


@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", _UNARY)
def test_fused_unary_chain_matches_unfused(op, dtype):
    rng = np.random.default_rng(0)
    x = em.tensor(rng.uniform(0.1, 2.0, (3, 37)).astype(np.float32)).to(dtype)
    fn = getattr(em, op)

    def f(x):
        return fn(x * 0.5 + 0.25) * 2 - 1
    got = _compiled(f, x)(x).float().numpy()
    want = _compiled(f, x, passes=EXACT_PASSES)(x).float().numpy()
    tol = _rel(dtype, 5) + (4e-7 if dtype is em.float32 else 0)   # + vectorised libm ulps
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [em.int64, em.int32, em.bool], ids=lambda d: d.name)
def test_integer_and_bool_chains_are_exact(dtype):
    rng = np.random.default_rng(1)
    a = em.tensor(rng.integers(-9, 9, (5, 6))).to(dtype)
    b = em.tensor(rng.integers(-9, 9, (6,))).to(dtype)
    if dtype is em.bool:
        f = lambda a, b: em.logical_xor(a, b) | (a & ~(a | b))   # noqa: E731
    else:
        f = lambda a, b: em.where(a > b, a * b - 3, (a + b) // 2) % 7   # noqa: E731
    got = _compiled(f, a, b)(a, b)
    assert _names(_compiled(f, a, b).graph) == ["fused"]
    np.testing.assert_array_equal(got.numpy(), f(a, b).numpy())


def test_mixed_dtypes_promote_like_eager():
    x = em.randn(4, 3)
    i = em.tensor(np.arange(12).reshape(4, 3))
    s = em.tensor(2.0, dtype=em.float64)          # a 0-d float64 does not promote float32

    def f(x, i, s):
        return (x * i + s) / 3, (i * 2 + 1) > 5
    got = _compiled(f, x, i, s)(x, i, s)
    want = f(x, i, s)
    assert got[0].dtype is want[0].dtype is em.float32
    # x * i + s may be one FMA: off by an ulp of the product before cancellation, so the
    # tolerance is relative to the operands' size, not to the (possibly tiny) result
    scale = float(np.abs((x * i).numpy()).max() + 2.0)
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=4 * _eps(em.float32),
                               atol=4 * _eps(em.float32) * scale)
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())


def test_broadcasting_non_contiguous_zero_size_and_odd_lengths():
    rng = np.random.default_rng(2)
    f = lambda x, y: (x - y).exp() * y + 1   # noqa: E731
    cases = [(rng.standard_normal((5, 1, 7)), rng.standard_normal((3, 1))),     # broadcast
             (rng.standard_normal((7, 5)).T, rng.standard_normal((5, 7))[:, ::-1]),  # views
             (rng.standard_normal((0, 4)), rng.standard_normal((4,))),            # zero-size
             (rng.standard_normal((1031,)), rng.standard_normal((1031,)))]         # odd
    for a, b in cases:
        x, y = em.tensor(a.astype(np.float32)), em.tensor(b.astype(np.float32))
        cf = _compiled(f, x, y)
        assert _names(cf.graph) == ["fused"]
        got = cf(x, y).numpy()
        want = f(x, y).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=4 * _eps(em.float32), atol=1e-6)


def test_nan_and_inf_keep_numpy_semantics():
    x = em.tensor(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0], np.float32))
    f = lambda x: (em.relu(x) + em.maximum(x, x * 0) - em.clamp(x, -1, 1)).exp()   # noqa
    got = _compiled(f, x)(x).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(f(x).numpy()))
    np.testing.assert_allclose(got, f(x).numpy(), rtol=4 * _eps(em.float32))
    g = lambda x: em.softmax(x.reshape(2, 3), -1)   # noqa: E731 - rows with NaN and inf
    np.testing.assert_array_equal(np.isnan(_compiled(g, x)(x).numpy()), np.isnan(g(x).numpy()))


@pytest.mark.parametrize("name", [n for n in WORKLOADS])
def test_workload_steps_fused_agree_with_exact(name):
    """Several steps of W1-W3 (tiny): the fused graph really fuses and tracks eager."""
    wl = WORKLOADS[name]
    losses = {}
    for passes in (FUSED, EXACT_PASSES):
        size = dict(wl.tiny)
        em.manual_seed(0)
        model, opt = wl.build(em, **size)
        x, y = (em.tensor(a) for a in wl.data(np.random.default_rng(0), **size))

        def step(x, y):
            opt.zero_grad()
            out = model(x)
            loss = em.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss.detach()
        cf = em.compile(step, fullgraph=True, passes=passes)
        losses[passes is FUSED] = [float(cf(x, y)) for _ in range(5)]
        if passes is FUSED:
            kinds = _names(cf.graph)
            assert kinds.count("fused") + kinds.count("fused_reduce") >= 3, cf.graph
    depth = 200      # the longest chain of a tiny step's graph is below this
    np.testing.assert_allclose(losses[True], losses[False], rtol=depth * _eps(em.float32))


def test_optimizer_scalars_become_one_kernel_before_their_readers():
    """Adam's per-parameter bias corrections (from each ``step`` and the lr): one kernel."""
    em.manual_seed(0)
    model = em.nn.Sequential(em.nn.Linear(6, 5), em.nn.ReLU(), em.nn.Linear(5, 3))
    opt = em.optim.Adam(model.parameters(), lr=1e-2)
    ref = em.nn.Sequential(em.nn.Linear(6, 5), em.nn.ReLU(), em.nn.Linear(5, 3))
    ref.load_state_dict(model.state_dict())
    ref_opt = em.optim.Adam(ref.parameters(), lr=1e-2)
    x = em.randn(8, 6)

    def step(m, o):
        def f(x):
            o.zero_grad()
            loss = (m(x) ** 2).mean()
            loss.backward()
            o.step()
            return loss.detach()
        return f
    cf = em.compile(step(model, opt), passes=FUSED)
    eager = step(ref, ref_opt)
    for _ in range(4):
        np.testing.assert_allclose(float(cf(x)), float(eager(x)), rtol=100 * _eps(em.float32))
    scalar = [n for n in cf.graph.nodes if n.op.name == "fused" and n.outs[0].shape == ()
              and any((v.name or "").endswith(".step") for v in n.inputs)]
    assert len(scalar) == 1, cf.graph                       # 4 parameters, one launch
    assert sum((v.name or "").endswith(".step") for v in scalar[0].inputs) == 4
    readers = [i for i, n in enumerate(cf.graph.nodes)
               if any(x.__class__ is Var and x.id in {o.id for o in scalar[0].outs}
                      for x in n.inputs)]
    assert cf.graph.nodes.index(scalar[0]) < min(readers)
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_scalar_kernels_are_split_at_the_launch_limit():
    from ember.codegen import launch
    from ember.graph.passes.fuse_groups import partition
    n = 40                                   # 40 independent scalar chains of 2 inputs each
    xs = [em.tensor(float(i)) for i in range(2 * n)]
    f = lambda *a: [(a[2 * i] * 2 + a[2 * i + 1]).exp() for i in range(n)]   # noqa: E731
    cf = em.compile(f, passes=["simplify", "fold", "cse", "dce"])
    cf(*xs)
    groups = partition(cf.graph)
    merged = fuse_mod().merge_scalars(cf.graph, groups)
    sizes = [len(g.members) for g in merged]
    assert sum(sizes) == 3 * n and len(merged) >= 2
    results = {v.id for v in cf.graph.outputs}
    for g in merged:                         # each chain: 2 inputs + 1 result
        own = {m.out.id for m, _ in g.members}
        ext = {x.id for m, _ in g.members for x in m.var_inputs() if x.id not in own}
        assert len(ext) + len(own & results) <= launch.MAX_ARRAYS
    got = _compiled(f, *xs)(*xs)
    for a, b in zip(got, f(*xs)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=4 * _eps(em.float32))


def fuse_mod():
    import importlib
    return importlib.import_module("ember.graph.passes.fuse")


# ---------------------------------------------------------------- no compiler
def test_without_a_compiler_the_graph_runs_unfused_with_one_warning(monkeypatch):
    import importlib
    from ember.codegen import runtime, toolchain
    fuse_mod = importlib.import_module("ember.graph.passes.fuse")
    monkeypatch.setattr(fuse_mod, "find_compiler", lambda: None)
    monkeypatch.setattr(toolchain, "find_compiler", lambda: None)
    monkeypatch.setattr(runtime, "_warned", [False])
    x = em.randn(4, 5)
    f = lambda x: em.tanh(x * 2 + 1)   # noqa: E731
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cf = em.compile(f)
        cf(x)
        g = em.compile(lambda x: x.exp() * 3)
        g(x)
    msgs = [str(m.message) for m in w if "C compiler" in str(m.message)]
    assert len(msgs) == 1, msgs
    assert not any(n.op.name.startswith("fused") for n in cf.graph.nodes)
    np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
    _, stats = fuse(cf.graph)
    assert stats["kernels"] == 0 and stats["no_compiler"] == 1


@pytest.mark.parametrize("dtype, value", [(em.float64, 1.2), (em.float64, 0.1),
                                          (em.float32, 1.2), (em.int64, 7)])
def test_fused_where_writes_a_python_scalar_at_the_output_precision(dtype, value):
    # Regression: the fused where() rendered a weak Python float as a C float literal
    # (1.2 -> 1.2000000476837158 in float64) from the second (replayed) call on.
    x = em.tensor([-1, 2, 3], dtype=dtype)

    def f(x):
        return em.where(x > 0, value, x) + em.where(x > 0, x, value)

    cf = em.compile(f, passes=FUSED)
    want = f(x).numpy()
    for _ in range(3):
        got = cf(x).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert _names(cf.graph) == ["fused"], cf.graph     # the generated kernel ran
