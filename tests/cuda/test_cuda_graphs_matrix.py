"""``ember.compile(mode="reduce-overhead")``: a conformance matrix on the CUDA stand-in.

Each case trains the same model twice from the same seed on the same new batches, once
compiled in the default mode and once with ``mode="reduce-overhead"`` (from a program's
third call its device steps replay as a recorded CUDA graph, :mod:`ember.graph.cuda_graphs`),
and asserts that every step left the same bits behind: returned values (kept until the end,
so a later replay must not have overwritten them), losses, parameters, gradients, optimizer
state and buffers. And that the runner really replayed (``replays > 0``), or for a case that
cannot be a graph, that it stayed plain and ``explain()`` says why. ``emu_gpu`` variants run
the generated kernels on the CUDA emulator with the optimizer's step counts as host steps
(a GPU's code path); they are kept small.
"""
import gc

import numpy as np
import pytest

import ember as em
from ember.graph import cuda_graphs

from test_multi_launch import emu_gpu  # noqa: F401 - a fixture

F = em.nn.functional
nn = em.nn
STEPS = 7


# ---------------------------------------------------------------- helpers
def _np(t):
    return None if t is None else t.detach().cpu().numpy().copy()


def _bits(x):
    """A tensor (or nested tuple of them, or a number) as comparable bits."""
    if isinstance(x, (tuple, list)):
        return tuple(_bits(v) for v in x)
    if isinstance(x, em.Tensor):
        a = _np(x)
        return ("tensor", a.dtype.str, a.shape, a.tobytes())
    return x


def _snap(model, opt) -> dict:
    """Everything a step leaves behind, by name: parameters, gradients, buffers and the
    optimizer's state (tensors as bits)."""
    out = {}
    idx = {}
    for i, (n, p) in enumerate(model.named_parameters()):
        idx[id(p)] = i
        out["param " + n] = _bits(p)
        out["grad " + n] = None if p.grad is None else _bits(p.grad)
    for n, b in model.named_buffers():
        out["buffer " + n] = _bits(b)
    if opt is not None:
        for p, st in opt.state.items():
            for k, v in st.items():
                out[f"opt {idx[id(p)]} {k}"] = _bits(v)
        out["lr"] = [g["lr"] for g in opt.param_groups]
    return out


def _same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    bad = [k for k in want if got[k] != want[k]]
    assert not bad, f"differs from the default mode: {bad}"


def _entries(fn):
    return [e for e in fn._cache.values() if not e.eager and e.program is not None]


def _runner(fn):
    return _entries(fn)[-1].program.cuda_graph


def _data(n, shape=(6, 8), classes=4, seed=1):
    rng = np.random.default_rng(seed)
    return [(em.tensor(rng.standard_normal(shape).astype(np.float32)).to("cuda"),
             em.tensor(rng.integers(0, classes, shape[0])).to("cuda")) for _ in range(n)]


def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


OPTS = {
    "sgd-momentum": lambda ps: em.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": lambda ps: em.optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: em.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
}


def _train(mode, make=_mlp, opt="adamw", step=None, data=None, between=None,
           steps=STEPS, sched=None):
    """Train ``make()`` with ``step(model, opt)(x, y)`` compiled in ``mode``: per call,
    the returned value (kept: converted at the end) and a snapshot; the compiled step."""
    em.manual_seed(0)
    model = make().to("cuda")
    o = OPTS[opt](model.parameters())
    s = sched(o) if sched is not None else None
    fn = em.compile(step(model, o), mode=mode)
    kept, snaps = [], []
    for i, (x, y) in enumerate(data or _data(steps)):
        kept.append(fn(x, y))
        snaps.append(_snap(model, o))
        if s is not None:
            s.step()
        if between is not None:
            between(i, model)
    return [_bits(r) for r in kept], snaps, fn


