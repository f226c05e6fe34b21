"""``ember.compile(mode="reduce-overhead")`` conformance matrix, part two: compiled models
(forward and backward graphs), inputs (shapes, views, reuse, writes), memory, and the
emulated GPU's code path. Each case equals the default mode bit for bit and really
replayed; see ``test_cuda_graphs_matrix.py`` for the method.
"""
import gc

import numpy as np
import pytest

import ember as em

from _cg_matrix import (OPTS, STEPS, F, _bits, _bn_mlp, _both, _check, _compiled_fn, _data,
                        _encoder, _entries, _mlp, _model_data, _runner, _same, _small, _snap,
                        _step_fn, _train, _train_model, nn)
from test_cuda_graphs_matrix import _amp_run
from test_multi_launch import emu_gpu  # noqa: F401 - a fixture


# ---------------------------------------------------------------- (6) compiled models
@pytest.mark.parametrize("make", [_bn_mlp, _encoder], ids=["mlp-batchnorm", "encoder-layer"])
def test_a_compiled_model_with_eager_loss_backward_and_optimizer(fake_cuda, make):
    data, xe = _model_data(make)
    want = _train_model(None, make, data, xe)
    got = _train_model("reduce-overhead", make, data, xe)
    assert got[0] == want[0], "returned values differ"
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    es = _entries(got[2])
    # the training forward and backward (8 calls: traced, plain, staged, captured, then
    # replays; the backward captures once its forward has a graph); the eval-mode
    # no_grad evaluation (8 calls) and the train-mode no_grad call (once: traced) each
    # have their own program and runner
    train, ev, once = es
    assert train.joint is not None and ev.joint is None and once.joint is None
    fwd, bwd = train.program.cuda_graph, train.joint.bwd_program.cuda_graph
    ev = ev.program.cuda_graph
    assert fwd.failed is None and bwd.failed is None and ev.failed is None
    assert (fwd.replays, bwd.replays, ev.replays) == (4, 2, 4)
    assert once.program.cuda_graph.calls == 0


class _TwoOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = self.a(x)
        return self.b(h.relu()), h.mean()


def _use(mode, kind):
    """Eager loss/backward/AdamW around compiled models used in other ways: the input's
    gradient, a tuple of outputs, two compiled models chained, two backwards of one
    forward (``retain_graph``). Returns what each step left and the compiled functions."""
    em.manual_seed(0)
    if kind == "chained":
        mods = [nn.Sequential(nn.Linear(8, 16), nn.GELU()).to("cuda"),
                nn.Linear(16, 4).to("cuda")]
    else:
        mods = [(_TwoOut() if kind == "tuple" else _mlp()).to("cuda")]
    cms = [em.compile(m, mode=mode) for m in mods]
    opt = OPTS["adamw"]([p for m in mods for p in m.parameters()])
    kept = []
    for x, y in _data(10):
        if kind == "input-grad":
            x = x.clone().requires_grad_()
        out = cms[0](x)
        if kind == "tuple":
            out, aux = out
            kept.append(aux)
        if kind == "chained":
            out = cms[1](out)
        loss = F.cross_entropy(out, y) + (aux if kind == "tuple" else 0)
        loss.backward(retain_graph=kind == "retain-graph")
        if kind == "retain-graph":
            (out.sum() * 0.1).backward()
        kept += [loss.detach(), x.grad]
        opt.step()
        opt.zero_grad()
    return [_bits(k) for k in kept], [_snap(nn.ModuleList(mods), opt)], [cm.forward for cm in cms]


@pytest.mark.parametrize("kind", ["input-grad", "tuple", "chained", "retain-graph"])
def test_compiled_models_used_other_ways(fake_cuda, kind):
    want, got = _use(None, kind), _use("reduce-overhead", kind)
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    for cf in got[2]:
        e = _entries(cf)[-1]
        fwd, bwd = e.program.cuda_graph, e.joint.bwd_program.cuda_graph
        assert fwd.failed is None and bwd.failed is None
        # 10 calls: traced, plain, staged, captured, 6 replays; the backward's (twice a
        # step with retain_graph) start once its forward has a graph
        assert (fwd.replays, bwd.replays) == (6, 11 if kind == "retain-graph" else 4)


# ---------------------------------------------------------------- (7) inputs
def test_a_new_input_shape_is_a_new_program_with_its_own_runner(fake_cuda):
    data = _data(6) + _data(6, (4, 8), seed=5) + _data(3, seed=6)
    runs = _both(opt="adamw", step=_step_fn(True, "several"), data=data)
    want, got = runs
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    es = _entries(got[2])
    assert len(es) == 2
    a, b = (e.program.cuda_graph for e in es)
    assert a is not b and a.failed is None and b.failed is None
    # 6 + 3 calls of the first shape: untraced, traced, plain, staged, captured, 4 replays;
    # 6 of the second: traced, plain, staged, captured, 2 replays
    assert (a.replays, b.replays) == (4, 2)


