"""Device draws computed inside the kernels that read them (``graph/passes/fuse_philox.py``).

On the stand-in given a GPU's capabilities (``emu_gpu``: the CUDA text runs on the
emulator), a compiled dropout step's mask is no array any more: no ``philox`` node or
``ember_philox_*`` launch, a ``philox_words`` host step per draw, and the fused kernels
(forward and backward of a whole training step) hold the Philox leaf. Every output and
gradient equals the separate-kernel path's (``fuse_philox.ENABLED = False``) bit for bit,
in the default mode and under ``mode="reduce-overhead"`` (captured once, replayed with new
draws), for float32/float16/bfloat16 masks and an AdamW MLP with dropout (float16
autocast too). The launch and byte census of ``bench/cuda_philox_fuse.py`` (stub
modules) shows the saving.
"""
import os

import numpy as np
import pytest

from ember.codegen.ir import has_philox
from ember.graph.passes import fuse_philox
from ember.graph.passes.philox import PHILOX, PHILOX_KEY

import _cuda_emu
from test_cuda_philox_graphs import _mlp_dropout, _model_runs, _program, _run
from test_multi_launch import _launches, emu_gpu  # noqa: F401 - a fixture

import ember as em

pytestmark = pytest.mark.skipif(not _cuda_emu.available(),
                                reason="no g++ with C++20 <barrier> to run the CUDA text on")


def _both(monkeypatch, fn):
    """``fn()`` with the draws fused, then with the separate kernel."""
    monkeypatch.setattr(fuse_philox, "ENABLED", True)
    fused = fn()
    monkeypatch.setattr(fuse_philox, "ENABLED", False)
    return fused, fn()


def _leaf_kernels(prog) -> int:
    return sum(1 for n in prog.graph.nodes if has_philox_op(n.op))


def has_philox_op(op) -> bool:
    k = getattr(op, "kernel", None)
    return k is not None and has_philox(k)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"], ids=["default", "reduce-overhead"])
@pytest.mark.parametrize("dtype", [em.float32, em.float16, em.bfloat16])
def test_fused_dropout_step_equals_the_separate_kernel_bitwise(emu_gpu, monkeypatch, mode,
                                                                dtype):
    marks = []

    def run():
        marks.append(len(_launches(emu_gpu)))
        return _run(mode, 6, 21, dtype)
    (got, fn), (want, fn_sep) = _both(monkeypatch, run)
    for (x, gx), (y, gy) in zip(got, want):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes() and gx.tobytes() == gy.tobytes()
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(got[1:], got[2:]))
    ops = [n.op for n in _program(fn).graph.nodes]
    assert PHILOX not in ops and PHILOX_KEY in ops and fuse_philox.WORDS in ops
    assert _leaf_kernels(_program(fn)) >= 1
    assert PHILOX in [n.op for n in _program(fn_sep).graph.nodes]
    fused, separate = (_launches(emu_gpu)[a:b] for a, b in zip(marks, marks[1:] + [None]))
    assert not any(n.startswith("ember_philox_") for n in fused), fused
    assert any(n.startswith("ember_philox_") for n in separate) or mode is not None
    if mode is not None:
        g = _program(fn).cuda_graph
        assert g.failed is None and g.captures == 1 and g.replays >= 2


@pytest.mark.parametrize("amp", [False, True], ids=["float32", "float16-autocast"])
def test_adamw_mlp_with_dropout_trains_bitwise_as_the_separate_kernel(emu_gpu, monkeypatch,
                                                                      amp):
    """A whole step (forward, backward, AdamW) as one graph, small (below recompute's
    MIN_NUMEL the forward kernel stores what the backward reads)."""
    from test_cuda_graphs import _same, _train
    for mode in (None, "reduce-overhead"):
        got, want = _both(monkeypatch, lambda: _train(mode, _mlp_dropout, amp=amp, steps=8))
        assert got[0] == want[0] and _same(got[1], want[1])
        assert all(_same(a, b) for a, b in zip(got[2], want[2]))
        prog = _program(got[3])
        assert PHILOX not in [n.op for n in prog.graph.nodes]
        assert _leaf_kernels(prog) >= 1
    assert prog.cuda_graph.failed is None and prog.cuda_graph.replays >= 2