def _check(mode_runs, replays=1):
    """Both runs equal bit for bit; the reduce-overhead run's runner replayed."""
    want, got = mode_runs
    assert got[0] == want[0], "returned values differ"
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    assert _runner(want[2]) is None
    g = _runner(got[2])
    assert g.failed is None and g.replays >= replays, (g.failed, g.replays)
    return g


def _both(**kw):
    return _train(None, **kw), _train("reduce-overhead", **kw)


# ---------------------------------------------------------------- (1) whole steps
def _step_fn(set_to_none, returns, loss_fn=F.cross_entropy):
    def make(model, opt):
        def step(x, y):
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=set_to_none)
            if returns == "loss":
                return loss
            return loss.detach(), out.detach(), (out.argmax(-1) == y).sum()
        return step
    return make


@pytest.mark.parametrize("returns", ["loss", "several"])
@pytest.mark.parametrize("set_to_none", [False, True], ids=["zero", "none"])
@pytest.mark.parametrize("opt", list(OPTS))
def test_whole_steps_replay_with_the_default_modes_bits(fake_cuda, opt, set_to_none,
                                                        returns):
    # calls: (Adam: untraced), traced, plain, staged, captured, replays
    _check(_both(opt=opt, step=_step_fn(set_to_none, returns)), replays=2)


def test_zero_grad_first_new_gradients_are_the_graphs_buffers(fake_cuda):
    # zero_grad(set_to_none=True) at the start: each call's .grad is a new graph output
    def make(model, opt):
        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return step
    got = _check(_both(opt="sgd-momentum", step=make), replays=2)
    assert got.captures == 1


def test_fresh_batches_made_inline_at_a_freed_batchs_address_are_staged(fake_cuda):
    # each call's batch is a temporary (freed after the call): a new one may land at the
    # last one's address, which must not make it an input read in place (it would move
    # later, dropping the graph; the runner holds the first call's arrays till it stages)
    rng = np.random.default_rng(3)
    host = [(rng.standard_normal((6, 8)).astype(np.float32), rng.integers(0, 4, 6))
            for _ in range(9)]

    def run(mode):
        em.manual_seed(0)
        model = _mlp().to("cuda")
        opt = OPTS["sgd-momentum"](model.parameters())
        fn = em.compile(_step_fn(False, "loss")(model, opt), mode=mode)
        losses = [_bits(fn(em.tensor(x).to("cuda"), em.tensor(y).to("cuda")))
                  for x, y in host]
        return losses, _snap(model, opt), fn
    want, got = run(None), run("reduce-overhead")
    assert got[0] == want[0]
    _same(got[1], want[1])
    g = _runner(got[2])
    assert g.failed is None and g.captures == 1 and g.replays == len(host) - 5


# ---------------------------------------------------------------- (2) normalisation layers
def _cnn_bn():
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 4))


def _cnn_gn():
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU(),
                         nn.Flatten(), nn.LayerNorm(4 * 6 * 6), nn.Linear(4 * 6 * 6, 4))


@pytest.mark.parametrize("make", [_cnn_bn, _cnn_gn], ids=["batchnorm2d", "groupnorm-layernorm"])
def test_cnns_with_normalisation_layers(fake_cuda, make):
    # BatchNorm2d's running statistics (and its batch count) are written back every call
    g = _check(_both(make=make, opt="sgd-momentum", step=_step_fn(True, "several"),
                     data=_data(STEPS, (4, 2, 6, 6))), replays=2)
    assert g.captures == 1


def test_batchnorm_running_stats_change_every_replay(fake_cuda):
    _, snaps, fn = _train("reduce-overhead", make=_cnn_bn, opt="adam",
                          step=_step_fn(True, "loss"), data=_data(STEPS, (4, 2, 6, 6)))
    means = [s["buffer 1.running_mean"] for s in snaps]
    assert len(set(means)) == STEPS and snaps[-1]["buffer 1.num_batches_tracked"] == \
        _bits(em.tensor(STEPS))
    assert _runner(fn).replays >= 2


