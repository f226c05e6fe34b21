"""Every OpInfo entry on the ``meta`` device: the outputs (and, for differentiable entries,
the gradients) have exactly the shapes and dtypes the CPU gives, or the entry raises —
a meta tensor never yields a shape made up from its placeholder values."""
import zlib

import numpy as np
import pytest

import ember as em

from ember.ops.registry import REGISTRY
from opinfo import OPINFOS
from opinfo.core import to_tensors

#: how an entry may refuse meta inputs: its output's shape depends on values (PyTorch's
#: meta tensors refuse the same ops), or it reads values on the host (``item()``)
REFUSALS = (NotImplementedError, RuntimeError)


def _rng(info):
    return np.random.default_rng(zlib.crc32(("meta" + info.name).encode()))


def _args(sample, device, requires_grad=False):
    return to_tensors(sample.args, device=device, requires_grad=requires_grad)


def _outs(r):
    rs = r if isinstance(r, (tuple, list)) else (r,)
    return [t for t in rs if isinstance(t, em.Tensor)]


def _meta(t):
    return tuple(t.shape), t.dtype


def _loss(o):
    return (o.abs() if o.dtype.is_complex else o).sum()


def _check_refusal(info, sample, e):
    assert "meta" in str(e) or "depends on the input's values" in str(e), \
        f"{info.name} {sample.name}: refused meta inputs without saying why: {e}"


@pytest.mark.parametrize("info", OPINFOS, ids=repr)
def test_meta_matches_cpu_shapes_and_dtypes(info):
    dtype = np.dtype(info.dtypes[0])
    grad = info.grad and dtype.kind in "fc"
    for s in info.samples(_rng(info), dtype)[:3]:
        cpu = _args(s, "cpu", requires_grad=grad and s.grad)
        want = _outs(info.fn(*cpu, **s.kwargs))
        meta = _args(s, "meta", requires_grad=grad and s.grad)
        try:
            got = _outs(info.fn(*meta, **s.kwargs))
        except REFUSALS as e:
            _check_refusal(info, s, e)
            continue
        assert [_meta(t) for t in got] == [_meta(t) for t in want], \
            f"{info.name} {s.name}: meta outputs differ from the CPU's"
        assert all(t.device.type == "meta" for t in got), f"{info.name}: left the meta device"
        if not (grad and s.grad):
            continue
        pairs = [(w, g) for w, g in zip(want, got) if w.requires_grad and w.dtype.is_inexact]
        if not pairs:
            continue
        em.autograd.backward([_loss(w) for w, _ in pairs])
        try:
            em.autograd.backward([_loss(g) for _, g in pairs])
        except REFUSALS as e:     # a backward that branches on values (a singular matrix?)
            _check_refusal(info, s, e)
            continue
        gw = [a.grad for a in cpu if isinstance(a, em.Tensor) and a.requires_grad]
        gm = [a.grad for a in meta if isinstance(a, em.Tensor) and a.requires_grad]
        assert [None if g is None else _meta(g) for g in gm] == \
            [None if g is None else _meta(g) for g in gw], \
            f"{info.name} {s.name}: meta gradients differ from the CPU's"
        assert all(g is None or g.device.type == "meta" for g in gm)


def test_every_primitive_has_a_meta_kernel():
    """The meta kernel is the op's shape rule (or broadcasting): only ops whose output shape
    depends on values may lack both."""
    data_dependent = {"nonzero"}
    lacking = sorted(n for n, op in REGISTRY.items()
                     if op.shape is None and not op.elementwise and n not in data_dependent)
    assert not lacking, f"primitives without a shape rule (no meta kernel): {lacking}"
    x = em.empty(3, device="meta")
    with pytest.raises(NotImplementedError, match="nonzero: the output's shape depends"):
        em.nonzero(x)
