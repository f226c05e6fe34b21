"""A compiled GPU graph's CPU scalars run on the host (issue 21: host time).

An optimizer's step counts stay CPU tensors (as in PyTorch); a compiled step on a GPU once
ran each parameter's step-count chain (step + 1, Adam's bias corrections) as a 0-d CUDA
kernel, copying its input to the device and the new step back (a wait for the GPU).
Now ``fuse_cuda`` makes such groups :class:`HostFusedOp` (NumPy, eager's own kernels:
``ember/graph/passes/host_scalars.py``) and the executor computes CPU values before the
device steps and uploads those the device reads in one copy per dtype
(``ember/graph/executor.py``). Checked on the CPU stand-in given a GPU's capabilities.
"""
import numpy as np
import pytest

import ember as em
from ember.codegen import interp
from ember.codegen.ir import Const, InputSpec, Kernel, Load, OutSpec, call
from ember.graph.passes.host_scalars import HostFusedOp, batch_runner, host_runner
from ember.graph.passes.multi_launch import HostBatchOp


def _adam_chain():
    """Adam's step-count chain as one kernel: (step + 1, lr / (1 - b1**s), (1 - b2**s)**.5)."""
    f32, f64 = em.float32, em.float64
    step = call("add", Load(0), 1)
    s64 = call("cast", step, dtype=f64)
    size = call("div", Load(1), call("sub", 1, call("pow", Const(0.9, f64), s64)))
    bc2 = call("pow", call("sub", 1, call("pow", Const(0.999, f64), s64)), 0.5)
    return Kernel([InputSpec(f32, ()), InputSpec(f64, ())], OutSpec(f32, ()), step,
                  extra=((f64, size), (f64, bc2), (f64, call("neg", size))))


@pytest.mark.parametrize("step", [0.0, 1.0, 6.0, 1234.0])
def test_host_runner_is_the_numpy_reference_bit_for_bit(step):
    k = _adam_chain()
    args = (np.array(step, np.float32), np.array(3e-4, np.float64))
    want = interp.run_elementwise(k, args)
    got = host_runner(k, 4)(np, *args)
    assert len(got) == 4
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == () and g.tobytes() == w.tobytes()
    # eager's arithmetic on Python floats (AdamW's one-pass update): the same step size
    # (up to NumPy's pow, which may be SIMD code rather than libm's on some machines)
    assert float(got[1]) == pytest.approx(3e-4 / (1 - 0.9 ** (step + 1)), rel=1e-15)
    assert float(got[3]) == -float(got[1])


def test_batch_runner_is_each_members_host_runner_bit_for_bit():
    # one NumPy pass over every parameter's chain (multi_launch's HostBatchOp) gives each
    # parameter the bits its own chain gives (NumPy's SIMD loops included: same machine)
    k = _adam_chain()
    rng = np.random.default_rng(0)
    steps = np.concatenate([np.arange(0, 40), rng.integers(0, 10**6, 200)]).astype(np.float32)
    lrs = rng.uniform(1e-5, 1e-1, steps.size)
    args = [a for st, lr in zip(steps, lrs) for a in (np.array(st), np.array(lr))]
    got = batch_runner(k, 4, steps.size)(np, *args)
    one = host_runner(k, 4)
    assert len(got) == 4 * steps.size
    for i in range(steps.size):
        want = one(np, *args[2 * i:2 * i + 2])
        for g, w in zip(got[4 * i:4 * i + 4], want):
            assert g.dtype == w.dtype and g.shape == () and g.tobytes() == w.tobytes(), i
    got[0][()] = -1.0                                   # each output its own memory
    assert float(got[4]) == steps[1] + 1


def _gpu_like(fake_cuda, monkeypatch, kernels: bool):
    """The stand-in without host kernels (a GPU's pipeline); ``kernels``: with the
    ``cuda_kernels`` capability too, its CUDA modules stubbed (nothing runs)."""
    caps = fake_cuda.capabilities - {"host_kernels"}
    monkeypatch.setattr(fake_cuda, "capabilities", caps | ({"cuda_kernels"} if kernels
                                                           else set()))
    if kernels:
        from ember.codegen import cuda_cache

        class Stub:
            def get_function(self, name):
                return lambda grid, block, args, shared_mem=0, **k: None
        monkeypatch.setattr(cuda_cache, "module_loader", lambda source, name: Stub())


def _train(dev, steps=4, compiled=True, seed=0):
    em.manual_seed(seed)
    model = em.nn.Sequential(em.nn.Linear(8, 16), em.nn.Tanh(), em.nn.Linear(16, 3)).to(dev)
    opt = em.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = em.randn(32, 8).to(dev), em.randn(32, 3).to(dev)

    def step(x, y):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    fn = em.compile(step) if compiled else step
    for _ in range(steps):
        fn(x, y)
    return model, opt, fn


def _program(fn):
    return [e for e in fn._cache.values() if not e.eager and e.program is not None][-1].program