def test_the_same_input_tensor_every_call_written_in_place_between_calls(fake_cuda):
    src = _data(STEPS)
    x, y = (em.zeros_like(t) for t in src[0])

    def feed(i, model):
        if i + 1 < STEPS:
            x.copy_(src[i + 1][0])
            y.copy_(src[i + 1][1])
    x.copy_(src[0][0])
    y.copy_(src[0][1])
    want = _train(None, opt="adam", step=_step_fn(False, "loss"), data=[(x, y)] * STEPS,
                  between=feed)
    x.copy_(src[0][0])
    y.copy_(src[0][1])
    got = _train("reduce-overhead", opt="adam", step=_step_fn(False, "loss"),
                 data=[(x, y)] * STEPS, between=feed)
    _check((want, got), replays=2)
    assert len(set(want[0])) == STEPS           # every call saw its new contents


@pytest.mark.parametrize("view", ["transposed", "strided", "offset"])
def test_non_contiguous_input_views(fake_cuda, view):
    # each call's batch is a view of one dataset tensor (a view of a different base
    # each call would retrace in every mode: the guards check a view argument's base)
    rng = np.random.default_rng(4)
    base = em.tensor(rng.standard_normal((STEPS * 6 + 2, 48)).astype(np.float32)).to("cuda")
    pick = {"transposed": lambda i: base[:, 6 * i:6 * i + 6].t()[:, :8],
            "strided": lambda i: base[6 * i:6 * i + 6, ::2][:, :8],
            "offset": lambda i: base[6 * i + 1:6 * i + 7, 3:11]}[view]
    data = [(pick(i), y) for i, (_, y) in enumerate(_data(STEPS))]
    assert all(not x.is_contiguous() and x.shape == (6, 8) for x, _ in data)
    g = _check(_both(opt="sgd-momentum", step=_step_fn(True, "several"), data=data),
               replays=2)
    assert g.captures == 1 and g.static[0] is not None      # copied into the graph's input


def test_in_place_writes_into_arguments_and_closure_tensors(fake_cuda):
    # arguments are copied into the graph's inputs: their writes are copied back; a
    # tensor the function reaches (a metric) is read and updated in place
    def run(mode):
        em.manual_seed(0)
        model = _mlp().to("cuda")
        opt = OPTS["adam"](model.parameters())
        total = em.zeros((), device="cuda")

        def step(x, y, acc):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            acc.add_(loss.detach())
            total.add_(loss.detach() * 2)
            x.mul_(2)
            return loss
        fn = em.compile(step, mode=mode)
        acc = em.zeros((), device="cuda")
        data = _data(STEPS)
        kept = [fn(x, y, acc) for x, y in data]
        return [_bits(r) for r in kept], _bits((acc, total, [x for x, _ in data])), \
            _snap(model, opt), fn
    want, got = run(None), run("reduce-overhead")
    assert got[:2] == want[:2]
    _same(got[2], want[2])
    assert _runner(got[3]).replays == 2


def test_gradient_accumulation_over_two_signatures(fake_cuda):
    # a compiled forward+backward, the optimizer eager every second call: the first call
    # after zero_grad(set_to_none=True) makes new gradients (one program: its graph's
    # buffers), the second accumulates into them in place (another program)
    def run(mode):
        em.manual_seed(0)
        model = _mlp().to("cuda")
        opt = OPTS["adamw"](model.parameters())

        def fwd_bwd(x, y):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss
        fn = em.compile(fwd_bwd, mode=mode)
        kept, snaps = [], []
        for i, (x, y) in enumerate(_data(16)):
            kept.append(fn(x, y))
            if i % 2:
                opt.step()
                opt.zero_grad(set_to_none=True)
            snaps.append(_snap(model, opt))
        return [_bits(r) for r in kept], snaps, fn
    want, got = run(None), run("reduce-overhead")
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    gs = [e.program.cuda_graph for e in _entries(got[2])]
    assert len(gs) == 2 and all(g.failed is None for g in gs)
    assert [g.replays for g in gs] == [4, 4]


def test_checkpoint_reload_and_in_place_parameter_edits_between_calls(fake_cuda):
    # load_state_dict copies into the same parameters (read in place: replays see it);
    # the optimizer's reload makes new state tensors (a guard: traced again, a new runner)
    def between(i, model, opt):
        if i == 7:
            opt.load_state_dict(opt.state_dict())
            model.load_state_dict({k: v * 0.5 for k, v in model.state_dict().items()})
        if i == 10:
            with em.no_grad():
                model[0].weight.mul_(0.5)

    def run(mode):
        em.manual_seed(0)
        model = _mlp().to("cuda")
        opt = OPTS["adamw"](model.parameters())
        fn = em.compile(_step_fn(False, "loss")(model, opt), mode=mode)
        kept, snaps = [], []
        for i, (x, y) in enumerate(_data(16)):
            kept.append(fn(x, y))
            snaps.append(_snap(model, opt))
            between(i, model, opt)
        return [_bits(r) for r in kept], snaps, fn
    want, got = run(None), run("reduce-overhead")
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    g = _runner(got[2])
    assert g.failed is None and g.replays == 4 and "opt.state" in str(got[2].explain())


