"""Top-level PyTorch names added for issue 17's strict coverage (ember/_torch_names17.py,
ember/version.py)."""
import numpy as np
import pytest

import ember
import ember.nn.functional as F


def test_aliases():
    assert ember.GradScaler is ember.amp.GradScaler
    assert isinstance(ember.float32, ember.dtype) and ember.OutOfMemoryError is MemoryError
    assert ember.version.cuda is None and ember.version.__version__ == ember.__version__
    assert ember.distributed.__name__ == "ember.distributed"
    s = ember.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    np.testing.assert_array_equal(ember.spmm(s, ember.ones(2, 1)).numpy(), [[2.0], [3.0]])


def test_old_norms_match_numpy():
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    t = ember.tensor(x)
    np.testing.assert_allclose(ember.frobenius_norm(t).numpy(),
                               np.linalg.norm(x, axis=(-2, -1)), rtol=1e-12)
    np.testing.assert_allclose(ember.nuclear_norm(t, keepdim=True).numpy(),
                               np.linalg.norm(x, "nuc", axis=(-2, -1), keepdims=True),
                               rtol=1e-10)


def test_aten_convolution_and_grid_sampler_entry_points():
    ember.manual_seed(0)
    x, w, b = ember.randn(2, 3, 6, 6), ember.randn(4, 3, 3, 3), ember.randn(4)
    np.testing.assert_allclose(
        ember.convolution(x, w, b, [2, 2], [1, 1], [1, 1], False, [0, 0], 1).numpy(),
        F.conv2d(x, w, b, stride=2, padding=1).numpy(), rtol=1e-6)
    wt = ember.randn(3, 2, 3, 3)
    np.testing.assert_allclose(
        ember.convolution(x, wt, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1).numpy(),
        F.conv_transpose2d(x, wt, None, 2, 1, 1).numpy(), rtol=1e-6)
    theta = ember.tensor([[[0.9, 0.1, 0.0], [-0.1, 1.1, 0.2]]]).expand(2, 2, 3)
    grid = ember.affine_grid_generator(theta, (2, 3, 5, 5), False)
    np.testing.assert_array_equal(grid.numpy(), F.affine_grid(theta, [2, 3, 5, 5],
                                                              align_corners=False).numpy())
    np.testing.assert_array_equal(
        ember.grid_sampler(x, grid, 1, 1, False).numpy(),
        F.grid_sample(x, grid, "nearest", "border", False).numpy())
    with pytest.raises(ValueError, match="interpolation_mode"):
        ember.grid_sampler(x, grid, 7, 0, False)


def test_from_file_shared_writes_reach_the_file(tmp_path):
    path = tmp_path / "data.bin"
    np.arange(4, dtype=np.float32).tofile(path)
    t = ember.from_file(str(path), shared=True, size=4, dtype=ember.float32)
    np.testing.assert_array_equal(t.numpy(), [0.0, 1.0, 2.0, 3.0])
    t[0] = 9.0
    t._mmap.flush()
    assert np.fromfile(path, dtype=np.float32)[0] == 9.0
    private = ember.from_file(str(path), shared=False, size=4, dtype=ember.float32)
    private[1] = -1.0
    assert np.fromfile(path, dtype=np.float32)[1] == 1.0


def test_empty_permuted_checks_the_layout():
    assert ember.empty_permuted((2, 3, 4), (0, 2, 1)).shape == (2, 3, 4)
    with pytest.raises(ValueError, match="permutation"):
        ember.empty_permuted((2, 3), (0, 0))


def test_cpu_device_module_and_get_device_module():
    assert ember.cpu.is_available() and ember.cpu.device_count() == 1
    assert ember.get_device_module("cpu") is ember.cpu
    assert ember.get_device_module("cuda:0") is ember.cuda
    with pytest.raises(RuntimeError, match="valid"):
        ember.get_device_module("xpu")
    s = ember.cpu.Stream()
    with ember.cpu.stream(s) as got:
        assert got is s and s.query() and s.record_event().query()


def test_is_anomaly_check_nan_enabled_follows_detect_anomaly():
    assert not ember.is_anomaly_check_nan_enabled()
    with ember.autograd.detect_anomaly():
        assert ember.is_anomaly_check_nan_enabled()
    with ember.autograd.detect_anomaly(check_nan=False):
        assert not ember.is_anomaly_check_nan_enabled()
