"""Device semantics on the CPU stand-in of a CUDA device (``EMBER_FAKE_CUDA=1``).

The stand-in is the real ``CUDABackend`` with NumPy as ``xp`` and its own memory space,
so what these tests check (placement, transfers, gradients across devices, mixed-device
errors, modules, optimizers, checkpoints, the training CLI) runs the code a GPU runs.
"""
import numpy as np
import pytest

import ember as em
from ember.device.base import _backends


def test_no_cuda_device_without_the_stand_in():
    assert "cuda" not in _backends        # the fixture of other tests cleaned up
    if not em.cuda.is_available():
        with pytest.raises(RuntimeError, match="CuPy"):
            em.zeros(2, device="cuda")
        with pytest.raises(em.cuda.NoCUDADeviceError, match="EMBER_FAKE_CUDA"):
            em.cuda.synchronize()


def test_factories_place_tensors_on_the_device(fake_cuda):
    for t in (em.zeros(2, 3, device="cuda"), em.ones(4, device="cuda:0"),
              em.full((2,), 7.0, device=em.device("cuda")), em.arange(5, device="cuda"),
              em.tensor([1.0, 2.0], device="cuda"), em.randn(3, device="cuda"),
              em.empty(2, device="cuda"), em.eye(3, device="cuda")):
        assert t.device == em.device("cuda:0") and t.is_cuda and not t.is_cpu
    assert em.arange(5, device="cuda").cpu().tolist() == [0, 1, 2, 3, 4]
    assert em.zeros_like(em.ones(2, device="cuda")).device.type == "cuda"


def test_repr_names_the_device_like_pytorch(fake_cuda):
    t = em.tensor([1.0, 2.0], device="cuda")
    assert repr(t) == "tensor([1., 2.], device='cuda:0')"
    assert str(t.device) == "cuda:0" and repr(t.device) == "device(type='cuda', index=0)"


def test_memory_spaces_are_separate(fake_cuda):
    cpu0 = em.memory_stats("cpu")["current_bytes"]
    dev0 = em.cuda.memory_allocated()
    x = em.ones(1000)                   # 4000 bytes on the CPU
    y = x.cuda()
    assert em.cuda.memory_allocated() - dev0 == 4000
    assert em.memory_stats("cpu")["current_bytes"] - cpu0 == 4000
    x.add_(1.0)                         # the device copy is a copy
    assert float(y.sum()) == 1000.0 and float(x.sum()) == 2000.0
    del y
    assert em.cuda.memory_allocated() == dev0


def test_transfers_round_trip_and_keep_dtype(fake_cuda):
    x = em.arange(6, dtype=em.int32).reshape(2, 3)
    y = x.to("cuda", non_blocking=True)
    assert y.dtype is em.int32 and y.device.type == "cuda"
    assert x.to("cpu") is x and y.to("cuda:0") is y
    assert np.array_equal(y.cpu().numpy(), x.numpy())
    z = y.to(em.ones(1, dtype=em.float64))     # to(other): its device and dtype
    assert z.device.type == "cpu" and z.dtype is em.float64
    assert x.cuda(0).device == "cuda:0" and x.to(y).device == y.device
    assert em.ones(2).cuda().to(em.float16).dtype is em.float16
    assert y.cpu().is_cpu and y.cuda() is y


def test_invalid_device_ordinal_is_a_clear_error(fake_cuda):
    with pytest.raises(RuntimeError, match=r"invalid device ordinal cuda:3.*cuda:0 to cuda:0"):
        em.ones(2).to("cuda:3")


def test_gradients_flow_across_devices(fake_cuda):
    x = em.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.cuda()
    assert y.requires_grad and "ToCopyBackward" in repr(y.grad_fn)
    (y * y).sum().backward()
    assert x.grad.device.type == "cpu" and x.grad.tolist() == [2.0, 4.0, 6.0]
    w = em.ones(3, device="cuda", requires_grad=True)
    (w.cpu() * 3).sum().backward()
    assert w.grad.device == em.device("cuda:0") and w.grad.cpu().tolist() == [3.0] * 3


