"""Small PyTorch names a drop-in user meets: ``testing.make_tensor``, ``utils.dlpack``,
``nn.utils.rnn.invert_permutation``, ``nn.modules.utils.consume_prefix_in_state_dict_if_present``."""
import collections

import numpy as np
import pytest

import ember as em
from ember.nn.modules.utils import consume_prefix_in_state_dict_if_present
from ember.nn.utils.rnn import invert_permutation
from ember.testing import make_tensor


@pytest.mark.parametrize("dtype", [em.float16, em.bfloat16, em.float32, em.float64, em.int8,
                                   em.uint8, em.int16, em.int32, em.int64])
def test_make_tensor_ranges_and_options(dtype):
    t = make_tensor(40, 50, dtype=dtype, device="cpu")
    a = t.float().numpy()
    lo = 0 if dtype is em.uint8 else -9
    assert t.shape == (40, 50) and t.dtype is dtype
    # NOTE: [low, high) before rounding: a low-precision float may round up to high
    top_ok = a.max() <= 9 if dtype.is_floating_point else a.max() < 9
    assert a.min() >= lo and top_ok and a.min() < lo + 2 and a.max() > 7   # and spread
    u = make_tensor((3, 4), dtype=dtype, device="cpu", low=0, high=3, exclude_zero=True,
                    noncontiguous=True)
    assert not u.is_contiguous() and bool((u != 0).all())
    assert bool((u.float() >= 0).all()) and bool((u.float() <= 3).all())
    if dtype.is_floating_point:
        assert make_tensor(2, dtype=dtype, device="cpu", requires_grad=True).requires_grad


def test_make_tensor_bool_complex_clamps_and_errors():
    b = make_tensor(1000, dtype=em.bool, device="cpu")
    assert b.dtype is em.bool and 300 < int(b.sum()) < 700
    c = make_tensor(500, dtype=em.complex64, device="cpu", low=-1, high=1)
    assert c.dtype is em.complex64
    assert np.abs(c.real.numpy()).max() <= 1 and np.abs(c.imag.numpy()).max() <= 1
    assert np.abs(c.imag.numpy()).max() > 0.5
    wide = make_tensor(500, dtype=em.int8, device="cpu", low=-1000, high=1000).numpy()
    wide = wide.astype(np.int64)
    assert wide.min() >= -128 and wide.max() <= 127 and wide.max() - wide.min() > 200
    with pytest.raises(ValueError, match="`low` must be less than or equal to `high`"):
        make_tensor(2, dtype=em.float32, device="cpu", low=2, high=1)
    with pytest.raises(ValueError, match="NaN"):
        make_tensor(2, dtype=em.float32, device="cpu", low=float("nan"))


def test_dlpack_module_shares_memory_both_ways():
    a = np.arange(4.0)
    t = em.utils.dlpack.from_dlpack(a)
    a[0] = 7.0
    assert t[0].item() == 7.0
    back = np.from_dlpack(_Capsule(em.utils.dlpack.to_dlpack(t)))
    t[1] = 5.0
    assert back[1] == 5.0
    assert em.utils.dlpack.DLDeviceType(t.__dlpack_device__()[0]) is \
        em.utils.dlpack.DLDeviceType.kDLCPU


class _Capsule:
    """A legacy capsule offered through the protocol NumPy reads."""

    def __init__(self, cap):
        self.cap = cap

    def __dlpack__(self, **kwargs):
        return self.cap

    def __dlpack_device__(self):
        return (1, 0)


def test_invert_permutation():
    p = em.randperm(9, generator=em.Generator().manual_seed(3))
    inv = invert_permutation(p)
    assert p[inv].tolist() == list(range(9)) and inv[p].tolist() == list(range(9))
    assert invert_permutation(None) is None


def test_consume_prefix_strips_keys_and_metadata():
    sd = collections.OrderedDict([("module.a", 1), ("module.b.c", 2), ("x", 3)])
    sd._metadata = {"": {"r": 0}, "module": {"v": 1}, "module.b": {"w": 2}}
    consume_prefix_in_state_dict_if_present(sd, "module.")
    assert list(sd.items()) == [("x", 3), ("a", 1), ("b.c", 2)]
    assert sd._metadata == {"": {"v": 1}, "b": {"w": 2}}
    model = em.nn.Sequential(em.nn.Linear(2, 2))
    ddp_style = {"module." + k: v for k, v in model.state_dict().items()}
    consume_prefix_in_state_dict_if_present(ddp_style, "module.")
    model.load_state_dict(ddp_style)


def test_sdpa_kernel_sets_the_flags_and_restores_them(monkeypatch):
    from ember.nn.attention import SDPBackend, sdpa_kernel
    from ember.ops import attention as att
    flags = em.backends.cuda
    assert flags.is_built() and flags.flash_sdp_enabled()
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION]):
        assert not flags.flash_sdp_enabled() and flags.math_sdp_enabled()
        assert flags.cudnn_sdp_enabled() and not flags.mem_efficient_sdp_enabled()
    assert flags.flash_sdp_enabled() and flags.mem_efficient_sdp_enabled()

    class GPU:                       # a backend with the GPU's generated kernels
        def has(self, cap):
            return cap == "cuda_kernels"
    from ember.codegen import cuda_attention as ca
    from ember.device.base import _backends
    monkeypatch.setitem(_backends, "cuda", GPU())
    monkeypatch.setattr(ca, "supported", lambda *a: True)
    q = np.zeros((1, 1, 4, 8), np.float16)
    assert att._flash(q, q, q) is ca
    with sdpa_kernel(SDPBackend.MATH):
        assert att._flash(q, q, q) is None          # the GPU's attention skips flash
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        assert att._flash(q, q, q) is ca
    with pytest.raises(TypeError, match="expected SDPBackend"):
        with sdpa_kernel("flash"):
            pass
