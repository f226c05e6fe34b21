"""bfloat16 on a real GPU: the capability and the refusal where CuPy has no bfloat16; skips
without a GPU.

On a GPU machine: ``python -m pytest -q tests/cuda/test_gpu_bf16.py``. CuPy >= 14 with
ml_dtypes computes bfloat16 natively (``test_gpu_bf16_native.py``); older CuPy refuses
bfloat16 tensors with a TypeError naming its version and what is needed.
"""
import pytest

import ember as em
from ember.device import cuda_bf16 as bf
from test_gpu_pinned import gpu  # noqa: F401 - the module-scoped real-GPU fixture


def test_capability_follows_the_probe(gpu):  # noqa: F811
    import cupy
    ok, why = bf.probe(cupy)
    if not ok:
        assert "bfloat16" not in gpu.capabilities and gpu.bf16_why == why
    elif "bfloat16" not in gpu.capabilities:      # NOTE: the first use's round trip failed
        assert "astype" in gpu.bf16_why
    assert em.cuda.is_bf16_supported() == (gpu.has("bfloat16") and
                                           em.cuda.get_device_capability() >= (8, 0))


def test_bf16_tensors_on_the_gpu_are_refused_clearly(gpu):  # noqa: F811
    # NOTE: CuPy < 14 or no ml_dtypes: a GPU refuses bfloat16 tensors, naming why
    if "bfloat16" in gpu.capabilities:
        pytest.skip("this CuPy computes bfloat16 on the GPU (test_gpu_bf16_native.py)")
    with pytest.raises(TypeError, match="CuPy >= 14 with ml_dtypes.*valid: float16, float32"):
        em.ones(2, dtype=em.bfloat16, device="cuda")
    with pytest.raises(TypeError, match="bfloat16"):
        em.ones(2, dtype=em.bfloat16).cuda()
    from ember.ops.registry import REGISTRY
    REGISTRY["cast"]._kcache.pop("cuda", None)     # NOTE: resolved again for this backend
    with pytest.raises(TypeError, match="cast.*CuPy >= 14 with ml_dtypes"):
        em.ones(2, device="cuda").to(em.bfloat16)


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
