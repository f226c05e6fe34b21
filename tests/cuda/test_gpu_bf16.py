"""bfloat16 conversion kernels and defaults on a real GPU (CuPy); skips elsewhere.

On a GPU machine: ``python -m pytest -q tests/cuda/test_gpu_bf16.py``. The kernels
(``ember/device/cuda_bf16.py``, NVRTC through ``cupy.RawModule``) must agree bit for bit
with the array-level reference that ``test_bf16_storage.py`` checks against ml_dtypes.
"""
import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember.device import cuda_bf16 as bf
from test_bf16_storage import _boundaries
from test_gpu_pinned import gpu  # noqa: F401 - the module-scoped real-GPU fixture


def test_round_kernel_matches_the_reference(gpu):  # noqa: F811
    import cupy
    x = _boundaries()
    got = cupy.asnumpy(bf.round_to_bf16(cupy.asarray(x)))
    want = bf.round_bits(np, x)
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.isnan(got[nan].view(ml_dtypes.bfloat16).astype(np.float32)).all()


def test_widen_kernel_is_exact(gpu):  # noqa: F811
    import cupy
    bits = np.arange(1 << 16, dtype=np.uint16)
    got = cupy.asnumpy(bf.widen(cupy.asarray(bits)))
    np.testing.assert_array_equal(got.view(np.uint32), bf.widen_bits(np, bits).view(np.uint32))
    strided = cupy.asarray(bits.reshape(256, 256))[:, ::3]
    np.testing.assert_array_equal(cupy.asnumpy(bf.widen(strided)),
                                  bf.widen_bits(np, bits.reshape(256, 256)[:, ::3]))
    assert bf.widen(cupy.empty(0, np.uint16)).shape == (0,)


def test_bf16_tensors_on_the_gpu_are_refused_clearly(gpu):  # noqa: F811
    # NOTE: until the dispatcher computes bfloat16 through float32 on a device storing bit
    # patterns, a GPU refuses bfloat16 tensors and says what to use instead
    assert em.cuda.is_bf16_supported() == ("bfloat16" in gpu.capabilities)
    if "bfloat16" in gpu.capabilities:
        pytest.skip("this backend computes bfloat16 on the GPU")
    with pytest.raises(TypeError, match="bfloat16.*valid: float16, float32"):
        em.ones(2, dtype=em.bfloat16, device="cuda")
    with pytest.raises(TypeError, match="bfloat16"):
        em.ones(2, dtype=em.bfloat16).cuda()


def test_default_device_and_map_location_on_the_gpu(gpu, tmp_path):  # noqa: F811
    import cupy
    em.set_default_device("cuda")
    try:
        x = em.arange(4.0)
        assert isinstance(x._data, cupy.ndarray) and x.device == em.device("cuda:0")
        assert isinstance(em.nn.Linear(2, 2).weight._data, cupy.ndarray)
    finally:
        em.set_default_device(None)
    p = tmp_path / "g.safetensors"
    em.save({"x": x}, p)
    assert em.load(p)["x"].device.type == "cuda"
    assert em.load(p, map_location="cpu")["x"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert em.load(p, map_location={"cuda:0": "cpu"})["x"].device.type == "cpu"
    assert not em.cuda.get_device_name().startswith("Ember fake")
    assert em.cuda.get_device_capability() == (em.cuda.get_device_properties().major,
                                               em.cuda.get_device_properties().minor)
