"""``ember.cuda`` on the CPU stand-in: device queries, streams, events, memory statistics,
seeds, the OOM report; plus checkpoints, pinned DataLoader batches and ``ember train``."""
import os
import subprocess
import sys

import numpy as np
import pytest

import ember as em


def test_device_queries(fake_cuda):
    assert em.cuda.is_available() and em.cuda.is_initialized()
    assert em.cuda.device_count() == 1 and em.cuda.current_device() == 0
    assert em.cuda.get_device_capability() == (9, 0) and em.cuda.is_bf16_supported()
    assert "stand-in" in em.cuda.get_device_name(0)
    assert "major=9" in repr(em.cuda.get_device_properties("cuda:0"))
    em.cuda.synchronize()
    em.cuda.init()
    with pytest.raises(RuntimeError, match="invalid device ordinal cuda:1"):
        em.cuda.set_device(1)
    assert em.accelerator.is_available() and em.accelerator.device_count() == 1


def test_several_devices_and_the_device_context(fake_cuda2):
    assert em.cuda.device_count() == 2
    em.cuda.set_device("cuda:1")
    assert em.cuda.current_device() == 1
    assert em.ones(2).cuda().device == em.device("cuda:1")       # .cuda(): current device
    with em.cuda.device(0):
        assert em.cuda.current_device() == 0
    assert em.cuda.current_device() == 1
    em.cuda.set_device(0)


def test_streams_and_the_stream_context(fake_cuda):
    default = em.cuda.current_stream()
    assert default == em.cuda.default_stream() and default.query()
    s = em.cuda.Stream()
    assert s != default and s.device == em.device("cuda:0")
    with em.cuda.stream(s):
        assert em.cuda.current_stream() is s
        y = em.ones(4, device="cuda") * 2
    assert em.cuda.current_stream() == default
    with s:                                          # a Stream is its own context
        assert em.cuda.current_stream() is s
    s.wait_stream(default)
    s.synchronize()
    assert float(y.sum()) == 8.0
    with em.cuda.stream(None):                       # None: leave the current stream
        assert em.cuda.current_stream() == default


def test_event_timing(fake_cuda):
    a, b = em.cuda.Event(enable_timing=True), em.cuda.Event(enable_timing=True)
    a.record()
    x = em.ones(256, 256, device="cuda")
    for _ in range(3):
        x = x @ x / 256.0
    b.record()
    b.synchronize()
    ms = a.elapsed_time(b)
    assert ms > 0 and b.query()
    plain = em.cuda.Event()
    plain.record(em.cuda.current_stream())
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        plain.elapsed_time(b)
    with pytest.raises(RuntimeError, match="must be recorded"):
        em.cuda.Event(enable_timing=True).elapsed_time(b)
    s = em.cuda.Stream()
    ev = s.record_event()
    em.cuda.current_stream().wait_event(ev)
    ev.wait(s)


def test_memory_statistics(fake_cuda):
    em.cuda.empty_cache()
    em.cuda.reset_peak_memory_stats()
    base = em.cuda.memory_allocated()
    a = em.zeros(1024, device="cuda")               # 4 KiB
    b = em.zeros(2048, device="cuda")               # 8 KiB
    assert em.cuda.memory_allocated() == base + 12288
    del b
    assert em.cuda.memory_allocated() == base + 4096
    assert em.cuda.max_memory_allocated() == base + 12288
    assert em.cuda.memory_reserved() >= base + 12288       # freed blocks stay cached
    em.cuda.empty_cache()
    assert em.cuda.memory_reserved() == em.cuda.memory_allocated() == base + 4096
    assert em.cuda.max_memory_reserved() >= base + 12288
    em.cuda.reset_peak_memory_stats()
    assert em.cuda.max_memory_allocated() == base + 4096
    st = em.cuda.memory_stats()
    assert st["allocated_bytes.all.current"] == base + 4096 and st["num_ooms"] == 0
    assert em.memory_stats("cuda")["current_bytes"] == base + 4096
    summary = em.cuda.memory_summary()
    assert "Allocated memory" in summary and "Reserved memory" in summary
    del a