# ---------------------------------------------------------------- (8) memory
def _allocated_per_step(mode, set_to_none, steps=15):
    """``memory_allocated()`` above the start's after each whole step (the returned
    tensors dropped), and the compiled step."""
    em.manual_seed(0)
    model = _mlp().to("cuda")
    opt = OPTS["adamw"](model.parameters())
    fn = em.compile(_step_fn(set_to_none, "several")(model, opt), mode=mode)
    data = _data(steps)
    gc.collect()
    base = em.cuda.memory_allocated()
    out = []
    for x, y in data:
        r = fn(x, y)
        del r
        out.append(em.cuda.memory_allocated() - base)
    return out, fn


@pytest.mark.parametrize("set_to_none", [False, True], ids=["zero", "none"])
def test_memory_allocated_equals_the_default_modes_and_stays_flat(fake_cuda, set_to_none):
    # the graph's buffers (static inputs, intermediates) are the private pool's, not live
    # tensors (PyTorch's too): memory_allocated is exactly the default mode's after every
    # step, and constant over the 10 replays
    want, _ = _allocated_per_step(None, set_to_none)
    got, fn = _allocated_per_step("reduce-overhead", set_to_none)
    assert got == want
    g = _runner(fn)
    assert g.replays == 10 and len(set(got[-10:])) == 1
    assert sum(s.nbytes for s in g.static if s is not None) > 0     # it has static buffers


def test_a_replayed_forwards_saved_values_count_until_its_backward(fake_cuda):
    # a compiled model: between forward and backward memory_allocated includes the saved
    # activations in both modes (a replay's are the graph's buffers, counted while held)
    def run(mode):
        em.manual_seed(0)
        model = _bn_mlp().to("cuda")
        cm = em.compile(model, mode=mode)
        opt = OPTS["adamw"](model.parameters())
        data = _data(14)
        gc.collect()
        base = em.cuda.memory_allocated()
        mid, after = [], []
        for x, y in data:
            loss = F.cross_entropy(cm(x), y)
            mid.append(em.cuda.memory_allocated() - base)
            loss.backward()
            opt.step()
            opt.zero_grad()
            del loss
            after.append(em.cuda.memory_allocated() - base)
        return mid, after, _compiled_fn(cm)
    want, got = run(None), run("reduce-overhead")
    assert got[:2] == want[:2]
    assert got[0][-1] > got[1][-1]          # the saved values, counted mid-step
    e = _entries(got[2])[-1]
    assert e.program.cuda_graph.replays == 10 and e.joint.bwd_program.cuda_graph.replays == 8
    assert len(set(got[0][-10:])) == 1 and len(set(got[1][-10:])) == 1


# ---------------------------------------------------------------- the GPU's code path
@pytest.mark.parametrize("opt", ["sgd-momentum", "adamw"])
def test_emulated_gpu_step_with_clipping_and_an_lr_schedule(emu_gpu, opt):
    # generated kernels run by the emulator, multi-tensor launches, AdamW's step counts
    # as host steps uploaded at every replay
    def make(model, o):
        def step(x, y):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            o.step()
            o.zero_grad(set_to_none=True)
            return loss
        return step

    def sched(o):
        return em.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.7)
    runs = _both(make=_small, opt=opt, step=make, sched=sched, steps=6)
    g = _check(runs, replays=1)
    assert g.captures == 1 and (g.p._hosting or opt != "adamw")
    assert len({s["lr"][0] for s in runs[1][1]}) == 6


def test_emulated_gpu_compiled_model(emu_gpu):
    data, xe = _data(8), _data(1, seed=7)[0][0]
    want = _train_model(None, _small, data, xe, switch_at=())
    got = _train_model("reduce-overhead", _small, data, xe, switch_at=())
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    train = _entries(got[2])[0]
    assert (train.program.cuda_graph.replays, train.joint.bwd_program.cuda_graph.replays) \
        == (4, 2)


def test_emulated_gpu_autocast_with_a_grad_scaler(emu_gpu):
    # float16 generated kernels; the overflowing batch's step skipped in both modes
    want = _amp_run(None, False, make=_small)
    got = _amp_run("reduce-overhead", False, make=_small)
    assert [s["scale"] for s in got[1]] == [s["scale"] for s in want[1]]
    _check((want, got), replays=4)
