"""Compiled GPU draws generated on the device (``ember/graph/passes/philox.py``).

On the stand-in given a GPU's capabilities (``emu_gpu``: the CUDA text runs on the
emulator) a compiled dropout step's mask is the Philox kernel's, keyed by the device's
default generator: reproducible under ``manual_seed``, new at every call (the offset
advances by the counters used), equal to a NumPy Philox4x32-10 of (seed, offset), with
the expected fraction dropped and gradients that follow the mask; under
``mode="reduce-overhead"`` the program is captured and each replay draws the default
mode's next numbers, bit for bit. CPU graphs and the plain stand-in keep host draws.
Tests that look at the ``philox`` node run the separate-kernel path (``separate``: the
draws fused into their readers are tests/cuda/test_cuda_philox_fuse.py's).
"""
import numpy as np
import pytest

import ember as em
from ember.graph.passes import fuse_philox
from ember.graph.passes.philox import PHILOX, PHILOX_KEY, reserve
from ember.graph.trace import RANDOM

import _cuda_emu
from test_cuda_philox_emu import ref_words
from test_multi_launch import emu_gpu  # noqa: F401 - a fixture

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")

F = em.nn.functional
P = 0.3
SHAPE = (32, 40)            # 1280 elements: 320 Philox counters a draw


@pytest.fixture
def separate(monkeypatch):
    """The draw its own kernel writing the sample (no Philox leaves in its readers)."""
    monkeypatch.setattr(fuse_philox, "ENABLED", False)


def _program(fn):
    return [e for e in fn._cache.values() if not e.eager and e.program is not None][-1].program


def _run(mode, calls=5, seed=0, dtype=em.float32):
    """Per call: the dropout output and ``w.grad``, of ``sum(dropout(w))`` compiled."""
    em.manual_seed(seed)
    w = em.nn.Parameter(em.ones(*SHAPE, dtype=dtype).to("cuda"))

    def step():
        out = F.dropout(w, P)
        out.sum().backward()
        return out.detach()
    fn = em.compile(step, mode=mode)
    got = []
    for _ in range(calls):
        w.grad = None
        out = fn()
        got.append((out.cpu().numpy().copy(), w.grad.cpu().numpy().copy()))
    return got, fn


def test_compiled_dropout_draws_on_the_device(emu_gpu, separate):
    got, fn = _run(None)
    ops = [n.op for n in _program(fn).graph.nodes]
    assert PHILOX in ops and PHILOX_KEY in ops and RANDOM not in ops
    assert any("ember_philox_bernoulli_f32" in m.launches for m in emu_gpu)
    scale = np.float32(1.0) / np.float32(1.0 - P)
    n = int(np.prod(SHAPE))
    masks = []
    for out, grad in got[1:]:                # the first call is the traced eager call
        keep = out != 0
        np.testing.assert_array_equal(out, np.where(keep, scale, 0).astype(np.float32))
        np.testing.assert_array_equal(grad, out)     # d sum(w * mask * s) / dw = mask * s
        dropped = n - int(keep.sum())
        sd = (n * P * (1 - P)) ** 0.5
        assert abs(dropped - n * P) < 6 * sd, (dropped, n * P)
        masks.append(keep)
    assert all((a != b).any() for a, b in zip(masks, masks[1:]))      # new every call


@pytest.mark.parametrize("dtype", [em.float32, em.float16, em.bfloat16])
def test_masks_are_philox_of_the_generator_seed_and_offset(emu_gpu, dtype, separate):
    got, fn = _run(None, calls=4, seed=1234, dtype=dtype)
    node = next(n for n in _program(fn).graph.nodes if n.op is PHILOX)
    assert node.outs[0].dtype is dtype and node.params["kind"] == "bernoulli"
    c = -(-int(np.prod(SHAPE)) // 4)
    n = int(np.prod(SHAPE))
    for k, (out, _) in enumerate(got[1:]):
        u = (ref_words(1234, k * c, n) >> 8).astype(np.float64) * 2.0 ** -24
        np.testing.assert_array_equal(out.reshape(-1) != 0, u < 1 - P)
    assert all(np.array_equal(o, g) for o, g in got)       # grad = mask * scale = out
    g = em.random.cuda_generator(0)
    assert reserve(g, 0) == (1234, 3 * c)     # advanced by the counters used
    em.manual_seed(1234)
    assert reserve(g, 0) == (1234, 0)          # seeding restarts the offset


def test_reproducible_under_manual_seed(emu_gpu):
    a, _ = _run(None, calls=3)
    b, _ = _run(None, calls=3)
    for (x, gx), (y, gy) in zip(a, b):
        assert x.tobytes() == y.tobytes() and gx.tobytes() == gy.tobytes()


def test_reduce_overhead_captures_and_replays_new_draws(emu_gpu):
    want, _ = _run(None, calls=6)
    got, fn = _run("reduce-overhead", calls=6)
    for (x, gx), (y, gy) in zip(want, got):
        assert x.tobytes() == y.tobytes() and gx.tobytes() == gy.tobytes()
    g = _program(fn).cuda_graph
    assert g.failed is None and g.captures == 1 and g.replays >= 2
    outs = [o for o, _ in got[-3:]]
    assert all((a != b).any() for a, b in zip(outs, outs[1:]))


def test_rand_randn_uniform_normal_compile_to_the_kernels(emu_gpu):
    em.manual_seed(3)

    def draws():
        x = em.empty(64, device="cuda").uniform_(-2.0, 3.0)
        y = em.empty(64, device="cuda").normal_(1.0, 0.5)
        return em.rand(64, device="cuda"), em.randn(64, device="cuda"), x, y
    fn = em.compile(draws)
    fn()
    r, z, x, y = [t.cpu().numpy() for t in fn()]
    kinds = sorted(n.params["kind"] for n in _program(fn).graph.nodes
                   if n.op is PHILOX)
    assert kinds == ["normal", "normal", "uniform", "uniform"]
    assert 0 <= r.min() and r.max() < 1 and -2 <= x.min() and x.max() < 3
    assert abs(z.mean()) < 0.6 and 0.6 < z.std() < 1.5
    assert abs(y.mean() - 1.0) < 0.3 and 0.3 < y.std() < 0.75


def test_cpu_graphs_and_the_plain_stand_in_keep_host_draws(fake_cuda):
    for dev in ("cpu", "cuda"):
        em.manual_seed(0)
        x = em.ones(8, 8).to(dev)
        fn = em.compile(lambda x: F.dropout(x, 0.5))
        fn(x)
        fn(x)
        ops = [n.op for n in _program(fn).graph.nodes]
        assert RANDOM in ops and PHILOX not in ops, dev


def _mlp_dropout():
    nn = em.nn
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.25), nn.Linear(16, 4))


