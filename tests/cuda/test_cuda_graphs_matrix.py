"""``ember.compile(mode="reduce-overhead")``: a conformance matrix on the CUDA stand-in.

Each case trains the same model twice from the same seed on the same new batches, once
compiled in the default mode and once with ``mode="reduce-overhead"`` (from a program's
third call its device steps replay as a recorded CUDA graph, :mod:`ember.graph.cuda_graphs`),
and asserts that every step left the same bits behind: returned values (kept until the end,
so a later replay must not have overwritten them), losses, parameters, gradients, optimizer
state and buffers. And that the runner really replayed (``replays > 0``), or for a case that
cannot be a graph, that it stayed plain and ``explain()`` says why. Here: whole training
steps, normalisation layers, LR schedules, clipping, mixed precision, and what stays
plain; ``test_cuda_graphs_matrix_models.py``: compiled models, inputs, memory and the
emulated GPU's code path; ``bench/RESULTS.md`` ("CUDA graphs: conformance matrix"): one
line per case.
"""
import numpy as np
import pytest

import ember as em

from _cg_matrix import (OPTS, STEPS, F, _bits, _both, _check, _data, _entries, _mlp, _runner,
                        _same, _snap, _step_fn, _train, nn)


# ---------------------------------------------------------------- (1) whole steps
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
    assert _runner(fn).replays == 2


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


def test_two_param_groups_with_a_lambda_schedule(fake_cuda):
    # each group's lr is its own lifted host value
    def opt_for(ps):
        ps = list(ps)
        return em.optim.SGD([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.2}], lr=0.05,
                            momentum=0.9)

    def sched(o):
        return em.optim.lr_scheduler.LambdaLR(o, [lambda k: 1 / (k + 1), lambda k: 0.9 ** k])
    runs = _both(opt=opt_for, step=_step_fn(True, "several"), sched=sched)
    _check(runs, replays=2)
    assert len({tuple(s["lr"]) for s in runs[1][1]}) == STEPS


def test_a_compiled_optimizer_step_alone(fake_cuda):
    # torch.compile(opt.step)'s pattern: forward and backward eager, each call's
    # gradients new arrays (zero_grad(set_to_none=True)): copied into the graph's inputs
    def run(mode):
        em.manual_seed(0)
        model = _mlp().to("cuda")
        opt = OPTS["adamw"](model.parameters())
        step = em.compile(opt.step, mode=mode)
        snaps = []
        for x, y in _data(STEPS + 1):
            F.cross_entropy(model(x), y).backward()
            step()
            opt.zero_grad(set_to_none=True)
            snaps.append(_snap(model, opt))
        return snaps, step
    want, got = run(None), run("reduce-overhead")
    for g, w in zip(got[0], want[0]):
        _same(g, w)
    g = _runner(got[1])
    assert g.failed is None and g.captures == 1 and g.replays == STEPS + 1 - 5


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
def _amp_run(mode, whole: bool, inf_at=5, steps=8, make=_mlp, capturable=None):
    """float16 autocast with a GradScaler (growth every 3 clean steps); batch ``inf_at``
    overflows (its step is skipped, the scale backs off). ``whole``: the scaler's step
    and update inside the compiled function too."""
    em.manual_seed(0)
    model = make().to("cuda")
    # NOTE: a whole step on the device needs its step counts there to skip in the graph
    opt = em.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1,
                         capturable=whole if capturable is None else capturable)
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
    g = _check((want, got), replays=4)     # traced, plain, staged, captured, 4 replays
    assert g.captures == 1


def test_a_grad_scalers_step_inside_the_function_is_one_graph(fake_cuda):
    # the inf check, the skip (where(found_inf, before, after) over parameters and Adam's
    # state) and the scale update are graph ops (PyTorch's .item() would break the graph):
    # the whole step replays as a CUDA graph; the overflowing step is skipped and the scale
    # backs off as eager's; the growth tracker is a 0-d tensor written in place
    want, got = _amp_run(None, True), _amp_run("reduce-overhead", True)
    scales = [s["scale"] for s in got[1]]
    assert scales == [4096.0, 4096.0, 8192.0, 8192.0, 8192.0, 4096.0, 4096.0, 4096.0]
    assert got[1][5]["param 0.weight"] == got[1][4]["param 0.weight"]      # skipped
    eager = _amp_run(None, False)
    assert [s["scale"] for s in eager[1]] == scales
    # the first call creates Adam's state (eager: where() can't undo a creation), then
    # traced, plain, staged, captured and 3 replays
    g = _check((want, got), replays=3)
    assert g.captures == 1 and len(_entries(got[2])) == 1
    assert [r for r, _ in got[2].explain().breaks] == [
        "GradScaler.step before the optimizer has state (its first step creates it; "
        "where() can't undo that) can't be captured in a graph"]


def test_a_grad_scalers_step_with_cpu_step_counts_breaks_and_says_why(fake_cuda):
    # without capturable=True Adam's step counts live on the CPU: skipping them in the
    # graph would need found_inf on the host; the step runs eagerly, the same numbers
    with pytest.warns(UserWarning, match="capturable=True"):
        got = _amp_run(None, True, capturable=False)
    want = _amp_run(None, False)
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        _same(g, w)
    assert "state['step'] is on cpu" in str(got[2].explain())


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
    from ember.device.base import get_backend
    if get_backend(em.device("cuda")).has("cuda_kernels"):
        # NOTE: a real GPU generates the draws on the device (passes/philox.py): captured
        assert g.failed is None and g.captures == 1 and g.replays >= 1
        return
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