def test_memory_figures_without_a_device():
    if em.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert em.cuda.memory_allocated() == 0 and em.cuda.memory_stats() == {}
    em.cuda.empty_cache()
    em.cuda.reset_peak_memory_stats()


def test_oom_report_names_the_device_and_the_largest_tensors(fake_cuda):
    keep = em.zeros(1000, device="cuda")   # noqa: F841 - alive in the report
    em.set_memory_limit(em.cuda.memory_allocated() + 8000, device="cuda")
    try:
        big = em.ones(250, device="cuda")          # fits
        with pytest.raises(em.cuda.OutOfMemoryError) as e:
            em.ones(10_000, device="cuda")
        msg = str(e.value)
        assert msg.startswith("cuda:0: out of memory") and "Largest live tensors" in msg
        assert "test_cuda_api.py" in msg and "[1000]" in msg
        assert em.cuda.memory_stats()["num_ooms"] == 1
        assert em.memory_stats("cpu")["limit_bytes"] is None      # the CPU is unaffected
        del big
    finally:
        em.set_memory_limit(None, device="cuda")


def test_manual_seed_is_reproducible(fake_cuda):
    em.cuda.manual_seed(123)
    a = em.randn(5, device="cuda")
    em.cuda.manual_seed_all(123)
    b = em.randn(5, device="cuda")
    assert a.device.type == "cuda" and a.cpu().tolist() == b.cpu().tolist()
    st = em.cuda.get_rng_state()
    c = em.rand(3, device="cuda")
    em.cuda.set_rng_state(st)
    assert em.rand(3, device="cuda").cpu().tolist() == c.cpu().tolist()
    assert em.cuda.initial_seed() == 123 and len(em.cuda.get_rng_state_all()) == 1


def test_each_device_has_its_own_generator(fake_cuda):
    em.manual_seed(0)
    want = em.rand(4).tolist()
    em.manual_seed(0)
    em.cuda.manual_seed(99)                       # leaves the CPU's stream alone
    em.rand(2, device="cuda")
    assert em.rand(4).tolist() == want
    em.manual_seed(7)                             # seeds the CUDA generators too
    x = em.rand(3, device="cuda").cpu().tolist()
    w = em.empty(3, device="cuda")
    em.manual_seed(7)
    assert em.rand(3, device="cuda").cpu().tolist() == x
    em.manual_seed(7)
    w.uniform_()                                  # in-place fills draw from the device's
    assert w.cpu().tolist() == x
    with em.random.fork_rng():
        em.rand(5, device="cuda")
    em.manual_seed(7)
    em.rand(3, device="cuda")
    y = em.rand(3, device="cuda").cpu().tolist()
    em.manual_seed(7)
    em.rand(3, device="cuda")
    with em.random.fork_rng():
        em.rand(5, device="cuda")
    assert em.rand(3, device="cuda").cpu().tolist() == y


def test_save_and_load_with_map_location(fake_cuda, tmp_path):
    m = em.nn.Linear(3, 2).cuda()
    path = tmp_path / "m.safetensors"
    em.save(m.state_dict(), path)
    on_cpu = em.load(path, map_location="cpu")      # NOTE: None restores to cuda:0
    on_dev = em.load(path, map_location="cuda")
    assert on_cpu["weight"].device.type == "cpu" and on_dev["weight"].device.type == "cuda"
    np.testing.assert_array_equal(on_dev["weight"].cpu().numpy(),
                                  m.weight.detach().cpu().numpy())
    m2 = em.nn.Linear(3, 2).cuda()
    m2.load_state_dict(on_cpu)                       # a cross-device copy_
    assert m2.weight.device.type == "cuda"
    assert m2.weight.cpu().tolist() == m.weight.cpu().tolist()


def test_dataloader_pin_memory(fake_cuda):
    ds = em.utils.data.TensorDataset(em.arange(10.0), em.arange(10))
    batches = list(em.utils.data.DataLoader(ds, batch_size=4, pin_memory=True))
    assert all(x.is_pinned() and y.is_pinned() for x, y in batches)
    assert batches[0][0].tolist() == [0.0, 1.0, 2.0, 3.0]
    x = batches[0][0].to("cuda", non_blocking=True)
    assert x.device.type == "cuda" and not em.ones(2).is_pinned()
    with pytest.raises(RuntimeError, match="only CPU tensors"):
        x.pin_memory()


