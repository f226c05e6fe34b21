"""The fused unscale-and-check kernel of GradScaler against its NumPy reference (and
PyTorch's ``_amp_foreach_non_finite_check_and_unscale_`` where installed)."""
import numpy as np
import pytest

from ember.amp import _unscale_kernels as uk

needs_cc = pytest.mark.skipif(not uk.available(), reason="no C compiler: NumPy path only")


def _grads(dtype, seed, bad):
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(n).astype(dtype) * 1e3 for n in (0, 1, 7, 33, 1000)]
    out.append(rng.standard_normal((6, 5)).astype(dtype)[:, ::2])   # a strided view
    for i, v in bad:
        out[i][(-1,) * out[i].ndim] = v
    return out


CASES = [[], [(2, np.inf)], [(4, -np.inf)], [(3, np.nan)], [(5, np.nan)], [(1, np.inf),
                                                                           (4, np.nan)]]


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", CASES)
@pytest.mark.parametrize("inv", [2.0**-16, 1 / 3.0, 1.0])
def test_kernel_equals_numpy_bit_for_bit(dtype, bad, inv):
    inv = np.float32(inv)
    a, b = _grads(dtype, 0, bad), _grads(dtype, 0, bad)
    assert uk.unscale_group(a, inv) == uk.unscale_numpy(b, inv) == bool(bad)
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize("use_kernel", [True, False])
def test_the_scaled_values_are_checked_not_the_products(use_kernel):
    a = np.array([3.0e38, 1.0], np.float32)
    assert uk.unscale_group([a], np.float32(4.0), use_kernel=use_kernel) is False
    assert a[0] == np.inf and a[1] == 4.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equals_pytorch(dtype):
    torch = pytest.importorskip("torch")
    for bad in CASES:
        ours = [np.ascontiguousarray(g) for g in _grads(dtype, 1, bad)]
        theirs = [torch.from_numpy(g.copy()) for g in ours]
        found, inv = torch.zeros(()), torch.full((), 1 / 3.0)
        torch._amp_foreach_non_finite_check_and_unscale_(theirs, found, inv)
        assert uk.unscale_group(ours, np.float32(inv.item())) == bool(found.item())
        for x, y in zip(ours, theirs):
            assert x.tobytes() == y.numpy().tobytes()
