"""``set_default_device``, ``load(map_location=)`` and the device queries on the stand-in.

PyTorch's semantics: factories without ``device=`` follow ``set_default_device``; ``load``
restores each tensor to the device it was saved from unless ``map_location`` (a str, a
device, a dict of locations or a callable) says otherwise.
"""
import numpy as np
import pytest

import ember as em


@pytest.fixture
def default_cuda(fake_cuda2):
    em.set_default_device("cuda")
    yield fake_cuda2
    em.set_default_device(None)


def test_factories_follow_the_default_device(default_cuda):
    assert em.get_default_device() == em.device("cuda:0")
    made = [em.zeros(2), em.ones(2, 3), em.empty(1), em.full((2,), 3.0), em.tensor([1.0, 2.0]),
            em.arange(4), em.linspace(0, 1, 3), em.eye(2), em.rand(2), em.randn(2),
            em.randint(0, 5, (3,)), em.as_tensor(np.ones(2)), em.nn.Linear(2, 3).weight]
    assert [t.device for t in made] == [em.device("cuda:0")] * len(made)
    assert em.zeros(2, device="cpu").device.type == "cpu"      # an explicit device wins
    assert (em.ones(2) + 1).device == em.device("cuda:0")
    assert em.tensor([1.0, 2.0]).cpu().tolist() == [1.0, 2.0]


def test_default_device_index_and_reset(default_cuda):
    em.set_default_device("cuda:1")
    assert em.zeros(1).device == em.device("cuda:1")
    em.cuda.set_device(1)
    em.set_default_device("cuda")          # "cuda": the current device at the call
    assert em.get_default_device() == em.device("cuda:1")
    em.cuda.set_device(0)
    em.set_default_device(0)               # an int is a CUDA index, as in torch.device(0)
    assert em.ones(1).device == em.device("cuda:0")
    with pytest.raises(RuntimeError, match="invalid device ordinal cuda:2"):
        em.set_default_device("cuda:2")
    em.set_default_device("cpu")
    assert em.get_default_device() == em.device("cpu") and em.zeros(1).device.type == "cpu"


def test_default_device_without_a_gpu_is_refused_naming_why():
    with pytest.raises(RuntimeError, match=r"no CUDA device is available.*valid here: the "
                                           r"CPU"):
        em.set_default_device("cuda")
    assert em.zeros(1).device.type == "cpu"


def test_a_device_as_a_context_manager_sets_the_default_inside(fake_cuda2):
    with em.device("cuda:1") as d:
        assert d == em.device("cuda:1")
        assert em.zeros(1).device == d and em.nn.Linear(2, 2).weight.device == d
        with em.device("cpu"):
            assert em.ones(1).device.type == "cpu"
        assert em.randn(2).device == d
    assert em.get_default_device() == em.device("cpu")
    em.set_default_device("cuda:0")
    try:
        with em.device("cuda:1"):
            assert em.ones(1).device == em.device("cuda:1")
        assert em.ones(1).device == em.device("cuda:0")     # the previous default is back
    finally:
        em.set_default_device(None)
    with pytest.raises(RuntimeError, match="invalid device ordinal cuda:2"):
        with em.device("cuda:2"):
            pass
    assert em.get_default_device() == em.device("cpu")


def test_a_cuda_device_block_without_a_gpu_is_refused():
    with pytest.raises(RuntimeError, match="no CUDA device is available"):
        with em.device("cuda"):
            pass
    assert em.get_default_device() == em.device("cpu")


@pytest.fixture
def saved(fake_cuda2, tmp_path):
    path = tmp_path / "mixed.safetensors"
    em.save({"g": em.arange(3.0, device="cuda:1"), "c": em.ones(2),
             "nested": [em.full((1,), 2.0, device="cuda:0")]}, path)
    return path


def test_load_restores_saved_devices_by_default(saved):
    d = em.load(saved)
    assert (d["g"].device, d["c"].device, d["nested"][0].device) == (
        em.device("cuda:1"), em.device("cpu"), em.device("cuda:0"))
    assert d["g"].cpu().tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("loc, want", [
    ("cpu", ("cpu", "cpu", "cpu")),
    (em.device("cuda:1"), ("cuda:1", "cuda:1", "cuda:1")),
    ("cuda", ("cuda:0", "cuda:0", "cuda:0")),
    ({"cuda:1": "cpu"}, ("cpu", "cpu", "cuda:0")),
    ({"cuda:0": em.device("cuda:1"), "cpu": "cuda:0"}, ("cuda:1", "cuda:0", "cuda:1")),
])
def test_load_map_location_str_device_dict(saved, loc, want):
    d = em.load(saved, map_location=loc)
    assert tuple(str(d[k].device) for k in ("g", "c")) + (str(d["nested"][0].device),) == want


def test_load_map_location_callable(saved):
    seen = []

    def place(t, location):
        seen.append(location)
        assert t.device.type == "cpu"
        return None if location == "cuda:1" else t     # None: where it was saved
    d = em.load(saved, map_location=place)
    assert sorted(seen) == ["cpu", "cuda:0", "cuda:1"]
    assert (str(d["g"].device), str(d["c"].device), str(d["nested"][0].device)) == (
        "cuda:1", "cpu", "cpu")
    d = em.load(saved, map_location=lambda t, loc: t.cuda(1))
    assert {str(d[k].device) for k in ("g", "c")} == {"cuda:1"}
    with pytest.raises(TypeError, match=r"map_location\('cuda:\d'\) returned a str"):
        em.load(saved, map_location=lambda t, loc: "cpu")
    with pytest.raises(ZeroDivisionError):      # the callable's own error, not "malformed"
        em.load(saved, map_location=lambda t, loc: 1 / 0)
    with pytest.raises(TypeError, match="a dict or a callable, got int"):
        em.load(saved, map_location=3)


def test_load_of_a_cuda_checkpoint_without_a_gpu_names_map_location(saved, monkeypatch):
    from ember.device.base import reset_cuda_backend
    monkeypatch.delenv("EMBER_FAKE_CUDA")
    reset_cuda_backend()
    with pytest.raises(RuntimeError, match=r"deserialize a tensor on cuda:1 but "
                                           r"ember.cuda.is_available\(\) is False.*"
                                           r"map_location='cpu'"):
        em.load(saved)
    assert em.load(saved, map_location="cpu")["g"].tolist() == [0.0, 1.0, 2.0]


def test_device_name_properties_capability_bf16(fake_cuda):
    assert em.cuda.get_device_name().startswith("Ember fake CUDA device")
    assert em.cuda.get_device_name(0) == em.cuda.get_device_properties(0).name
    p = em.cuda.get_device_properties("cuda:0")
    assert (p.major, p.minor) == em.cuda.get_device_capability(em.device("cuda:0")) == (9, 0)
    assert p.total_memory > 0 and p.multi_processor_count > 0
    assert em.cuda.is_bf16_supported() and em.cuda.is_bf16_supported(including_emulation=False)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        em.cuda.get_device_name(3)


def test_device_queries_without_a_gpu():
    assert not em.cuda.is_bf16_supported()
    with pytest.raises(RuntimeError, match="no CUDA device is present"):
        em.cuda.get_device_name()


def test_default_cuda_device_draws_from_the_cuda_generator(default_cuda):
    em.cuda.manual_seed(7)
    a = em.rand(4)
    em.cuda.manual_seed(7)
    b = em.rand(4, device="cuda")
    assert a.device == b.device and a.cpu().tolist() == b.cpu().tolist()
