"""Tests generated from the OpInfo tables (tests/opinfo) and the op registry.

For every entry: forward vs NumPy (float32/float64; broadcasting, non-contiguous views,
zero-size dims), VJP and JVP vs central differences in float64, the inner-product
identity between VJP and JVP, and a second-order check. A last test fails if any
registered primitive is exercised by no entry.
"""
import zlib

import numpy as np
import pytest

import ember as em
from ember.autograd import forward_ad as fwad
from ember.autograd.gradcheck import gradcheck, gradgradcheck
from ember.ops.registry import REGISTRY

from opinfo import OPINFOS
from opinfo.core import noncontiguous, to_tensors

PAIRS = [(info, dt) for info in OPINFOS for dt in info.dtypes]
GRAD = [info for info in OPINFOS if info.grad]


def _rng(info, salt=""):
    return np.random.default_rng(zlib.crc32((info.name + salt).encode()))


def _to_em(args, make=lambda a: a, requires_grad=False):
    return to_tensors(args, make, requires_grad=requires_grad)


def _outputs(r, info):
    rs = r if isinstance(r, (tuple, list)) else (r,)
    if info.out_index is not None:
        rs = (rs[info.out_index],)
    return rs


def _check_forward(info, dtype, sample, make, label):
    args = _to_em(sample.args, make)
    got = info.fn(*args, **sample.kwargs)
    ref = info.ref(*[a.copy() if isinstance(a, np.ndarray) else a for a in sample.args],
                   **sample.kwargs)
    gots, refs = _outputs(got, info), _outputs(ref, info)
    assert len(gots) == len(refs), f"{info.name}[{label}]: {len(gots)} outputs vs {len(refs)}"
    for g, r in zip(gots, refs):
        r = np.asarray(r)
        assert isinstance(g, em.Tensor), f"{info.name}[{label}]: returned {type(g).__name__}"
        assert tuple(g.shape) == r.shape, \
            f"{info.name}[{label}] {sample.name}: shape {tuple(g.shape)} vs NumPy {r.shape}"
        if info.exact_dtype:
            assert g.dtype.np == r.dtype, \
                f"{info.name}[{label}] {sample.name}: dtype {g.dtype} vs NumPy {r.dtype}"
        gv = g.detach().numpy()
        if r.dtype.kind in "fc":
            wide = np.complex128 if "c" in (r.dtype.kind, gv.dtype.kind) else np.float64
            np.testing.assert_allclose(
                gv.astype(wide), r.astype(wide), atol=info.atol.get(dtype, 1e-5),
                rtol=info.rtol.get(dtype, 1e-4), equal_nan=True,
                err_msg=f"{info.name}[{label}] sample {sample.name}")
        else:
            np.testing.assert_array_equal(gv, r, err_msg=f"{info.name}[{label}] {sample.name}")
        if len(info.primitives) == 1 and REGISTRY[info.primitives[0]].view is False:
            for a in args:
                if isinstance(a, em.Tensor) and a.numel() and g.numel():
                    assert not np.shares_memory(gv, a.numpy()), \
                        f"{info.name}: a non-view primitive returned memory aliasing its input"


@pytest.mark.parametrize("info,dtype", PAIRS, ids=[f"{i.name}-{d}" for i, d in PAIRS])
def test_forward_matches_numpy(info, dtype):
    samples = info.samples(_rng(info), np.dtype(dtype))
    assert samples, f"{info.name}: no samples"
    for s in samples:
        _check_forward(info, dtype, s, lambda a: a, "contiguous")
        if info.noncontig:
            _check_forward(info, dtype, s, noncontiguous, "non-contiguous")


def _grad_samples(info):
    return [s for s in info.samples(_rng(info, "grad"), np.dtype(info.grad_dtype)) if s.grad]


def _float_args(args):
    return [i for i, a in enumerate(args) if isinstance(a, em.Tensor) and a.requires_grad]


def _fn_of(info, sample):
    def f(*xs):
        r = info.fn(*xs, **sample.kwargs)
        return tuple(_outputs(r, info))
    return f


@pytest.mark.parametrize("info", GRAD, ids=repr)
def test_vjp_and_jvp_match_central_differences(info):
    samples = _grad_samples(info)
    assert samples, f"{info.name}: no gradient samples"
    for s in samples:
        args = _to_em(s.args, requires_grad=True)
        assert gradcheck(_fn_of(info, s), tuple(args), atol=info.grad_atol,
                         rtol=info.grad_rtol, check_forward_ad=info.jvp)


def _randn(rng, like):
    """A random tensor shaped like ``like`` (complex values for complex ``like``)."""
    if like.dtype.is_complex:
        return em.tensor(rng.standard_normal(like.shape) + 1j * rng.standard_normal(like.shape),
                         dtype=like.dtype)
    return em.tensor(rng.standard_normal(like.shape))


def _rdot(a, b) -> float:
    """The real inner product (complex values as pairs of reals: Re(sum(conj(a) * b)))."""
    a, b = a.detach().numpy(), b.detach().numpy()
    return float(np.sum(np.real(np.conj(a) * b)))


@pytest.mark.parametrize("info", [i for i in GRAD if i.jvp], ids=repr)
def test_vjp_jvp_inner_product_identity(info):
    rng = _rng(info, "ip")
    for s in _grad_samples(info):
        args = _to_em(s.args, requires_grad=True)
        idx = _float_args(args)
        f = _fn_of(info, s)
        outs = f(*args)
        cots = [_randn(rng, o) for o in outs]
        tans = {i: _randn(rng, args[i]) for i in idx}
        diff_outs = [(o, c) for o, c in zip(outs, cots) if o.requires_grad]
        vjps = em.autograd.grad([o for o, _ in diff_outs], [args[i] for i in idx],
                                [c for _, c in diff_outs], allow_unused=True)
        lhs = sum(_rdot(tans[i], g) for i, g in zip(idx, vjps) if g is not None)
        with fwad.dual_level():
            duals = [fwad.make_dual(a.detach(), tans[k]) if k in tans else a
                     for k, a in enumerate(args)]
            jouts = f(*duals)
            rhs = 0.0
            for o, c in zip(jouts, cots):
                t = fwad.unpack_dual(o).tangent
                if t is not None:
                    rhs += _rdot(t, c)
        assert abs(lhs - rhs) <= 1e-8 * max(1.0, abs(lhs)), \
            f"{info.name} {s.name}: <t, vjp(c)> = {lhs} but <jvp(t), c> = {rhs}"


@pytest.mark.parametrize("info", [i for i in GRAD if i.gradgrad], ids=repr)
def test_second_order(info):
    samples = _grad_samples(info)[:2]
    for s in samples:
        args = _to_em(s.args, requires_grad=True)
        assert gradgradcheck(_fn_of(info, s), tuple(args), atol=info.grad_atol,
                             rtol=info.grad_rtol)


def test_every_primitive_has_an_opinfo():
    covered = {p for info in OPINFOS for p in info.primitives}
    missing = sorted(set(REGISTRY) - covered)
    assert not missing, f"primitives with no OpInfo entry: {missing}"


def test_opinfo_primitives_exist():
    unknown = sorted({p for info in OPINFOS for p in info.primitives} - set(REGISTRY))
    assert not unknown, f"OpInfo entries name unknown primitives: {unknown}"
