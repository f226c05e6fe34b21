"""Eager elementwise kernels on contiguous operands launch through ``launch.py``'s one-call
launcher (``eager._fast_launch``): the same kernel, the same bits as the ctypes path."""
import numpy as np
import pytest

import ember
from ember import config
from ember.codegen import eager, launch
from ember.ops.registry import REGISTRY

pytestmark = pytest.mark.usefixtures("cc")

_CASES = [("threshold_backward", 2, {"threshold": 0.0}), ("exp", 1, {}), ("tanh", 1, {}),
          ("threshold_backward", 2, {"threshold": 0.25})]


@pytest.fixture
def kernels_on():
    prev = config.set_eager_kernels(True)
    eager.configure(thresholds={op: 1 for op in eager.THRESHOLDS}, warmup=0)
    yield
    eager.configure(reset=True)
    config.set_eager_kernels(prev)


def _inputs(n, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal(shape) * 3).astype(dtype) for _ in range(n)]
    xs[0].flat[:4] = [np.nan, np.inf, -0.0, 0.0]
    return xs


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(128, 512), (7,), (3, 5, 2), (1 << 19,)])
@pytest.mark.parametrize("name,nin,params", _CASES)
def test_fast_launch_same_bits_as_ctypes_path(kernels_on, monkeypatch, dtype, shape, name,
                                              nin, params):
    if launch.launcher() is None:
        pytest.skip("no one-call launcher on this build (the ctypes path is the only one)")
    op = REGISTRY[name]
    xs = _inputs(nin, shape, dtype, seed=len(shape))
    first = eager.run(op, xs, params)                 # builds the layout's function
    if first is None:
        # NOTE: only float16 ops NumPy runs in SIMD are left to NumPy (_numpy_f16_simd)
        assert dtype is np.float16
        pytest.skip(f"eager kernels leave float16 {name} to NumPy on this CPU")
    eager._fast.clear()
    fast = eager.run(op, xs, params)
    assert fast is not None and any(k[0] == id(v[4]) for k, v in eager._fast.items() if v)
    monkeypatch.setattr(eager, "_fast_launch", lambda *a: None)
    slow = eager.run(op, xs, params)
    assert fast.dtype == slow.dtype == np.dtype(dtype) and fast.shape == slow.shape
    np.testing.assert_array_equal(fast.view(np.uint8), slow.view(np.uint8))


def test_two_threads_and_new_sizes(kernels_on):
    if launch.launcher() is None:
        pytest.skip("no one-call launcher on this build")
    op = REGISTRY["threshold_backward"]
    prev = ember.get_num_threads()
    ember.set_num_threads(2)
    try:
        for n in (1 << 19, 1000, 1 << 19):
            g, y = _inputs(2, (n,), np.float32, seed=n)
            out = eager.run(op, [g, y], {"threshold": 0.0})
            want = np.where(y <= 0, np.float32(0), g)
            np.testing.assert_array_equal(out.view(np.int32), want.view(np.int32))
    finally:
        ember.set_num_threads(prev)


def test_broadcast_operands_keep_the_strided_path(kernels_on):
    op = REGISTRY["threshold_backward"]
    g = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    y = np.array([1, -1, 0, 2], np.float32)
    out = eager.run(op, [g, y], {"threshold": 0.0})
    np.testing.assert_array_equal(out, np.where(y <= 0, np.float32(0), g))