def test_forward_mode_through_a_transfer(fake_cuda):
    import ember.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        x = fwAD.make_dual(em.tensor([1.0, 2.0]), em.tensor([1.0, 0.5]))
        y = (x.cuda() * 2)
        t = fwAD.unpack_dual(y).tangent
    assert t.device.type == "cuda" and t.cpu().tolist() == [2.0, 1.0]


def test_mixed_device_ops_raise_pytorchs_error(fake_cuda):
    a, b = em.ones(3, device="cuda"), em.ones(3)
    msg = r"Expected all tensors to be on the same device, but found at least two devices, " \
          r"cuda:0 and cpu!"
    with pytest.raises(RuntimeError, match=msg):
        a + b
    with pytest.raises(RuntimeError, match="at least two devices"):
        em.ones(2, 3) @ em.ones(3, 2, device="cuda")
    with pytest.raises(RuntimeError, match="at least two devices"):
        em.cat([a, b])
    assert float((a + 1.0).sum()) == 6.0     # Python scalars are fine


def test_host_reads_follow_pytorch(fake_cuda):
    a = em.tensor([1.5, 2.5], device="cuda")
    with pytest.raises(TypeError, match=r"can't convert cuda:0 device type tensor to numpy\. "
                                        r"Use Tensor.cpu\(\)"):
        a.numpy()
    assert a.tolist() == [1.5, 2.5] and a[0].item() == 1.5 and float(a.sum()) == 4.0
    assert bool(a[1] > 2) and np.asarray(a).tolist() == [1.5, 2.5]


def test_copy_between_devices(fake_cuda):
    dst = em.zeros(3, device="cuda")
    dst.copy_(em.tensor([1.0, 2.0, 3.0]))
    assert dst.device.type == "cuda" and dst.cpu().tolist() == [1.0, 2.0, 3.0]
    host = em.zeros(3)
    host.copy_(dst)
    assert host.tolist() == [1.0, 2.0, 3.0]


def _mlp():
    em.manual_seed(0)
    return em.nn.Sequential(em.nn.Linear(4, 8), em.nn.ReLU(), em.nn.Linear(8, 3))


def test_module_to_cuda_keeps_parameters_and_trains_like_cpu(fake_cuda):
    cpu, dev = _mlp(), _mlp()
    params = list(dev.parameters())
    assert dev.cuda() is dev and list(dev.parameters()) == params    # same objects
    assert all(p.device.type == "cuda" for p in dev.parameters())
    opt_c = em.optim.AdamW(cpu.parameters(), lr=1e-2)
    opt_d = em.optim.AdamW(dev.parameters(), lr=1e-2)
    em.manual_seed(1)
    x, y = em.randn(16, 4), em.randint(0, 3, (16,))
    for _ in range(3):
        for m, o, xx, yy in ((cpu, opt_c, x, y), (dev, opt_d, x.cuda(), y.cuda())):
            loss = em.nn.functional.cross_entropy(m(xx), yy)
            o.zero_grad()
            loss.backward()
            o.step()
    st = opt_d.state[params[0]]
    assert st["exp_avg"].device.type == "cuda"
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        np.testing.assert_allclose(pd.cpu().detach().numpy(), pc.detach().numpy(), rtol=1e-6)
    assert dev.to("cpu") is dev and params[0].device.type == "cpu"


def test_optimizer_state_follows_params_on_load(fake_cuda):
    m = _mlp()
    opt = em.optim.Adam(m.parameters(), lr=1e-2)
    em.nn.functional.mse_loss(m(em.randn(5, 4)), em.zeros(5, 3)).backward()
    opt.step()
    sd = opt.state_dict()
    m2 = _mlp().cuda()
    opt2 = em.optim.Adam(m2.parameters(), lr=1e-2)
    opt2.load_state_dict(sd)
    p0 = next(m2.parameters())
    assert opt2.state[p0]["exp_avg"].device == em.device("cuda:0")
    assert opt2.state[p0]["step"].device.type == "cpu"      # as PyTorch: `step` stays
    em.nn.functional.mse_loss(m2(em.randn(5, 4, device="cuda")),
                              em.zeros(5, 3, device="cuda")).backward()
    opt2.step()                                             # and the next step runs
    assert p0.device.type == "cuda" and opt2.state[p0]["exp_avg"].device.type == "cuda"