def test_dataloader_pin_memory_without_a_device_warns():
    if em.cuda.is_available():
        pytest.skip("a CUDA device is present")
    from ember.data import _pin
    _pin._warned.clear()
    ds = em.utils.data.TensorDataset(em.arange(4.0))
    with pytest.warns(UserWarning, match="no accelerator is found"):
        (b,) = next(iter(em.utils.data.DataLoader(ds, batch_size=2, pin_memory=True)))
    assert not b.is_pinned()
    t = em.ones(2)
    assert t.pin_memory() is t and not t.is_pinned()      # nothing to pin for


def _train(tmp_path, *extra, fake=True):
    """``ember train`` on spirals' MLP in a process of its own (on the strict stand-in:
    the GPU's code paths)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_FAKE_CUDA")}
    if fake:
        env.update(EMBER_FAKE_CUDA="1", EMBER_FAKE_CUDA_STRICT="1")
    cmd = [sys.executable, "-m", "ember.cli", "train", "--model", "mlp", "--dataset",
           "spirals", "--no-progress", "--overwrite", "--checkpoint",
           str(tmp_path / "ck.safetensors"), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def test_train_on_the_cuda_device_is_reproducible_and_learns(tmp_path):
    # NOTE: not compared with a CPU run: dropout draws from the device's own generator
    # (PyTorch's semantics), so the masks differ; test_fake_device compares dropout-free steps
    runs = [_train(tmp_path, "--device", "cuda", "--epochs", "2") for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr

    def losses(out):
        return [float(ln.split()[4]) for ln in out.splitlines() if ln.startswith("epoch")]
    first, second = (losses(r.stdout) for r in runs)
    assert len(first) == 2 and first == second
    assert first[1] < first[0] < 1.0986          # below chance level (ln 3) and falling


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_train_amp_on_cuda_autocasts_the_cuda_ops(fake_cuda, amp):
    """``--amp`` with ``--device cuda``: the forward's autocast and the GradScaler act on
    the training device's type (an autocast("cpu") region left a cuda model in float32)."""
    from ember.training.precision import Precision
    prec = Precision(amp, "cuda:0")
    lin = em.nn.Linear(4, 3).cuda()
    with prec.autocast():
        y = lin(em.randn(2, 4, device="cuda"))
    assert y.device.type == "cuda" and y.dtype == (em.bfloat16 if amp == "bf16" else em.float16)
    loss = y.float().mean()     # NOTE: sum()'s gradient 2**16 overflows float16: a skip
    opt = em.optim.SGD(lin.parameters(), lr=0.1)
    assert prec.backward_step(loss, opt) is True
    assert prec.scaler.is_enabled() == (amp == "fp16")
    if amp == "fp16":
        assert prec.scaler._scale.device.type == "cuda"


def test_train_on_the_cuda_device_with_fp16_amp(tmp_path):
    r = _train(tmp_path, "--device", "cuda", "--epochs", "2", "--amp", "fp16")
    assert r.returncode == 0, r.stderr
    losses = [float(ln.split()[4]) for ln in r.stdout.splitlines() if ln.startswith("epoch")]
    assert len(losses) == 2 and losses[1] < losses[0] < 1.0986


def test_train_device_cuda_without_a_gpu_names_what_is_missing(tmp_path):
    if em.cuda.is_available():
        pytest.skip("a CUDA device is present")
    r = _train(tmp_path, "--device", "cuda", fake=False)
    assert r.returncode == 2 and "no CUDA GPU is available" in r.stderr
    r = _train(tmp_path, "--device", "cuda:5")
    assert r.returncode == 2 and "valid: cuda:0 to cuda:0" in r.stderr



def test_cuda_amp_names_and_mem_get_info(fake_cuda):
    free, total = em.cuda.mem_get_info()
    assert 0 < free <= total == 80 << 30
    scaler = em.cuda.amp.GradScaler()
    assert scaler.is_enabled()                       # the device is there
    w = em.ones(4, 4, device="cuda", requires_grad=True)
    with em.cuda.amp.autocast(dtype=em.bfloat16):
        y = w @ w
    assert y.dtype is em.bfloat16 and y.device.type == "cuda"
    loss = scaler.scale(y.float().sum())
    loss.backward()
    assert float(w.grad.cpu().sum()) == 2.0 ** 16 * 128