# ---------------------------------------------------------------- (3) LR schedules
@pytest.mark.parametrize("opt", ["sgd-momentum", "adamw"])
def test_an_lr_scheduler_stepped_between_calls(fake_cuda, opt):
    def sched(o):
        return em.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
    runs = _both(opt=opt, step=_step_fn(False, "loss"), sched=sched)
    g = _check(runs, replays=2)
    lrs = [s["lr"][0] for s in runs[1][1]]
    assert len(set(lrs)) == STEPS          # every replay used its own lr ...
    assert len(_entries(runs[1][2])) == 1 and g.captures == 1   # ... with no recompile


# ---------------------------------------------------------------- (4) gradient clipping
def test_clip_grad_norm_inside_the_step(fake_cuda):
    def make(model, opt):
        def step(x, y):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            opt.step()
            opt.zero_grad()
            return loss.detach(), norm
        return step
    runs = _both(opt="adamw", step=make)
    _check(runs, replays=2)
    assert all(float(np.frombuffer(r[1][3], np.float32)[0]) > 0.05 for r in runs[1][0])


# ---------------------------------------------------------------- (5) mixed precision
def _amp_run(mode, whole: bool, inf_at=5, steps=8):
    """float16 autocast with a GradScaler (growth every 3 clean steps); batch ``inf_at``
    overflows (its step is skipped, the scale backs off). ``whole``: the scaler's step
    and update inside the compiled function too."""
    em.manual_seed(0)
    model = _mlp().to("cuda")
    opt = OPTS["adamw"](model.parameters())
    scaler = em.amp.GradScaler("cuda", init_scale=2.0**12, growth_interval=3)

    def fwd_bwd(x, y):
        with em.autocast("cuda", dtype=em.float16):
            out = model(x)
            loss = F.cross_entropy(out, y)
        scaler.scale(loss).backward()
        return loss.detach(), out.detach()

    def step(x, y):
        res = fwd_bwd(x, y)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return res
    fn = em.compile(step if whole else fwd_bwd, mode=mode)
    data = _data(steps)
    data[inf_at][0][0, 0] = 1e30             # float16's inf in the logits
    kept, snaps = [], []
    for x, y in data:
        kept.append(fn(x, y))
        if not whole:
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        snaps.append(dict(_snap(model, opt), scale=scaler.get_scale()))
    return [_bits(r) for r in kept], snaps, fn


def test_autocast_float16_with_a_grad_scaler_outside_the_graph_replays(fake_cuda):
    # forward, scale and backward compiled; the scaler's unscale/inf check/step eager:
    # the scale is lifted as a graph input read in place, so growth and back-off reach
    # every replay; the overflowing step is skipped exactly as in the default mode
    want, got = _amp_run(None, False), _amp_run("reduce-overhead", False)
    scales = [s["scale"] for s in got[1]]
    assert scales == [4096.0, 4096.0, 8192.0, 8192.0, 8192.0, 4096.0, 4096.0, 4096.0]
    assert got[1][5]["param 0.weight"] == got[1][4]["param 0.weight"]      # skipped
    g = _check((want, got), replays=3)
    assert g.captures == 1


def test_a_grad_scalers_step_inside_the_function_is_a_graph_break(fake_cuda):
    # its inf check reads found_inf into Python to decide whether to step (PyTorch's
    # .item()): no graph, so no CUDA graph either; the function runs eagerly, as in the
    # default mode, and explain() says where
    with pytest.warns(UserWarning, match="graph break"):
        want = _amp_run(None, True)
    with pytest.warns(UserWarning, match="graph break"):
        got = _amp_run("reduce-overhead", True)
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    assert not _entries(got[2]) and all(e.eager for e in got[2]._cache.values())
    assert "graph break" in str(got[2].explain()) and "bool()" in str(got[2].explain())


# ---------------------------------------------------------------- (6) compiled models
def _bn_mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.GELU(), nn.Linear(16, 4))


def _encoder():
    return nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)


def _compiled_fn(cm):
    return cm.forward


