"""ember.amp.GradScaler: PyTorch's scale sequence, skipped steps, unscale_, state dicts and
the skip report (which gradient overflowed, and the op and line with anomaly mode)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.amp.grad_scaler import GradScaler

INF = float("inf")


def _reference_scales(found, init, growth, backoff, interval):
    """The documented rule (torch._amp_update_scale_), written out on its own, in float32."""
    scale, tracker, out = np.float32(init), 0, []
    for bad in found:
        if bad:
            scale, tracker = np.float32(scale * np.float32(backoff)), 0
        else:
            tracker += 1
            if tracker == interval:
                grown = np.float32(np.float64(scale) * growth)
                scale = grown if np.isfinite(grown) else scale
                tracker = 0
        out.append(float(scale))
    return out


def _ember_scales(found, mag=1.0, **kw):
    """Scales after each update() over a run whose gradients hold inf where ``found``."""
    w = nn.Parameter(em.ones(3))
    opt = optim.SGD([w], lr=0.0)
    scaler = GradScaler("cpu", **kw)
    out = []
    for bad in found:
        x = em.tensor([1.0, INF if bad == "inf" else math.nan if bad else 2.0, 3.0]) * mag
        opt.zero_grad()
        scaler.scale((w * x).sum()).backward()
        scaler.step(opt)
        scaler.update()
        out.append(scaler.get_scale())
    return out, scaler


RUN = [0, 0, "inf", 0, 0, 0, 0, "nan", "inf", 0, 0, 0, 0, 0, 0, 0, 0]
KW = dict(init_scale=2.0**4, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)


def test_scale_sequence_follows_the_rule():
    got, _ = _ember_scales(RUN, **KW)
    assert got == _reference_scales([bool(b) for b in RUN], 2.0**4, 2.0, 0.5, 3)
    assert got[:3] == [16.0, 16.0, 8.0] and got[5] == 16.0   # grew after 3 clean steps


def test_scale_sequence_equals_pytorch():
    torch = pytest.importorskip("torch")
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", **KW)
    want = []
    for bad in RUN:
        x = torch.tensor([1.0, INF if bad == "inf" else math.nan if bad else 2.0, 3.0])
        opt.zero_grad()
        scaler.scale((w * x).sum()).backward()
        scaler.step(opt)
        scaler.update()
        want.append(scaler.get_scale())
    got, ours = _ember_scales(RUN, **KW)
    assert got == want
    assert ours.state_dict() == scaler.state_dict()


def test_growth_that_overflows_float32_keeps_the_scale():
    got, _ = _ember_scales([0, 0], mag=1e-30, init_scale=3.0e38, growth_interval=1)
    assert got == [float(np.float32(3.0e38))] * 2


def test_odd_factors_round_in_float32():
    kw = dict(init_scale=1000.0, growth_factor=1.3, backoff_factor=0.3, growth_interval=1)
    flags = [0, 1, 0, 0, 1, 1, 0]
    got, _ = _ember_scales(flags, **kw)
    assert got == _reference_scales(flags, 1000.0, 1.3, 0.3, 1)


def _adam_setup():
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    opt = optim.Adam(model.named_parameters(), lr=1e-2)
    return model, opt


def _snapshot(model, opt):
    params = [p.detach().numpy().copy() for p in model.parameters()]
    st = {id(p): {k: (v.numpy().copy() if hasattr(v, "numpy") else v) for k, v in s.items()}
          for p, s in opt.state.items()}
    return params, st


def _iteration(model, opt, scaler, x):
    opt.zero_grad()
    scaler.scale(model(x).pow(2).mean()).backward()
    scaler.step(opt)
    scaler.update()


@pytest.mark.parametrize("warm", [0, 2])
def test_skipped_step_leaves_params_and_optimizer_state_untouched(warm):
    model, opt = _adam_setup()
    scaler = GradScaler("cpu")
    x = em.randn(5, 4)
    for _ in range(warm):
        _iteration(model, opt, scaler, x)
    before = _snapshot(model, opt)
    bad = x.clone()
    bad[0, 0] = INF
    _iteration(model, opt, scaler, bad)
    after = _snapshot(model, opt)
    for a, b in zip(before[0], after[0]):
        assert a.tobytes() == b.tobytes()
    assert before[1].keys() == after[1].keys() and len(after[1]) == (4 if warm else 0)
    for k in before[1]:
        for name, v in before[1][k].items():   # step, exp_avg, exp_avg_sq bit for bit
            assert np.asarray(v).tobytes() == np.asarray(after[1][k][name]).tobytes(), name
    assert scaler.get_scale() == 2.0**15


def test_unscale_then_clip_grad_norm_equals_the_unscaled_run():
    model, opt = _adam_setup()
    ref, ref_opt = _adam_setup()
    x = em.randn(5, 4)
    scaler = GradScaler("cpu", init_scale=2.0**10)
    opt.zero_grad()
    scaler.scale(model(x).pow(2).mean()).backward()
    scaler.unscale_(opt)
    n = nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    ref_opt.zero_grad()
    ref(x).pow(2).mean().backward()
    n_ref = nn.utils.clip_grad_norm_(ref.parameters(), 0.1)
    assert float(n) == float(n_ref) and float(n) > 0.1   # clipping did act
    scaler.step(opt)    # does not unscale a second time
    scaler.update()
    ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.detach().numpy().tobytes() == q.detach().numpy().tobytes()


def test_once_per_iteration_errors():
    model, opt = _adam_setup()
    scaler = GradScaler("cpu")
    with pytest.raises(RuntimeError, match="scale"):
        scaler.step(opt)
    scaler.scale(model(em.randn(2, 4)).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    scaler.update()
    with pytest.raises(RuntimeError, match="no inf checks"):
        scaler.update()
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.step(opt, closure=lambda: 0.0)


def test_float16_gradients_are_refused():
    w = nn.Parameter(em.ones(3, dtype=em.float16))
    opt = optim.SGD([w], lr=0.1)
    scaler = GradScaler("cpu")
    scaler.scale(w.float().sum()).backward()
    with pytest.raises(ValueError, match="FP16 gradients"):
        scaler.step(opt)


def test_bfloat16_gradients_unscale_in_float32():
    w = nn.Parameter(em.ones(3, dtype=em.bfloat16))
    opt = optim.SGD([w], lr=1.0)
    scaler = GradScaler("cpu", init_scale=3.0)   # 1/3 is not a bfloat16 number
    scaler.scale((w.float() * em.tensor([1.0, 2.0, 5.0])).sum()).backward()
    scaler.unscale_(opt)
    want = (np.array([3.0, 6.0, 15.0], np.float32) * np.float32(1 / 3.0))
    assert w.grad.float().numpy().tolist() == want.astype(w.grad.numpy().dtype).astype(
        np.float32).tolist()


def test_state_dict_round_trip_continues_the_same_sequence():
    flags = [0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    full, _ = _ember_scales(flags, **KW)
    head, first = _ember_scales(flags[:5], **KW)
    sd = first.state_dict()
    assert sd == {"scale": head[-1], "growth_factor": 2.0, "backoff_factor": 0.5,
                  "growth_interval": 3, "_growth_tracker": 2}
    second = GradScaler("cpu", init_scale=1.0, growth_interval=77)
    second.load_state_dict(sd)
    assert second.state_dict() == sd
    w = nn.Parameter(em.ones(3))
    opt = optim.SGD([w], lr=0.0)
    tail = []
    for bad in flags[5:]:
        opt.zero_grad()
        second.scale((w * em.tensor([1.0, INF if bad else 2.0, 3.0])).sum()).backward()
        second.step(opt)
        second.update()
        tail.append(second.get_scale())
    assert head + tail == full


def test_disabled_scaler_is_a_pass_through():
    model, opt = _adam_setup()
    scaler = GradScaler("cpu", enabled=False)
    loss = model(em.randn(2, 4)).sum()
    assert scaler.scale(loss) is loss and not scaler.is_enabled()
    loss.backward()
    before = [p.detach().numpy().copy() for p in model.parameters()]
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert any((p.detach().numpy() != b).any() for p, b in zip(model.parameters(), before))
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    with pytest.raises(RuntimeError, match="empty"):
        GradScaler("cpu").load_state_dict({})


def test_cuda_scaler_without_cuda_warns_and_disables():
    with pytest.warns(UserWarning, match="CUDA is not available"):
        s = GradScaler()
    assert not s.is_enabled()


def test_scale_nested_outputs_and_bad_input():
    scaler = GradScaler("cpu", init_scale=4.0)
    a, b, c = em.tensor(1.0), em.tensor([2.0]), em.tensor(3.0)
    out = scaler.scale([a, (b, [c])])
    assert isinstance(out, list) and isinstance(out[1], tuple) and isinstance(out[1][1], list)
    assert [float(out[0]), float(out[1][0][0]), float(out[1][1][0])] == [4.0, 8.0, 12.0]
    with pytest.raises(ValueError, match="Tensor or an iterable"):
        scaler.scale([a, 3.0])


def test_update_new_scale_and_bad_factors():
    scaler = GradScaler("cpu")
    w = nn.Parameter(em.ones(2))
    scaler.scale(w.sum()).backward()
    scaler.update(128.0)
    assert scaler.get_scale() == 128.0
    scaler.update(em.tensor([64.0]))
    assert scaler.get_scale() == 64.0
    scaler.update(1024)
    assert scaler.get_scale() == 1024.0
    with pytest.raises(TypeError, match="got str"):
        scaler.update("2")
    with pytest.raises(ValueError, match="1-element"):
        scaler.update(em.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="growth factor"):
        GradScaler("cpu", growth_factor=1.0)
    with pytest.raises(ValueError, match="backoff factor"):
        GradScaler("cpu", backoff_factor=1.0)


# ---------------------------------------------------------------- the skip report
class _Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.small = nn.Linear(3, 1)
        self.big = nn.Linear(3, 1)
        with em.no_grad():
            self.big.weight.mul_(1e-10)

    def forward(self, x):
        a = self.small(x).sum()
        b = self.big(x * 1e34).sum()   # BIG-LINE: ~1e24 (x 2**16 is finite); weight grad: inf
        return a + b


def _overflowing_step(opt_named: bool):
    em.manual_seed(0)
    model = _Two()
    params = model.named_parameters() if opt_named else model.parameters()
    opt = optim.SGD(params, lr=0.1)
    scaler = GradScaler("cpu")   # 2**16 * 1e34 overflows float32
    before = [p.detach().numpy().copy() for p in model.parameters()]
    opt.zero_grad()
    loss = model(em.ones(2, 3))
    assert math.isfinite(float(loss))
    scaler.scale(loss).backward()
    scaler.step(opt)
    report = scaler.last_skip_report()
    scaler.update()
    for p, b in zip(model.parameters(), before):
        assert p.detach().numpy().tobytes() == b.tobytes()
    return model, scaler, report


def test_skip_report_names_the_overflowed_parameter():
    model, scaler, report = _overflowing_step(opt_named=True)
    assert report is not None and report.names == ["big.weight"]
    assert report.params[0].n_inf == 3 and report.params[0].shape == (1, 3)
    assert report.op is None and "set_detect_anomaly" in str(report)
    model2, scaler2, report2 = _overflowing_step(opt_named=False)
    assert report2.names == ["param_groups[0][2]"]
    assert scaler2.last_skip_report(model2).names == ["big.weight"]


def test_skip_report_with_anomaly_mode_names_the_op_and_line():
    em.autograd.set_detect_anomaly(True)
    try:
        model, scaler, report = _overflowing_step(opt_named=True)
    finally:
        em.autograd.set_detect_anomaly(False)
    assert report.names == ["big.weight"]
    assert report.phase == "backward" and report.op is not None
    assert "BIG-LINE" in report.where and "test_grad_scaler.py" in report.where
    assert "BIG-LINE" in str(report)


def test_anomaly_mode_raises_again_after_update():
    em.autograd.set_detect_anomaly(True)
    try:
        _overflowing_step(opt_named=True)   # recorded, not raised, inside the iteration
        w = nn.Parameter(em.ones(2))
        with pytest.raises(em.autograd.AnomalyError, match="NaN/Inf"):
            (w * 1e34 * 1e34).sum()
    finally:
        em.autograd.set_detect_anomaly(False)


def test_clean_steps_leave_no_report():
    model, opt = _adam_setup()
    scaler = GradScaler("cpu")
    _iteration(model, opt, scaler, em.randn(3, 4))
    assert scaler.last_skip_report() is None


def test_anomaly_blames_a_float16_sum_to_on_its_node():
    # the add's VJP returns finite float16 rows; reducing them to the bias' shape overflows
    b = nn.Parameter(em.zeros(1, dtype=em.float16))
    a = em.ones(4, dtype=em.float16)
    with em.autograd.detect_anomaly():
        y = a + b   # SUM-TO-LINE
        loss = (y.float() * 30000.0).sum()
        with pytest.raises(em.autograd.AnomalyError, match="SUM-TO-LINE"):
            loss.backward()


def test_skip_report_under_float16_autocast():
    em.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = optim.SGD(model.named_parameters(), lr=0.1)
    scaler = GradScaler("cpu")
    em.autograd.set_detect_anomaly(True)
    try:
        with em.autocast("cpu", dtype=em.float16):
            loss = model(em.full((4, 8), 60.0)).float().mean()   # FP16-LINE
        scaler.scale(loss).backward()
        assert scaler.step(opt) is None
    finally:
        em.autograd.set_detect_anomaly(False)
    report = scaler.last_skip_report()
    scaler.update()
    assert "2.bias" in report.names and all(p.dtype == "float32" for p in report.params)
    assert report.phase == "backward" and "FP16-LINE" in report.where


def test_training_with_injected_infs_follows_pytorch():
    torch = pytest.importorskip("torch")
    em.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    tmodel = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    with torch.no_grad():
        for p, q in zip(model.parameters(), tmodel.parameters()):
            q.copy_(torch.from_numpy(p.detach().numpy().copy()))
    opt, topt = optim.Adam(model.parameters(), lr=0.05), torch.optim.Adam(tmodel.parameters(),
                                                                          lr=0.05)
    kw = dict(init_scale=2.0**6, growth_interval=2)
    scaler, tscaler = GradScaler("cpu", **kw), torch.amp.GradScaler("cpu", **kw)
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    for it in range(8):
        xi = x.copy()
        if it in (0, 3, 4):
            xi[it % 6, 1] = np.inf if it != 4 else np.nan
        for m, o, s, t in ((model, opt, scaler, em.tensor(xi)),
                           (tmodel, topt, tscaler, torch.from_numpy(xi))):
            o.zero_grad()
            s.scale(m(t).pow(2).mean()).backward()
            s.unscale_(o)
            (nn.utils.clip_grad_norm_ if s is scaler else torch.nn.utils.clip_grad_norm_)(
                m.parameters(), 0.5)
            s.step(o)
            s.update()
        assert scaler.get_scale() == tscaler.get_scale(), it
        for p, q in zip(model.parameters(), tmodel.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                       atol=1e-6)
    assert [float(opt.state[p]["step"]) for p in model.parameters()] == \
        [float(topt.state[q]["step"]) for q in tmodel.parameters()] == [5.0] * 4


def _raises_anomaly():
    w = nn.Parameter(em.ones(2))
    with pytest.raises(em.autograd.AnomalyError, match="NaN/Inf"):
        (w * 1e34 * 1e34).sum()


def test_two_scalers_and_a_dropped_scaler_leave_anomaly_mode_raising():
    import gc
    em.autograd.set_detect_anomaly(True)
    try:
        a, b = GradScaler("cpu"), GradScaler("cpu")
        wa, wb = nn.Parameter(em.ones(2)), nn.Parameter(em.ones(2))
        oa, ob = optim.SGD([wa], lr=0.1), optim.SGD([wb], lr=0.1)
        a.scale((wa * 1e34).sum()).backward()      # TWO-LINE
        b.scale((wb * 2.0).sum()).backward()
        a.step(oa), b.step(ob)
        assert "TWO-LINE" in a.last_skip_report().where and b.last_skip_report() is None
        a.update()                                 # b still inside its iteration
        (wb * 1e34 * 1e34).sum()                   # recorded for b, not raised
        b.update()
        _raises_anomaly()
        dropped = GradScaler("cpu")
        dropped.scale(wa.sum())                    # armed, never updated
        del dropped
        gc.collect()
        _raises_anomaly()
    finally:
        em.autograd.set_detect_anomaly(False)


def test_compiled_scaled_backward_reads_the_updated_scale():
    em.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = optim.SGD(model.parameters(), lr=0.0)
    scaler = GradScaler("cpu", init_scale=8.0, growth_interval=1)

    def forward_backward(x):
        scaler.scale(model(x).sum()).backward()   # the first scale() runs while tracing

    step = em.compile(forward_backward)
    grads = []
    for bad in (0, 0, 1, 0):
        opt.zero_grad()
        x = em.ones(2, 3)
        if bad:
            x[0, 0] = INF
        step(x)
        grads.append(float(model.weight.grad[0, 1]))
        scaler.step(opt)
        scaler.update()
    assert grads == [16.0, 32.0, 64.0, 32.0]   # 2 * the scale of each iteration


def _scaled_run(compiled, found, kw):
    """Losses, scales, trackers, parameters and Adam steps over a run with inf/NaN inputs
    where ``found`` says, eager or as one compiled step."""
    em.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    opt = optim.AdamW(model.parameters(), lr=0.05)
    scaler = GradScaler("cpu", **kw)

    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach()
    run = em.compile(step) if compiled else step
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    out = {"scale": [], "tracker": [], "params": [], "steps": []}
    for it, bad in enumerate(found):
        xi = x + it
        if bad:
            xi[it % 6, 1] = np.inf if bad == "inf" else np.nan
        run(em.tensor(xi))
        out["scale"].append(scaler.get_scale())
        out["tracker"].append(scaler._get_growth_tracker())
        out["params"].append([p.detach().numpy().copy() for p in model.parameters()])
        out["steps"].append([float(opt.state[p]["step"]) if p in opt.state else 0.0
                             for p in model.parameters()])
    return out, run


def _one_graph(run):
    """One graph captured; the only break allowed: a traced first step (no optimizer state
    yet: with the graph cache off, ember.compile traces the first call)."""
    info = run.explain()
    assert len(info.captures) == 1
    assert all("before the optimizer has state" in reason for reason, _ in info.breaks)


def test_compiled_step_with_a_scaler_is_one_graph_and_follows_eager():
    # ember.compile keeps the inf check, the skip and the scale update in the graph: no
    # graph break (torch.compile breaks at scaler.step), the eager run's scales, trackers
    # and skipped steps
    found = [0, "inf", 0, 0, 0, "nan", 0, 0, 0, 0, 0]
    kw = dict(init_scale=2.0**6, growth_interval=3)
    eager, _ = _scaled_run(False, found, kw)
    comp, run = _scaled_run(True, found, kw)
    _one_graph(run)
    assert comp["scale"] == eager["scale"] == _reference_scales(
        [bool(b) for b in found], 2.0**6, 2.0, 0.5, 3)
    assert comp["tracker"] == eager["tracker"] == [1, 0, 1, 2, 0, 0, 1, 2, 0, 1, 2]
    assert comp["steps"] == eager["steps"]
    for k, bad in enumerate(found):
        for a, b in zip(comp["params"][k], eager["params"][k]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        if bad:     # a skipped step leaves the parameters bit for bit
            for a, b in zip(comp["params"][k], comp["params"][k - 1]):
                assert a.tobytes() == b.tobytes()


def test_compiled_skip_keeps_optimizer_state_bitwise():
    model, opt = _adam_setup()
    scaler = GradScaler("cpu", init_scale=2.0**8)

    def step(x):
        _iteration(model, opt, scaler, x)
    run = em.compile(step)
    x = em.randn(5, 4)
    for _ in range(3):
        run(x)
    before = _snapshot(model, opt)
    bad = x.clone()
    bad[0, 0] = INF
    run(bad)
    after = _snapshot(model, opt)
    _one_graph(run)
    for a, b in zip(before[0], after[0]):
        assert a.tobytes() == b.tobytes()
    for k in before[1]:
        for name, v in before[1][k].items():
            assert np.asarray(v).tobytes() == np.asarray(after[1][k][name]).tobytes(), name
    assert scaler.get_scale() == 2.0**7 and scaler._get_growth_tracker() == 0
    run(x)                  # and the next clean step updates again
    assert not np.array_equal(_snapshot(model, opt)[0][0], after[0][0])


def test_setters_reach_a_compiled_update():
    # the growth/backoff factors and the interval are tensors the graph reads at every
    # run: changing them after the capture changes what the compiled update does
    def run(compiled):
        w = nn.Parameter(em.ones(3))
        opt = optim.SGD([w], lr=0.0)
        scaler = GradScaler("cpu", init_scale=16.0, growth_interval=1)

        def step(x):
            opt.zero_grad()
            scaler.scale((w * x).sum()).backward()
            scaler.step(opt)
            scaler.update()
        f = em.compile(step) if compiled else step
        out = []
        for it in range(9):
            if it == 3:
                scaler.set_growth_factor(4.0)
            if it == 5:
                scaler.set_growth_interval(2)
                scaler.set_backoff_factor(0.25)
            f(em.tensor([1.0, INF if it == 7 else 2.0, 3.0]))
            out.append((scaler.get_scale(), scaler._get_growth_tracker()))
        return out, f
    eager, _ = run(False)
    comp, f = run(True)
    assert comp == eager == [(32.0, 0), (64.0, 0), (128.0, 0), (512.0, 0), (2048.0, 0),
                             (2048.0, 1), (8192.0, 0), (2048.0, 0), (2048.0, 1)]
    info = f.explain()      # the first call's graph (no .grad yet), then one for the rest
    assert not info.breaks and len(info.captures) == 2