def test_zero_dim_cpu_tensors_mix_with_device_tensors(fake_cuda):
    a = em.ones(3, device="cuda")
    for r in (em.tensor(2.0) * a, a * em.tensor(2.0), em.tensor(2.0) + a * 0 + 1.0):
        assert r.device == em.device("cuda:0")
    assert (em.tensor(2.0) * a).cpu().tolist() == [2.0] * 3
    with pytest.raises(RuntimeError, match="at least two devices"):
        a * em.ones(1)                           # 1-d is not a scalar


def _compiled_losses(dev, host_kernels=True, backend=None):
    em.manual_seed(0)
    m = em.nn.Sequential(em.nn.Linear(64, 256), em.nn.GELU(), em.nn.Linear(256, 10)).to(dev)
    opt = em.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = em.randn(128, 64).to(dev), em.randint(0, 10, (128,)).to(dev)

    def step(x, y):
        loss = em.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    f = em.compile(step)
    losses = [float(f(x, y)) for _ in range(3)]
    assert next(m.parameters()).device == em.device(dev)
    return losses, str(f.explain())


def test_compiled_training_step_on_the_device_matches_cpu(plain_fake_cuda, monkeypatch):
    want, _ = _compiled_losses("cpu")
    got, report = _compiled_losses("cuda")
    assert got == want and "kernels 1" in report       # the stand-in runs the C kernels
    # a GPU has no host kernels: the pipeline skips the passes that emit them
    monkeypatch.setattr(plain_fake_cuda, "capabilities",
                        plain_fake_cuda.capabilities - {"host_kernels"})
    gpu_like, report = _compiled_losses("cuda")
    assert "skipped (no host kernels on the device)" in report and "kernels 1" not in report
    np.testing.assert_allclose(gpu_like, want, rtol=1e-6)


def test_bfloat16_on_a_device_without_it_is_a_clear_error(fake_cuda, monkeypatch):
    assert em.ones(2, dtype=em.bfloat16, device="cuda").dtype is em.bfloat16   # stand-in: yes
    monkeypatch.setattr(fake_cuda, "capabilities", fake_cuda.capabilities - {"bfloat16"})
    with pytest.raises(TypeError, match="bfloat16 tensors need CuPy >= 14 with ml_dtypes"):
        em.zeros(2, dtype=em.bfloat16, device="cuda")
    with pytest.raises(TypeError, match="valid: float16"):
        em.ones(2, dtype=em.bfloat16).cuda()
    assert em.ones(2, dtype=em.float16).cuda().dtype is em.float16


def test_a_transfer_inside_a_compiled_function_is_a_graph_break_not_a_stale_copy(fake_cuda):
    # a graph has no device-copy node: the copy made while tracing must not be replayed
    # (it would be read at every run from that call's copy: the values of the first call)
    c = em.ones(3)
    x = em.zeros(3, device="cuda")

    def f(x, y):
        return x + y.cuda() + c.to("cuda")
    g = em.compile(f)
    with pytest.warns(UserWarning, match=r"graph break .*device transfer of a cpu tensor "
                                         r"to cuda:0"):
        assert g(x, em.ones(3)).cpu().tolist() == [2.0, 2.0, 2.0]
    c.add_(1)
    assert g(x, em.full((3,), 5.0)).cpu().tolist() == [7.0, 7.0, 7.0]
    assert f(x, em.full((3,), 5.0)).cpu().tolist() == [7.0, 7.0, 7.0]

    def back(x):
        return (x * 2).cpu()
    with pytest.raises(em.graph.GraphBreak, match=r"\.cpu\(\).*move inputs before"):
        em.compile(back, fullgraph=True)(x)
