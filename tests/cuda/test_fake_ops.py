"""Every OpInfo on the ``cuda`` stand-in against the CPU: outputs stay on the device and
agree with the CPU's (forward; gradients and forward-mode tangents of the float64
gradient samples).

The strict stand-in runs the real backend's code on arrays that refuse what CuPy's refuse,
so a composite that builds a CPU tensor inside (``arange(n)`` without ``device=``), reads
an input through ``.numpy()`` or mixes a NumPy array into a device op fails here exactly
as it would on a GPU. The same sweep runs on a GPU in
``test_gpu.py``. Entries known to fail are listed below with why (strict: they fail the
run once fixed, so the list cannot go stale).
"""
import numpy as np
import pytest

import ember as em

from opinfo import OPINFOS

#: composites that read an input's values through NumPy (``x.numpy()``): they need a host
#: copy (``.cpu()``) or a device kernel before they can run on ``cuda``.
NUMPY_ONLY: set = set()   # (none left)
#: OpInfo entries whose own ``fn`` builds a CPU tensor (none left).
CPU_HELPER: set = set()

_BY_NAME = {}
for _info in OPINFOS:
    _BY_NAME.setdefault(_info.name, _info)


def _param(name):
    why = ("reads its input through .numpy()" if name in NUMPY_ONLY else
           "its OpInfo fn builds a CPU tensor" if name in CPU_HELPER else None)
    marks = [pytest.mark.xfail(reason=why, strict=True,
                               raises=(RuntimeError, TypeError))] if why else []
    return pytest.param(name, marks=marks, id=name)


def _on(args, dev, grad=False):
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            t = em.from_numpy(a.copy()).to(dev)
            if grad and t.dtype.is_floating_point:
                t.requires_grad_(True)
            out.append(t)
        else:
            out.append(a)
    return out


def _tensors(r):
    rs = r if isinstance(r, (tuple, list)) else (r,)
    return [x for x in rs if isinstance(x, em.Tensor)]


def _close(info, dtype, got, want, what):
    assert got.device == em.device("cuda:0"), f"{info.name} {what}: output on {got.device}"
    assert got.dtype is want.dtype and tuple(got.shape) == tuple(want.shape), what
    g, w = got.detach().cpu().numpy(), want.detach().numpy()
    if w.dtype.kind in "fc":
        np.testing.assert_allclose(g, w, atol=info.atol.get(dtype, 1e-5),
                                   rtol=info.rtol.get(dtype, 1e-4), equal_nan=True,
                                   err_msg=f"{info.name} {what}")
    else:
        np.testing.assert_array_equal(g, w, err_msg=f"{info.name} {what}")


def _forward(info, dtype):
    rng = np.random.default_rng(0)
    ran = 0
    for s in info.samples(rng, np.dtype(dtype) if dtype not in ("bfloat16",) else dtype):
        try:
            em.manual_seed(0)
            want = info.fn(*_on(s.args, "cpu"), **s.kwargs)
        except Exception:   # noqa: BLE001 - the CPU rejects it too (error samples)
            continue
        em.manual_seed(0)
        got = info.fn(*_on(s.args, "cuda"), **s.kwargs)
        for g, w in zip(_tensors(got), _tensors(want)):
            _close(info, dtype, g, w, f"{dtype} {s.name}")
        ran += 1
    return ran


def _gradients(info):
    rng = np.random.default_rng(1)
    for s in info.samples(rng, np.dtype(info.grad_dtype)):
        if not s.grad:
            continue
        grads = []
        for dev in ("cpu", "cuda"):
            args = _on(s.args, dev, grad=True)
            em.manual_seed(0)
            outs = [o for o in _tensors(info.fn(*args, **s.kwargs)) if o.requires_grad]
            if not outs:
                return
            total = sum((o.real if o.is_complex() else o).sum() for o in outs)
            ins = [a for a in args if isinstance(a, em.Tensor) and a.requires_grad]
            grads.append(em.autograd.grad(total, ins, allow_unused=True))
        for gc, gd in zip(*grads):
            if gc is not None:
                _close(info, info.grad_dtype, gd, gc, f"gradient of {s.name}")


def _tangents(info):
    """Forward mode: each float64 gradient sample's output tangents (the tangent of every
    floating input a ramp) on ``cuda`` equal the CPU's."""
    import ember.autograd.forward_ad as fwad
    rng = np.random.default_rng(2)
    for s in info.samples(rng, np.dtype(info.grad_dtype))[:3]:
        if not s.grad:
            continue
        res = []
        for dev in ("cpu", "cuda"):
            args = _on(s.args, dev)
            with fwad.dual_level():
                duals = [fwad.make_dual(a, em.linspace(-1, 1, a.numel(), dtype=a.dtype,
                                                       device=dev).reshape(a.shape))
                         if isinstance(a, em.Tensor) and a.dtype.is_floating_point else a
                         for a in args]
                em.manual_seed(0)
                outs = _tensors(info.fn(*duals, **s.kwargs))
                res.append([fwad.unpack_dual(o).tangent for o in outs])
        for tc, td in zip(*res):
            if tc is not None:
                _close(info, info.grad_dtype, td, tc, f"tangent of {s.name}")


def _batched(info):
    """vmap: the first float64 samples, three versions of each (other values) stacked at
    dim 0, ``vmap(fn)`` on ``cuda`` equals it on the CPU (the batching rules' own ops
    and any per-example fallback on the device). Returns the samples compared."""
    import warnings
    from ember.func import vmap
    compared = 0
    for k in range(2):
        versions = []
        for b in range(3):
            ss = info.samples(np.random.default_rng(10 + b), np.dtype(np.float64))
            if k >= len(ss):
                return compared
            versions.append(ss[k])
        first = versions[0]
        arrays = [i for i, a in enumerate(first.args) if isinstance(a, np.ndarray)]
        if not arrays or any(len(v.args) != len(first.args) or any(
                np.shape(v.args[i]) != np.shape(first.args[i]) for i in arrays)
                for v in versions):
            continue
        res = []
        for dev in ("cpu", "cuda"):
            args = [em.from_numpy(np.stack([v.args[i] for v in versions])).to(dev)
                    if i in arrays else a for i, a in enumerate(first.args)]
            dims = tuple(0 if i in arrays else None for i in range(len(args)))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    em.manual_seed(0)
                    res.append(_tensors(vmap(lambda *xs: info.fn(*xs, **first.kwargs),
                                             in_dims=dims)(*args)))
            except Exception:   # noqa: BLE001 - the CPU refuses it too (checked below)
                if dev == "cuda":
                    raise
                break
        if len(res) == 2:
            for g, w in zip(res[1], res[0]):
                _close(info, "float64", g, w, f"vmap of sample {k}")
            compared += 1
    return compared


_RANDOM_OPS = {n for n, op in __import__("ember.ops.registry", fromlist=["REGISTRY"])
               .REGISTRY.items() if op.random}


@pytest.mark.parametrize("name", [_param(n) for n in sorted(_BY_NAME)])
def test_opinfo_on_the_cuda_stand_in(fake_cuda, name):
    info = _BY_NAME[name]
    ran = sum(_forward(info, dt) for dt in info.dtypes)
    assert ran > 0 or name.startswith("_"), f"{name}: no sample ran on the CPU"
    if info.grad:
        _gradients(info)
    if info.grad and info.jvp:
        _tangents(info)
    if "float64" in info.dtypes and not _RANDOM_OPS & set(info.primitives):
        _batched(info)