def _gelu_dropout(mode, steps=4):
    """Losses, weights and the compiled function of AdamW steps on ``gelu(x @ w1)``
    dropped out (32 x 512: above recompute's MIN_NUMEL), then ``@ w2``."""
    F = em.nn.functional
    em.manual_seed(0)
    w1 = em.nn.Parameter((em.randn(32, 512) * 0.1).to("cuda"))
    w2 = em.nn.Parameter((em.randn(512, 4) * 0.1).to("cuda"))
    opt = em.optim.AdamW([w1, w2], lr=1e-2)
    x = em.randn(32, 32).to("cuda")

    def step(x):
        loss = (F.dropout(F.gelu(x @ w1), 0.2) @ w2).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    fn = em.compile(step, mode=mode)
    losses = [float(fn(x).cpu()) for _ in range(steps)]
    return losses, [w.detach().cpu().numpy().copy() for w in (w1, w2)], fn


@pytest.mark.parametrize("mode", [None, "reduce-overhead"], ids=["default", "reduce-overhead"])
def test_backward_recomputes_the_mask_none_is_stored(emu_gpu, monkeypatch, mode):
    """The forward kernel reads the GEMM output and writes the dropout's output only; the
    backward's kernel recomputes GELU and the mask from the GEMM output (both hold the
    leaf); no value of the activations' size is written but those two and the gradients
    (the separate path writes the mask too). Bitwise equal to the separate path."""
    (got, ws, fn), (want, ws_sep, fn_sep) = _both(monkeypatch, lambda: _gelu_dropout(mode))
    assert got == want and len(set(got)) > 1
    for a, b in zip(ws, ws_sep):
        assert a.tobytes() == b.tobytes()
    prog, sep = _program(fn), _program(fn_sep)
    assert _leaf_kernels(prog) == 2 and PHILOX not in [n.op for n in prog.graph.nodes]
    fwd = next(n for n in prog.graph.nodes if has_philox_op(n.op))
    assert [o.shape for o in fwd.outs] == [(32, 512)]

    def written(p):
        return sum(o.numel() * o.dtype.itemsize for n in p.graph.nodes
                   if n.op.name in ("philox", "fused") for o in n.outs)
    assert written(sep) - written(prog) == 32 * 512 * 4      # the float32 mask


def test_switch_keeps_the_separate_path_and_cpu_graphs_unchanged(fake_cuda, monkeypatch):
    """Without the GPU's capabilities nothing changes: the draw stays a host ``random``
    node, fused or not."""
    from ember.graph.trace import RANDOM
    for enabled in (True, False):
        monkeypatch.setattr(fuse_philox, "ENABLED", enabled)
        em.manual_seed(0)
        fn = em.compile(lambda x: em.nn.functional.dropout(x, 0.5))
        x = em.ones(8, 8).to("cuda")
        fn(x)
        fn(x)
        ops = [n.op for n in _program(fn).graph.nodes]
        assert RANDOM in ops and fuse_philox.WORDS not in ops