def test_compiled_adamw_on_a_gpu_like_device_matches_eager_with_host_steps(fake_cuda,
                                                                            monkeypatch):
    _gpu_like(fake_cuda, monkeypatch, kernels=False)
    want, wopt, _ = _train("cuda", compiled=False)
    got, gopt, fn = _train("cuda")
    # NOTE: eager's bias corrections are Python floats (libm's pow), the graph's NumPy's
    # (SIMD code on some machines): equal here, within float32 rounding anywhere
    for a, b in zip(got.parameters(), want.parameters()):
        np.testing.assert_allclose(a.detach().cpu().numpy(), b.detach().cpu().numpy(),
                                   rtol=1e-6, atol=1e-7)
    for p in gopt.state:
        st = gopt.state[p]["step"]
        assert st.device.type == "cpu" and float(st) == 4.0
    prog = _program(fn)
    up = prog._uploads
    assert prog._host and up.packed and not prog._host_inputs      # CPU values on host
    assert all(dev.shape == (len(vids),)
               for (_dt, vids, _s), dev in zip(up.packed, up.bufs))


def test_fuse_cuda_runs_step_count_chains_on_the_host(fake_cuda, monkeypatch):
    _gpu_like(fake_cuda, monkeypatch, kernels=True)
    model, opt, fn = _train("cuda", steps=3)
    graph = fn.graphs()[-1]
    hosted = [n for n in graph.nodes if isinstance(n.op, (HostFusedOp, HostBatchOp))]
    # one step-count chain per parameter, all in one host pass (multi_launch's
    # HostBatchOp), and the learning rate's 1 - lr * weight_decay
    chains = [n for n in hosted if "pow" in n.params["ops"]]
    assert len(chains) == 1 and isinstance(chains[0].op, HostBatchOp)
    assert len(chains[0].op.sizes) == len(list(model.parameters()))
    assert len(hosted) == 2
    for n in graph.nodes:               # no generated CUDA kernel writes a CPU value
        if hasattr(n.op, "module"):
            assert all(o.device.type == "cuda" for o in n.outs), n.op
    prog = _program(fn)
    assert {id(s) for s in prog._host} >= {id(s) for s, n in zip(prog.steps, graph.nodes)
                                           if isinstance(n.op, (HostFusedOp, HostBatchOp))}
    # a generated kernel reads a host scalar from the upload buffer, broadcast once to its
    # loop shape (its launcher passes it as is: no broadcast_to per launch); a multi-launch
    # node (passes/multi_launch.py) reads its other members' slots as they are (0-d: its
    # records hold pointers)
    pre = 0
    for s, n in zip(prog.steps, graph.nodes):
        if hasattr(n.op, "module"):
            multi = hasattr(n.op, "kernels")
            for j, (a, x) in enumerate(zip(s.args, n.inputs)):
                if x.device.type == "cpu":
                    v = prog._consts[a - prog._const_base]
                    assert v.shape in ((() if multi else None),
                                       tuple(n.op.kernel.out.shape)) and not any(v.strides)
                    pre += 1
    assert pre >= 3 * len(list(model.parameters()))       # AdamW: three scalars each
    # the step counts are real values (host steps ran; the stubbed kernels ran nothing)
    for p in opt.state:
        assert float(opt.state[p]["step"]) == 3.0


def test_uploads_follow_the_host_values_each_run(fake_cuda, monkeypatch):
    """A kernel reading a CPU scalar gets this run's value (the packed upload is refilled
    at every run, not frozen at the first)."""
    _gpu_like(fake_cuda, monkeypatch, kernels=False)
    w = em.ones(5, device="cuda")
    s = em.zeros((), dtype=em.float32)             # a CPU 0-d state, like a step count

    def f(w):
        s.add_(1)
        return w * (s * 2.0).to(em.float32)
    fn = em.compile(f)
    outs = [fn(w).cpu().numpy().copy() for _ in range(4)]
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(o, np.full(5, 2.0 * (i + 1), np.float32))


def test_a_cpu_scalar_read_by_several_device_steps_follows_its_value(fake_cuda, monkeypatch):
    """A CPU 0-d tensor a compiled GPU function reads directly and through host arithmetic
    gives this call's value at every reader."""
    _gpu_like(fake_cuda, monkeypatch, kernels=False)
    w = em.ones(3, device="cuda")
    c = em.zeros(())

    def f(w):
        c.add_(1)
        return w * c + w * (c * 3) - (w + c)
    fn = em.compile(f)
    for i in range(1, 5):
        want = np.float32(i) + np.float32(3 * i) - np.float32(1 + i)
        np.testing.assert_array_equal(fn(w).cpu().numpy(), np.full(3, want, np.float32))
    assert float(c) == 4.0
    prog = _program(fn)
    assert [s.name for s in prog._host] == ["add", "mul"]
    assert [len(vids) for _dt, vids, _s in prog._uploads.packed] == [2]   # c+1, (c+1)*3