def test_grad_scaler_without_a_device_disables_itself():
    if em.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.warns(UserWarning, match="CUDA is not available"):
        assert not em.cuda.amp.GradScaler().is_enabled()


def test_device_malloc_retries_after_freeing_the_cache_then_reports(fake_cuda):
    from ember.device.cuda import retrying_malloc

    class DeviceOOM(Exception):
        pass
    calls, freed = [], []

    def malloc(n):                     # fails until the cache was emptied
        calls.append(n)
        if not freed:
            raise DeviceOOM("out of memory allocating")
        return f"ptr{n}"
    alloc = retrying_malloc(malloc, lambda: freed.append(1), DeviceOOM,
                            lambda: fake_cuda.allocator)
    assert alloc(64) == "ptr64" and calls == [64, 64]
    assert em.cuda.memory_stats()["num_alloc_retries"] == 1
    keep = em.zeros(500, device="cuda")   # noqa: F841 - listed in the report

    def full(n):
        raise DeviceOOM("cudaErrorMemoryAllocation")
    with pytest.raises(MemoryError, match=r"(?s)cudaErrorMemoryAllocation.*Largest live"):
        retrying_malloc(full, lambda: None, DeviceOOM, lambda: fake_cuda.allocator)(1 << 30)
    assert em.cuda.memory_stats()["num_ooms"] == 1


def test_nvtx_ranges_device_of_and_ipc_collect(fake_cuda):
    # torch.cuda.nvtx: nested ranges return their depth; range() is a context manager and
    # a decorator with str.format arguments; on the stand-in nothing reaches NVTX
    nvtx = em.cuda.nvtx
    assert [nvtx.range_push("a"), nvtx.range_push("b"), nvtx.range_pop(),
            nvtx.range_pop(), nvtx.range_pop()] == [0, 1, 1, 0, -1]
    with nvtx.range("step {}", 3):
        assert nvtx.range_push("inner") == 1
        nvtx.range_pop()

    @nvtx.range("fn")
    def f():
        return nvtx.range_push("x")
    assert f() == 1 and nvtx.range_pop() == 0 and nvtx.range_pop() == -1
    h = nvtx.range_start("overlapping")
    nvtx.mark("event")
    nvtx.range_end(h)
    with pytest.raises(ValueError, match="no open range"):
        nvtx.range_end(h)
    # device_of: the tensor's device current inside; a CPU tensor changes nothing
    x = em.ones(2, device="cuda")
    with em.cuda.device_of(x):
        assert em.cuda.current_device() == x.get_device() == 0
    with em.cuda.device_of(em.ones(2)):
        assert em.cuda.current_device() == 0
    assert em.cuda.ipc_collect() is None


def test_memory_fraction_cap_and_deprecated_names(fake_cuda):
    total = em.cuda.mem_get_info()[1]
    assert em.cuda.get_per_process_memory_fraction() == 1.0
    try:
        em.cuda.set_per_process_memory_fraction(1e-9)       # ~86 bytes of the 80 GiB
        assert em.cuda.get_per_process_memory_fraction() == int(1e-9 * total) / total
        em.ones(4, device="cuda")                           # 16 bytes: fits
        with pytest.raises(em.cuda.OutOfMemoryError):
            em.ones(1024, device="cuda")
        with pytest.raises(ValueError, match="allowed range: 0 to 1"):
            em.cuda.set_per_process_memory_fraction(1.5)
        with pytest.raises(TypeError, match="expected a float"):
            em.cuda.set_per_process_memory_fraction("half")
    finally:
        em.set_memory_limit(None, device="cuda")
    assert em.cuda.get_per_process_memory_fraction() == 1.0
    x = em.ones(256, device="cuda")
    assert em.cuda.memory_cached() == em.cuda.memory_reserved() >= x.numel() * 4
    assert em.cuda.max_memory_cached() == em.cuda.max_memory_reserved()
    em.cuda.reset_max_memory_cached()
    assert em.cuda.is_tf32_supported() == (em.cuda.get_device_capability() >= (8, 0))
