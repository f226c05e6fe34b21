"""PyTorch's module paths and utilities (issue 17, item 1): utils.data, cuda, accelerator,
backends, threads, testing.assert_close, serialization's safe globals."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import ember


def test_utils_data_is_ember_data():
    from ember.utils.data import DataLoader, Dataset, TensorDataset, random_split
    from ember.utils.data.dataloader import default_collate
    from ember.utils.data.distributed import DistributedSampler
    assert DataLoader is ember.data.DataLoader and Dataset is ember.data.Dataset
    assert TensorDataset is ember.data.TensorDataset and random_split is ember.data.random_split
    assert default_collate is ember.data.default_collate
    assert DistributedSampler is ember.data.DistributedSampler
    for name in ember.data.__all__:
        assert getattr(ember.utils.data, name) is getattr(ember.data, name)
    ds = TensorDataset(ember.arange(6.0).reshape(3, 2))
    (x,) = next(iter(DataLoader(ds, batch_size=3)))
    assert x.shape == (3, 2)


def test_cuda_answers_no_gpu():
    assert ember.cuda.is_available() is False
    assert ember.cuda.device_count() == 0
    assert ember.cuda.is_bf16_supported() is False
    state = ember.get_rng_state()
    ember.cuda.manual_seed(0)
    ember.cuda.manual_seed_all(123)
    assert (ember.get_rng_state().numpy() == state.numpy()).all()  # CPU stream untouched
    with pytest.raises(RuntimeError, match=r"synchronize\(\): no CUDA device is present"):
        ember.cuda.synchronize()
    with pytest.raises(RuntimeError, match="no CUDA device"):
        ember.cuda.get_device_name(0)
    with pytest.raises((TypeError, ValueError)):
        ember.cuda.manual_seed("not a seed")
    assert ember.cuda.get_rng_state_all() == []
    ember.cuda.set_rng_state_all([])
    with pytest.raises(RuntimeError, match="no CUDA device"):
        ember.cuda.get_rng_state()


def test_accelerator_none():
    assert ember.accelerator.is_available() is False
    assert ember.accelerator.current_accelerator() is None
    assert ember.accelerator.device_count() == 0


def test_backends_flags_settable_and_restored():
    cudnn = ember.backends.cudnn
    assert (cudnn.enabled, cudnn.benchmark, cudnn.deterministic) == (True, False, False)
    cudnn.benchmark = True
    try:
        with cudnn.flags(enabled=False, benchmark=False, deterministic=True):
            assert (cudnn.enabled, cudnn.deterministic) == (False, True)
        assert cudnn.benchmark is True and cudnn.enabled is True
    finally:
        cudnn.benchmark = False
    ember.backends.cuda.matmul.allow_tf32 = True
    assert ember.backends.cuda.matmul.allow_tf32 is True
    ember.backends.cuda.matmul.allow_tf32 = False
    assert ember.backends.mps.is_available() is False


@pytest.mark.parametrize("flags, want", [
    ({"sse2", "avx"}, "DEFAULT"),
    ({"avx2", "fma", "avx512f"}, "AVX2"),
    ({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, "AVX512"),
    ({"avx2"}, "DEFAULT"),
])
def test_cpu_capability_from_flags(flags, want):
    assert ember.backends.cpu.capability_from_flags(flags) == want


def test_cpu_capability_of_this_machine():
    cap = ember.backends.cpu.get_cpu_capability()
    assert cap in ("DEFAULT", "AVX2", "AVX512")
    torch = pytest.importorskip("torch")
    assert cap == torch.backends.cpu.get_cpu_capability()


def test_set_num_threads_sets_blas_and_kernel_pool():
    from ember._threads import blas_threading
    from ember.codegen.runtime import num_threads
    before = ember.get_num_threads()
    try:
        ember.set_num_threads(1)
        assert ember.get_num_threads() == 1 and num_threads() == 1
        libs = blas_threading()
        assert libs, "NumPy's BLAS was not found among the loaded libraries"
        assert set(libs.values()) == {1}
        ember.set_num_threads(3)
        assert set(blas_threading().values()) == {3} and ember.get_num_threads() == 3
    finally:
        ember.set_num_threads(before)
    with pytest.raises(ValueError, match="positive"):
        ember.set_num_threads(0)
    with pytest.raises(TypeError):
        ember.set_num_threads(1.5)


def test_interop_threads():
    ember.set_num_interop_threads(2)
    assert ember.get_num_interop_threads() == 2


def test_assert_close_passes_within_default_tolerances():
    ember.testing.assert_close(ember.tensor([1.0, 2.0]), ember.tensor([1.0, 2.0 + 1e-6]))
    ember.testing.assert_close(ember.tensor([1.0], dtype=ember.float16),
                               ember.tensor([1.0009765625], dtype=ember.float16))
    ember.testing.assert_close(1.0, 1.0 + 1e-8)
    ember.testing.assert_close([ember.ones(2), {"a": 3}], [ember.ones(2), {"a": 3}])
    ember.testing.assert_close(ember.tensor([float("nan")]), ember.tensor([float("nan")]),
                               equal_nan=True)


def test_assert_close_default_tolerances_per_dtype():
    tol = ember.testing.default_tolerances
    assert tol(ember.float32) == (1.3e-6, 1e-5)
    assert tol(ember.float64) == (1e-7, 1e-7)
    assert tol(ember.float16) == (1e-3, 1e-5)
    assert tol(ember.bfloat16) == (1.6e-2, 1e-5)
    assert tol(ember.int64) == (0.0, 0.0)
    assert tol(ember.float32, ember.float16) == (1e-3, 1e-5)
    with pytest.raises(AssertionError):  # 2e-5 > atol + rtol for float32
        ember.testing.assert_close(ember.tensor([0.0]), ember.tensor([2e-5]))
    with pytest.raises(AssertionError):  # float64's tolerance is tighter
        ember.testing.assert_close(ember.tensor([1.0], dtype=ember.float64),
                                   ember.tensor([1.0 + 1e-6], dtype=ember.float64))


def test_assert_close_message_shape():
    with pytest.raises(AssertionError) as e:
        ember.testing.assert_close(ember.tensor([1.0, 2.0, 3.0]), ember.tensor([1.0, 2.5, 3.0]))
    assert str(e.value) == (
        "Tensor-likes are not close!\n\nMismatched elements: 1 / 3 (33.3%)\n"
        "Greatest absolute difference: 0.5 at index (1,) (up to 1e-05 allowed)\n"
        "Greatest relative difference: 0.20000000298023224 at index (1,) (up to 1.3e-06 "
        "allowed)")
    with pytest.raises(AssertionError, match=r"^Tensor-likes are not equal!\n\nMismatched "
                       r"elements: 1 / 2 \(50.0%\)\nGreatest absolute difference: 1 at index "
                       r"\(1,\)\nGreatest relative difference: 0.3333333432674408 at index"):
        ember.testing.assert_close(ember.tensor([1, 2]), ember.tensor([1, 3]))
    with pytest.raises(AssertionError, match=r"^Scalars are not close!\n\nExpected 1.5 but got "
                       r"1.0.\nAbsolute difference: 0.5 \(up to 1e-07 allowed\)"):
        ember.testing.assert_close(1.0, 1.5)
    with pytest.raises(AssertionError, match="attribute 'shape' do not match"):
        ember.testing.assert_close(ember.ones(2), ember.ones(3))
    with pytest.raises(AssertionError, match="attribute 'dtype' do not match"):
        ember.testing.assert_close(ember.ones(2), ember.ones(2, dtype=ember.float64))
    with pytest.raises(AssertionError, match="not close"):
        ember.testing.assert_close(ember.tensor([float("nan")]), ember.tensor([float("nan")]))
    with pytest.raises(AssertionError, match=r"^custom$"):
        ember.testing.assert_close(ember.ones(1), ember.zeros(1), msg="custom")
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol'"):
        ember.testing.assert_close(ember.ones(1), ember.ones(1), rtol=1e-3)


def test_assert_close_matches_torch_messages():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = a.copy()
    b[1, 2] += 1e-3
    b[2, 0] += 3e-4
    with pytest.raises(AssertionError) as want:
        torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b))
    with pytest.raises(AssertionError) as got:
        ember.testing.assert_close(ember.from_numpy(a), ember.from_numpy(b))
    assert str(got.value) == str(want.value)


def test_safe_globals_accepted(tmp_path):
    class Thing:
        pass
    ember.serialization.clear_safe_globals()
    with ember.serialization.safe_globals([Thing]):
        assert ember.serialization.get_safe_globals() == [Thing]
    assert ember.serialization.get_safe_globals() == []
    ember.serialization.add_safe_globals([Thing])
    p = str(tmp_path / "c.safetensors")
    ember.save({"w": ember.ones(2)}, p)
    assert ember.load(p, weights_only=True)["w"].shape == (2,)
    ember.serialization.clear_safe_globals()
    with pytest.raises(TypeError, match="list"):
        ember.serialization.add_safe_globals(Thing)


@pytest.mark.parametrize("path", ["ember.utils.data", "ember.utils.data.distributed",
                                  "ember.cuda", "ember.accelerator", "ember.backends.cudnn",
                                  "ember.backends.cuda", "ember.backends.mps",
                                  "ember.backends.cpu", "ember.testing"])
def test_module_paths_import(path):
    assert importlib.import_module(path) is not None


def test_nn_modules_paths_follow_pytorch_file_names():
    from ember.nn.modules.activation import MultiheadAttention
    from ember.nn.modules.batchnorm import BatchNorm2d, _BatchNorm
    from ember.nn.modules.instancenorm import InstanceNorm1d
    from ember.nn.modules.linear import NonDynamicallyQuantizableLinear
    from ember.nn.modules.module import Module
    from ember.nn.modules.utils import _pair, _quadruple, _single, _triple
    nn = ember.nn
    assert MultiheadAttention is nn.MultiheadAttention and Module is nn.Module
    assert BatchNorm2d is nn.BatchNorm2d and InstanceNorm1d is nn.InstanceNorm1d
    assert all(isinstance(m, _BatchNorm) for m in (nn.BatchNorm1d(2), nn.BatchNorm3d(2)))
    assert not isinstance(nn.InstanceNorm1d(2), _BatchNorm)
    assert issubclass(NonDynamicallyQuantizableLinear, nn.Linear)
    assert isinstance(nn.MultiheadAttention(4, 2).out_proj, NonDynamicallyQuantizableLinear)
    assert (_single(2), _pair(3), _triple((1, 2, 3)), _quadruple(0)) == \
        ((2,), (3, 3), (1, 2, 3), (0, 0, 0, 0))


def test_pytorch_style_training_script_runs_unmodified():
    # Written as a PyTorch user would, with ``import ember as torch``.
    import ember as torch
    from ember.utils.data import DataLoader, TensorDataset, random_split
    import ember.nn as nn
    import ember.nn.functional as F

    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(64, 3)
    y = (x.sum(1) > 0).type(torch.LongTensor)
    train, val = random_split(TensorDataset(x, y), [48, 16])
    loader = DataLoader(train, batch_size=16, shuffle=True, pin_memory=torch.cuda.is_available())
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(30):
        for xb, yb in loader:
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        xv = torch.stack([val[i][0] for i in range(len(val))])
        yv = torch.stack([val[i][1] for i in range(len(val))])
        acc = (model(xv).argmax(1) == yv).float().mean().item()
    assert acc >= 0.8
    w = model[0].weight
    torch.testing.assert_close(w.new_zeros(w.shape), torch.zeros_like(w))
    assert torch.is_tensor(w) and torch.numel(w) == 24