def _train_model(mode, make, data, x_eval, switch_at=(4,)):
    """A compiled model, eager loss/backward/AdamW; after every step an evaluation under
    ``no_grad`` (its own forward-only program); at ``switch_at`` a ``model.eval()`` call
    (with grad: a forward and backward graph of its own) and back to ``train()``."""
    em.manual_seed(0)
    model = make().to("cuda")
    cm = em.compile(model, mode=mode)
    opt = OPTS["adamw"](model.parameters())
    kept, snaps = [], []
    for i, (x, y) in enumerate(data):
        out = cm(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        kept.append(loss.detach())
        with em.no_grad():
            kept.append(cm(x_eval))
        if i in switch_at:
            cm.eval()
            kept.append(cm(x_eval))
            cm.train()
        snaps.append(_snap(model, opt))
    return [_bits(r) for r in kept], snaps, _compiled_fn(cm)


def _model_data(make, n=8):
    if make is _encoder:
        rng = np.random.default_rng(2)
        data = [(em.tensor(rng.standard_normal((2, 5, 8)).astype(np.float32)).to("cuda"),
                 em.tensor(rng.integers(0, 8, (2, 5))).to("cuda")) for _ in range(n)]
        return data, em.tensor(rng.standard_normal((2, 5, 8)).astype(np.float32)).to("cuda")
    return _data(n), _data(1, seed=7)[0][0]


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
    # replays; the backward captures once its forward has a graph); the no_grad
    # evaluation (8 calls), and the eval-mode call with grad (once: traced) each have
    # their own program and runner
    train, ev, once = es
    assert train.joint is not None and ev.joint is None and once.joint is not None
    fwd, bwd = train.program.cuda_graph, train.joint.bwd_program.cuda_graph
    ev = ev.program.cuda_graph
    assert fwd.failed is None and bwd.failed is None and ev.failed is None
    assert (fwd.replays, bwd.replays, ev.replays) == (4, 2, 4)
    assert once.program.cuda_graph.calls == 0


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
    assert _runner(got[3]).replays >= 2


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
    assert len(gs) == 2 and all(g.failed is None and g.replays >= 3 for g in gs)


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
    assert g.failed is None and g.replays >= 3 and "opt.state" in str(got[2].explain())


# ---------------------------------------------------------------- what stays plain
def test_dropout_draws_keep_the_program_plain_and_explain_says_why(fake_cuda):
    def make():
        return nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.3), nn.Linear(16, 4))
    want = _train(None, make=make, opt="sgd-momentum", step=_step_fn(False, "loss"))
    got = _train("reduce-overhead", make=make, opt="sgd-momentum",
                 step=_step_fn(False, "loss"))
    assert got[0] == want[0]                 # the same fresh draws every call
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    g = _runner(got[2])
    assert g.failed is not None and "random" in g.failed and g.captures == 0
    assert "not replayed as a CUDA graph: it draws random numbers" in str(got[2].explain())


def test_a_host_read_inside_the_step_is_a_graph_break(fake_cuda):
    log = {None: [], "reduce-overhead": []}

    def make_for(mode):
        def make(model, opt):
            def step(x, y):
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                log[mode].append(loss.item())
                return loss
            return step
        return make
    with pytest.warns(UserWarning, match="graph break"):
        want = _train(None, opt="adam", step=make_for(None))
    with pytest.warns(UserWarning, match="graph break"):
        got = _train("reduce-overhead", opt="adam", step=make_for("reduce-overhead"))
    assert got[0] == want[0] and log[None] == log["reduce-overhead"]
    assert not _entries(got[2]) and "item() reads a traced tensor" in str(got[2].explain())


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
    assert e.program.cuda_graph.replays == 10 and e.joint.bwd_program.cuda_graph.replays >= 8
    assert len(set(got[0][-10:])) == 1 and len(set(got[1][-10:])) == 1


# ---------------------------------------------------------------- the GPU's code path
def _small():
    return nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 4))


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
    assert train.program.cuda_graph.replays >= 2 and \
        train.joint.bwd_program.cuda_graph.replays >= 1
