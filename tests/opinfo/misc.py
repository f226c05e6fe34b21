"""OpInfos: filled in by the op family's author. Fused attention (``sdpa``) lives here."""
import numpy as np

from ember.ops.attention import sdpa

from .core import OpInfo, Sample, rand


def ref_sdpa(q, k, v, scale=None, is_causal=False):
    """softmax(q kᵀ * scale, masked) v, written independently of Ember's kernels."""
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("...id,...jd->...ij", q.astype(np.float64), k.astype(np.float64)) * scale
    if is_causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    if s.shape[-1] == 0:
        return np.zeros(q.shape[:-1] + v.shape[-1:], q.dtype)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("...ij,...jd->...id", p, v.astype(np.float64)).astype(q.dtype)


# (batch dims, Tq, Tk, D, Dv, causal, in the gradient checks)
_SDPA = [((), 4, 4, 3, 3, True, True), ((2,), 3, 5, 2, 4, False, True),
         ((2,), 5, 3, 2, 2, True, True), ((2, 3), 7, 7, 5, 6, True, False),
         ((2, 1, 2), 9, 6, 8, 3, False, False), ((1,), 13, 13, 16, 16, True, False),
         ((2,), 0, 4, 3, 3, True, False), ((2,), 3, 0, 3, 2, False, False)]


def _sdpa_samples(rng, dtype):
    out = []
    for b, tq, tk, d, dv, causal, grad in _SDPA:
        args = (rand(rng, b + (tq, d), dtype), rand(rng, b + (tk, d), dtype),
                rand(rng, b + (tk, dv), dtype))
        out.append(Sample(args, {"is_causal": causal}, grad=grad,
                          name=f"{b}x{tq}x{tk}x{d}x{dv}{' causal' if causal else ''}"))
    out.append(Sample(out[1].args, {"scale": 0.7}, grad=True, name="scale"))
    return out


def _qkv_samples(rng, dtype):
    # (qkv's shape, the permute that puts the q/k/v dim first, causal); the gradient of an
    # eager unbind's q, k, v is written into the slots of one buffer (sdpa_grad_slots)
    cases = [((3, 2, 4, 3), None, True), ((2, 5, 3, 2, 4), (2, 0, 3, 1, 4), True),
             ((2, 3, 3, 2), (2, 0, 1, 3), False), ((2, 0, 3, 2), (2, 0, 1, 3), True)]
    return [Sample((rand(rng, shape, dtype), perm), {"is_causal": causal},
                   name=f"{shape} {perm}") for shape, perm, causal in cases]


def _qkv_sdpa(qkv, perm, is_causal):
    return sdpa(*(qkv if perm is None else qkv.permute(perm)).unbind(0), is_causal=is_causal)


def _ref_qkv_sdpa(qkv, perm, is_causal):
    return ref_sdpa(*(qkv if perm is None else qkv.transpose(perm)), is_causal=is_causal)


OPINFOS = [
    OpInfo("sdpa", sdpa, ref_sdpa, _sdpa_samples, ("sdpa", "sdpa_grad")),
    OpInfo("sdpa_unbound_qkv", _qkv_sdpa, _ref_qkv_sdpa, _qkv_samples, ("sdpa_grad_slots",)),
]