@pytest.mark.parametrize("amp", [False, True], ids=["float32", "float16-autocast"])
def test_adamw_training_with_dropout_replays_the_default_mode(emu_gpu, amp):
    from test_cuda_graphs import _same, _train
    want = _train(None, _mlp_dropout, amp=amp, steps=8)
    got = _train("reduce-overhead", _mlp_dropout, amp=amp, steps=8)
    assert got[0] == want[0] and _same(got[1], want[1])
    assert all(_same(a, b) for a, b in zip(got[2], want[2]))
    prog = _program(got[3])
    assert any(n.op in (PHILOX, fuse_philox.WORDS) for n in prog.graph.nodes)
    assert prog._hosting and prog.cuda_graph.failed is None and prog.cuda_graph.replays >= 2
    assert len(set(got[0][2:])) > 1


def _model_runs(mode=None, steps=6, factory=_mlp_dropout):
    """``steps`` calls of a compiled dropout MLP (``factory()``; forward and backward graphs)
    with eager backward: each call's output and first-layer gradient, and the compiled
    model."""
    em.manual_seed(0)
    model = factory().to("cuda")
    cm = em.compile(model, mode=mode)
    x = em.ones(6, 8).to("cuda")
    outs = []
    for _ in range(steps):
        y = cm(x)
        y.sum().backward()
        outs.append((y.detach().cpu().numpy().copy(),
                     model[0].weight.grad.cpu().numpy().copy()))
        model.zero_grad(set_to_none=True)
    return outs, cm


def test_compiled_model_forward_and_backward_graphs(emu_gpu):
    from test_cuda_graphs import _compiled_fn
    (want, _), (got, cm) = _model_runs(None), _model_runs("reduce-overhead")
    for (y0, g0), (y1, g1) in zip(want, got):
        assert y0.tobytes() == y1.tobytes() and g0.tobytes() == g1.tobytes()
    assert not np.array_equal(got[-1][0], got[-2][0])
    e = [e for e in _compiled_fn(cm)._cache.values() if e.program is not None][-1]
    # NOTE: the forward saves the draw's key (philox.redraw_saved): both graphs hold leaves
    for prog in (e.program, e.joint.bwd_program):
        assert any(n.op is fuse_philox.WORDS for n in prog.graph.nodes)
    fwd, bwd = e.program.cuda_graph, e.joint.bwd_program.cuda_graph
    assert fwd.failed is None and bwd.failed is None and fwd.replays >= 2


def test_eager_draws_stay_the_generators_pcg64_stream(emu_gpu):
    em.manual_seed(5)
    a = em.rand(7, device="cuda").cpu().numpy()
    b = em.empty(9, device="cuda").normal_(1.0, 2.0).cpu().numpy()
    rng = np.random.Generator(np.random.PCG64(5))
    assert a.tobytes() == rng.random(7, dtype=np.float32).tobytes()
    want = (rng.standard_normal(9, dtype=np.float32) * np.float32(2) + np.float32(1))
    assert b.tobytes() == want.astype(np.float32).tobytes()


def test_many_draws_share_key_ops_and_keep_graph_order(emu_gpu):
    from ember.graph.passes.philox import PER_KEY
    em.manual_seed(11)
    k = PER_KEY + 8
    fn = em.compile(lambda: em.stack([em.rand(5, device="cuda") for _ in range(k)]))
    fn()                                            # traced: eager's host draws
    got = [fn().cpu().numpy() for _ in range(2)]
    keys = [n for n in _program(fn).graph.nodes if n.op is PHILOX_KEY]
    assert [n.outs[0].shape for n in keys] == [(PER_KEY, 2), (8, 2)]
    for call, out in enumerate(got):
        for j in range(k):
            w = ref_words(11, 2 * (call * k + j), 5)       # 5 elements: 2 counters each
            want = (w >> 8).astype(np.float32) * np.float32(2.0 ** -24)
            np.testing.assert_array_equal(out[j], want)
