"""``test_eager_gpt_ops_device.py``'s checks on a real GPU (skip: "no CUDA GPU/CuPy"):
eager ``F.linear`` as the ``linear`` primitive, the bits of matmul + add, in every float
dtype and under autocast; attention's VJP into the unbind's slots, the bits of the flat
``sdpa_grad`` and the stack (the flash kernels writing strided slot views); an
out-of-range class target named by the compiled cross entropy."""
import pytest

from test_eager_gpt_ops_device import CASES, _check, _check_attention, _check_targets_on_cuda
from test_gpu import gpu  # noqa: F401 - the module-scoped real-GPU fixture


@pytest.mark.parametrize("dtype, autocast", CASES)
def test_linear_same_bits_as_the_composite(gpu, monkeypatch, dtype, autocast):  # noqa: F811
    _check(monkeypatch, dtype, autocast)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_attention_gradient_into_the_unbind_slots(gpu, monkeypatch, dtype):  # noqa: F811
    _check_attention(monkeypatch, dtype)


def test_out_of_range_targets_are_named(gpu):  # noqa: F811
    """CuPy's indexing wraps out-of-range indices: the compiled cross entropy's check
    names the target instead of a silently wrong loss."""
    _check_targets_on_cuda()