def test_bench_census_counts_fewer_launches_and_bytes():
    """``bench/cuda_philox_fuse.py`` at a tiny size (stub modules, nothing runs): the fused
    step launches no draw kernel and moves fewer bytes."""
    import importlib.util
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "cuda_philox_fuse.py")
    spec = importlib.util.spec_from_file_location("cuda_philox_fuse", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.census(tokens=64, d=32, p=0.1, subprocess=True)
    fused, sep = res["fused"], res["separate"]
    assert sep["philox_launches"] >= 2 and fused["philox_launches"] == 0
    assert fused["launches"] < sep["launches"] and fused["bytes"] < sep["bytes"]


def test_row_entry_takes_a_pre_broadcast_host_scalar_as_a_scalar():
    """The executor pre-broadcasts a 0-d host value (a draw's key words) to a kernel's
    output shape: beside a bias row the kernel keeps its row entry (the scalar bit set)."""
    from ember import dtypes as dt
    from ember.codegen.cuda_launch import row_plan
    from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec, Philox
    shape = (4, 8)
    leaf = Philox("bernoulli", Load(2), Load(3), 32, (0.5,))
    k = Kernel([InputSpec(dt.float32, (8, 1)), InputSpec(dt.float32, (0, 1))] +
               [InputSpec(dt.int64, (0, 0))] * 2, OutSpec(dt.float32, shape),
               (Load(0) + Load(1)) * leaf, "rowk")
    words = [np.broadcast_to(np.array(v, np.int64), shape) for v in (5, 9)]
    x, b = np.zeros(shape, np.float32), np.zeros((1, 8), np.float32)
    name, _g, _b, args, _o = row_plan(k, [x, b] + words, shape, np)
    assert name == "rowk_r" and int(args[-3]) & 0b1100 == 0b1100


def _saved_bytes(e) -> int:
    """Bytes of the values a compiled model's forward graph saves for its backward graph."""
    return sum(v.numel() * v.dtype.itemsize for v in e.program.graph.outputs[e.joint.n_fwd:])


def redraw_runs(monkeypatch, factory=_mlp_dropout) -> tuple:
    """The dropout model's ``reduce-overhead`` runs (outputs, gradients) and compiled entry,
    with the draws' keys saved, then with their masks saved; asserts the two runs' values
    are the same bits (also used by the GPU test)."""
    import sys
    from test_cuda_graphs import _compiled_fn
    redraw = sys.modules["ember.graph.passes.philox"]
    runs = []
    for on in (True, False):
        monkeypatch.setattr(redraw, "REDRAW", on)
        outs, cm = _model_runs("reduce-overhead", steps=7, factory=factory)
        runs.append((outs, [e for e in _compiled_fn(cm)._cache.values()
                            if e.program is not None][-1]))
    for (y0, g0), (y1, g1) in zip(runs[0][0], runs[1][0]):
        assert y0.tobytes() == y1.tobytes() and g0.tobytes() == g1.tobytes()
    return tuple(runs)


def test_forward_graph_saves_the_draws_key_not_its_mask(emu_gpu, monkeypatch):
    """A compiled model's forward graph saves the dropout's (seed, offset) row, not its
    mask (``philox.redraw_saved``): both graphs' kernels compute the draw (Philox leaves, no
    ``philox`` node left), outputs and gradients bit for bit those of the graphs that save
    the mask (``EMBER_PHILOX_REDRAW=0``; that path equals the separate kernel's: above),
    by the mask's bytes fewer saved; under ``reduce-overhead`` both graphs are captured
    and replayed (the default mode's numbers: test_cuda_philox_graphs.py)."""
    (got, e), (want, e_saved) = redraw_runs(monkeypatch)
    assert not np.array_equal(got[-1][0], got[-2][0])
    bwd = e.joint.bwd_program
    for prog in (e.program, bwd):
        assert PHILOX not in [n.op for n in prog.graph.nodes] and _leaf_kernels(prog) >= 1
    assert (1, 2) in [v.shape for v in bwd.graph.inputs]       # the key row
    assert PHILOX in [n.op for n in e_saved.program.graph.nodes]
    mask = 6 * 16 * 4                                           # the float32 (6, 16) mask
    assert _saved_bytes(e_saved) - _saved_bytes(e) == mask - 16
    fwd_g, bwd_g = e.program.cuda_graph, bwd.cuda_graph
    assert fwd_g.failed is None and bwd_g.failed is None and fwd_g.replays >= 2
    assert bwd_g.captures == 1 and bwd_g.replays >= 1      # the key row refilled each replay


def test_saved_draws_share_one_key_op(emu_gpu, monkeypatch):
    """Two dropouts of a compiled model: one ``philox_key`` op reserves both draws in the
    forward and its (2, 2) rows are the one value saved for them (not a host step and a
    key a draw); outputs and gradients the mask-saving graphs' bit for bit."""
    def two_dropouts():
        nn = em.nn
        return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.25), nn.Linear(16, 16),
                             nn.Dropout(0.5), nn.Linear(16, 4))
    (got, e), (_, e_saved) = redraw_runs(monkeypatch, two_dropouts)
    assert [n.op for n in e.program.graph.nodes].count(PHILOX_KEY) == 1
    assert (2, 2) in [v.shape for v in e.joint.bwd_program.graph.inputs]
    assert _saved_bytes(e_saved) - _saved_bytes(e) == 2 * 6 * 16 * 4 - 32
    assert not np.array_equal(got[-1][0], got[-2][0])
