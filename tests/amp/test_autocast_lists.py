"""Every op on Ember's CPU autocast lists gets the dtype PyTorch gives under
``torch.autocast("cpu")`` (PyTorch as an oracle when installed; the table's policy always)."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import ember
import ember.nn.functional as EF
from ember.amp import OP_LISTS

try:
    import torch
    import torch.nn.functional as TF
except ImportError:    # PyTorch is an optional oracle
    torch = TF = None

LOW = ("bfloat16", "float16")
_rng = np.random.default_rng(0)
# name -> numpy array (float inputs are cast to the case's dtype; integer ones kept)
_ARR = {
    "x": _rng.standard_normal((4, 4)), "y": _rng.standard_normal((4, 4)),
    "v": _rng.standard_normal(4), "b3": _rng.standard_normal((2, 4, 4)),
    "img": _rng.standard_normal((1, 2, 5, 5)), "w": _rng.standard_normal((3, 2, 3, 3)),
    "wt": _rng.standard_normal((2, 3, 3, 3)), "t1": _rng.standard_normal((1, 2, 5)),
    "w1": _rng.standard_normal((3, 2, 3)), "wt1": _rng.standard_normal((2, 3, 3)),
    "p": _rng.uniform(0.1, 0.9, (4, 4)), "a": np.array([0.25]),
    "sign": np.array([1.0, -1.0, 1.0, -1.0]), "q": _rng.standard_normal((2, 3, 4, 8)),
    "tgt": np.array([0, 3, 1, 2]), "idx": np.array([0, 2]),
    "vol": _rng.standard_normal((1, 2, 4, 4, 4)), "w3": _rng.standard_normal((3, 2, 3, 3, 3)),
    "wt3": _rng.standard_normal((2, 3, 2, 2, 2)),
}
_ARR["grid"] = _rng.uniform(-1, 1, (1, 3, 3, 2))
_ARR["spd"] = _ARR["x"] @ _ARR["x"].T + 4 * np.eye(4)   # well-conditioned, positive definite


def _lu_solve(m, F, t):
    with m.autocast("cpu", enabled=False):     # the factorisation's own dtype is not checked
        LU, piv = m.linalg.lu_factor(t.spd.float())
    return m.lu_solve(t.x, LU, piv)


#: (table name, fn(lib, F, t), names of the float inputs). ``lib`` is ember or torch.
CASES = [
    ("matmul", lambda m, F, t: m.matmul(t.x, t.y)),
    ("mm", lambda m, F, t: m.mm(t.x, t.y)),
    ("bmm", lambda m, F, t: m.bmm(t.b3, t.b3)),
    ("baddbmm", lambda m, F, t: m.baddbmm(t.b3, t.b3, t.b3)),
    ("addmm", lambda m, F, t: m.addmm(t.v, t.x, t.y)),
    ("addbmm", lambda m, F, t: m.addbmm(t.x, t.b3, t.b3)),
    ("addmv", lambda m, F, t: m.addmv(t.v, t.x, t.v)),
    ("addr", lambda m, F, t: m.addr(t.x, t.v, t.v)),
    ("addcmul", lambda m, F, t: m.addcmul(t.x, t.x, t.y)),
    ("addcdiv", lambda m, F, t: m.addcdiv(t.x, t.x, t.p)),
    ("trace", lambda m, F, t: m.trace(t.x)),
    ("einsum", lambda m, F, t: m.einsum("ij,jk->ik", t.x, t.y)),
    ("tensordot", lambda m, F, t: m.tensordot(t.x, t.y, 1)),
    ("mv", lambda m, F, t: m.mv(t.x, t.v)),
    ("dot", lambda m, F, t: m.dot(t.v, t.v)),
    ("linear", lambda m, F, t: F.linear(t.x, t.y, t.v)),
    ("conv1d", lambda m, F, t: F.conv1d(t.t1, t.w1)),
    ("conv2d", lambda m, F, t: F.conv2d(t.img, t.w, padding=1)),
    ("conv_transpose1d", lambda m, F, t: F.conv_transpose1d(t.t1, t.wt1)),
    ("conv_transpose2d", lambda m, F, t: F.conv_transpose2d(t.img, t.wt)),
    ("conv3d", lambda m, F, t: F.conv3d(t.vol, t.w3, padding=1)),
    ("conv_transpose3d", lambda m, F, t: F.conv_transpose3d(t.vol, t.wt3)),
    ("avg_pool3d", lambda m, F, t: F.avg_pool3d(t.vol, 2)),
    ("max_pool3d", lambda m, F, t: F.max_pool3d(t.vol, 2)),
    ("adaptive_avg_pool3d", lambda m, F, t: F.adaptive_avg_pool3d(t.vol, 2)),
    ("adaptive_max_pool3d", lambda m, F, t: F.adaptive_max_pool3d(t.vol, 2)),
    ("max_unpool2d", lambda m, F, t: F.max_unpool2d(
        *F.max_pool2d(t.img, 2, return_indices=True), 2, output_size=(5, 5))),
    ("max_unpool3d", lambda m, F, t: F.max_unpool3d(
        *F.max_pool3d(t.vol, 2, return_indices=True), 2)),
    ("scaled_dot_product_attention",
     lambda m, F, t: F.scaled_dot_product_attention(t.q, t.q, t.q, is_causal=True)),
    ("prelu", lambda m, F, t: F.prelu(t.x, t.a)),
    ("softmax", lambda m, F, t: F.softmax(t.x, -1)),
    ("log_softmax", lambda m, F, t: F.log_softmax(t.x, -1)),
    ("logsumexp", lambda m, F, t: m.logsumexp(t.x, 1)),
    ("layer_norm", lambda m, F, t: F.layer_norm(t.x, (4,), t.v, t.v)),
    ("group_norm", lambda m, F, t: F.group_norm(t.img, 2)),
    ("mse_loss", lambda m, F, t: F.mse_loss(t.x, t.y)),
    ("l1_loss", lambda m, F, t: F.l1_loss(t.x, t.y)),
    ("smooth_l1_loss", lambda m, F, t: F.smooth_l1_loss(t.x, t.y)),
    ("huber_loss", lambda m, F, t: F.huber_loss(t.x, t.y)),
    ("nll_loss", lambda m, F, t: F.nll_loss(t.x, t.tgt)),
    ("cross_entropy", lambda m, F, t: F.cross_entropy(t.x, t.tgt)),
    ("binary_cross_entropy", lambda m, F, t: F.binary_cross_entropy(t.p, t.p)),
    ("binary_cross_entropy_with_logits",
     lambda m, F, t: F.binary_cross_entropy_with_logits(t.x, t.p)),
    ("kl_div", lambda m, F, t: F.kl_div(t.x, t.p, reduction="batchmean")),
    ("cosine_embedding_loss", lambda m, F, t: F.cosine_embedding_loss(t.x, t.y, t.sign)),
    ("margin_ranking_loss", lambda m, F, t: F.margin_ranking_loss(t.v, t.v, t.sign)),
    ("hinge_embedding_loss", lambda m, F, t: F.hinge_embedding_loss(t.x, t.sign)),
    ("soft_margin_loss", lambda m, F, t: F.soft_margin_loss(t.x, t.y)),
    ("poisson_nll_loss", lambda m, F, t: F.poisson_nll_loss(t.x, t.p)),
    ("triplet_margin_loss", lambda m, F, t: F.triplet_margin_loss(t.x, t.y, t.p)),
    ("multi_margin_loss", lambda m, F, t: F.multi_margin_loss(t.x, t.tgt)),
    ("multilabel_margin_loss",
     lambda m, F, t: F.multilabel_margin_loss(t.x, m.tensor([[3, 0, -1, 1]] * 4))),
    ("ctc_loss", lambda m, F, t: F.ctc_loss(F.log_softmax(t.b3, 2), t.tgt.reshape(4, 1),
                                            m.tensor([2] * 4), m.tensor([1] * 4))),
    ("reflection_pad2d", lambda m, F, t: F.pad(t.img, (1, 1, 1, 1), mode="reflect")),
    ("reflection_pad1d", lambda m, F, t: F.pad(t.t1, (1, 1), mode="reflect")),
    ("replication_pad2d", lambda m, F, t: F.pad(t.img, (1, 1, 1, 1), mode="replicate")),
    ("constant_pad_nd", lambda m, F, t: F.pad(t.img, (1, 1, 1, 1))),
    ("cdist", lambda m, F, t: m.cdist(t.x, t.y)),
    ("quantile", lambda m, F, t: m.quantile(t.x, 0.25)),
    ("nanquantile", lambda m, F, t: m.nanquantile(t.x, 0.25)),
    ("prod", lambda m, F, t: m.prod(t.x)),
    ("sum", lambda m, F, t: m.sum(t.x)),
    ("exp", lambda m, F, t: m.exp(t.x)),
    ("relu", lambda m, F, t: F.relu(t.x)),
    ("cosine_similarity", lambda m, F, t: F.cosine_similarity(t.x, t.y)),
    ("softplus", lambda m, F, t: F.softplus(t.x)),
    ("atan2", lambda m, F, t: m.atan2(t.x, t.y)),
    # complex results: compared as their float view (fp32 policy: complex64 -> float32)
    ("polar", lambda m, F, t: m.view_as_real(m.polar(t.p, t.x))),
    ("view_as_complex", lambda m, F, t: m.view_as_real(m.view_as_complex(t.x.reshape(4, 2, 2)))),
    ("stft", lambda m, F, t: m.view_as_real(m.stft(t.x.reshape(-1), 4, window=m.ones(4),
                                                   return_complex=True))),
    ("fft_rfft", lambda m, F, t: m.view_as_real(m.fft.rfft(t.x))),
    ("fft_fft2", lambda m, F, t: m.view_as_real(m.fft.fft2(t.x))),
    # linear algebra (fp32 on CPU), the LAPACK-backed legacy names
    ("cholesky", lambda m, F, t: m.cholesky(t.spd)),
    ("cholesky_inverse", lambda m, F, t: m.cholesky_inverse(t.spd.tril())),
    ("cholesky_solve", lambda m, F, t: m.cholesky_solve(t.x, t.spd.tril())),
    ("inverse", lambda m, F, t: m.inverse(t.spd)),
    ("lu_solve", _lu_solve),
    ("pinverse", lambda m, F, t: m.pinverse(t.x)),
    ("qr", lambda m, F, t: m.qr(t.x)[0]),
    ("svd", lambda m, F, t: m.svd(t.x)[1]),
    ("triangular_solve", lambda m, F, t: m.triangular_solve(t.x, t.spd.triu())[0]),
    ("geqrf", lambda m, F, t: m.geqrf(t.x)[0]),
    ("orgqr", lambda m, F, t: m.orgqr(t.x, t.v)),
    ("ormqr", lambda m, F, t: m.ormqr(t.x, t.v, t.y)),
    ("conv_tbc", lambda m, F, t: m.conv_tbc(t.b3, t.b3, t.v, 1)),
    ("fractional_max_pool2d", lambda m, F, t: F.fractional_max_pool2d(t.img, 2, output_size=2)),
    ("grid_sampler", lambda m, F, t: m.grid_sampler(t.img, t.grid, 0, 0, False)),
    ("grid_sample", lambda m, F, t: F.grid_sample(t.img, t.grid, align_corners=False)),
    ("fractional_max_pool3d", lambda m, F, t: F.fractional_max_pool3d(t.vol, 2, output_size=2)),
]
#: promote-list (and reference) cases, run with one float32 and one low-precision input.
MIXED = [
    ("cat", lambda m, F, t, lo: m.cat([t.x, lo])),
    ("stack", lambda m, F, t, lo: m.stack([t.x, lo])),
    ("index_copy", lambda m, F, t, lo: t.x.index_copy(0, t.idx, lo[:2])),
    ("where", lambda m, F, t, lo: m.where(t.x > 0, t.x, lo)),
    ("add", lambda m, F, t, lo: t.x + lo),
]


#: ops on no CPU list that PyTorch decomposes into listed ones (tensordot -> mm).
DECOMPOSED = {"tensordot": "lower", "grid_sample": "fp32"}


class _T:
    def __init__(self, lib, dtype):
        for k, a in _ARR.items():
            if a.dtype.kind == "f":
                v = lib.tensor(a.astype(np.float32))
                setattr(self, k, v.to(getattr(lib, dtype)))
            else:
                setattr(self, k, lib.tensor(a))


def _dtype_name(r) -> str:
    return str(r.dtype).split(".")[-1]


def _expected(name, in_dtype, low) -> str:
    """What the table says ``name`` returns for ``in_dtype`` inputs under ``low`` autocast."""
    policy = OP_LISTS["cpu"].get(name) or DECOMPOSED.get(name)
    if policy == "lower":
        return low
    if policy == "fp32":
        return "float32"
    return in_dtype


def _run(lib, F, fn, dtype, low, *extra):
    t = _T(lib, dtype)
    with lib.autocast("cpu", dtype=getattr(lib, low)):
        return fn(lib, F, t, *extra)


@pytest.mark.parametrize("low", LOW)
@pytest.mark.parametrize("inputs", ("float32", "low"))
@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_result_dtype_matches_pytorch(name, fn, inputs, low):
    in_dtype = low if inputs == "low" else inputs
    if name in ("cdist", "quantile", "nanquantile") and not hasattr(ember, name):
        pytest.skip(f"ember.{name} is not in this tree yet")
    got = _dtype_name(_run(ember, EF, fn, in_dtype, low))
    assert got == _expected(name, in_dtype, low), (name, in_dtype, low)
    if torch is not None:
        want = _dtype_name(_run(torch, TF, fn, in_dtype, low))
        assert got == want, f"{name}({in_dtype}) under {low} autocast: ember {got}, torch {want}"


@pytest.mark.parametrize("low", LOW)
@pytest.mark.parametrize("name,fn", MIXED, ids=[c[0] for c in MIXED])
def test_mixed_inputs_promote_like_pytorch(name, fn, low):
    def run(lib, F):
        t = _T(lib, "float32")
        lo = lib.tensor(_ARR["y"].astype(np.float32)).to(getattr(lib, low))
        with lib.autocast("cpu", dtype=getattr(lib, low)):
            both = fn(lib, F, t, lo)
            t_low = _T(lib, low)
            t_low.idx = t.idx
            same = fn(lib, F, t_low, lo)
        return _dtype_name(both), _dtype_name(same)
    got = run(ember, EF)
    assert got == ("float32", low)
    if torch is not None:
        assert got == run(torch, TF)


def _implemented(name) -> bool:
    return any(hasattr(mod, name) for mod in (ember, EF, ember.Tensor))


def test_every_listed_op_ember_implements_has_a_case():
    """A CPU-list op Ember implements must be in CASES/MIXED (so its dtype is checked)."""
    covered = {c[0] for c in CASES} | {c[0] for c in MIXED}
    missing = [n for n in OP_LISTS["cpu"] if _implemented(n) and n not in covered]
    assert not missing, f"add these autocast ops to CASES: {missing}"


def _header_lists():
    if torch is None:
        pytest.skip("PyTorch not installed")
    h = pathlib.Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not h.exists():
        pytest.skip("PyTorch's C++ headers not installed")
    text = h.read_text()
    out = {}
    for macro in ("LOWER_PRECISION_FP", "FP32", "FP32_SET_OPT_DTYPE", "PROMOTE"):
        body = re.search(rf"#define AT_FORALL_{macro}\(_\)(.*?)\n\n", text, re.S).group(1)
        out[macro] = {m.group(1) for m in re.finditer(r"_\((\w+)", body)}
    return out


def test_cuda_lists_are_pytorchs():
    """The CUDA lists equal the installed PyTorch's (its header's AT_FORALL_* macros)."""
    h = _header_lists()
    cuda = OP_LISTS["cuda"]
    by = {p: {n for n, q in cuda.items() if q == p} for p in ("lower", "fp32", "promote")}
    assert by["lower"] == h["LOWER_PRECISION_FP"]
    assert by["fp32"] - {"cross_entropy"} == h["FP32"] | h["FP32_SET_OPT_DTYPE"]
    assert by["promote"] - {"cat", "stack", "index_copy"} == h["PROMOTE"]
