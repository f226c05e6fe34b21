"""vmap tests generated from the registry and the OpInfo tables (tests/opinfo).

For every OpInfo entry: ``vmap(op)`` over random in_dims/out_dims equals stacking the
per-example results (forward), and the gradient of the vmapped op's sum equals the
gradient of the per-example loop (float64). A last test lists every primitive and fails
if one has neither a batching rule nor an explicit ``"loop"`` mark.
"""
import re
import warnings
import zlib

import numpy as np
import pytest

import ember as em
from ember.func import vmap
from ember.ops.batching import GENERIC
from ember.ops.registry import REGISTRY

from opinfo import OPINFOS

B = 3
RANDOM = {n for n, op in REGISTRY.items() if op.random}


def _dtype(info) -> str:
    """float64 where the entry has it, else complex128 (complex-only entries)."""
    return "float64" if "float64" in info.dtypes else "complex128"


INFOS = [i for i in OPINFOS if {"float64", "complex128"} & set(i.dtypes)
         and not RANDOM & set(i.primitives)]


def _rng(info, salt=""):
    return np.random.default_rng(zlib.crc32((info.name + salt).encode()))


def _examples(info, k):
    """``k``: sample index. B versions of that sample (same shapes, other values), or None."""
    versions = []
    for b in range(B):
        samples = info.samples(_rng(info, f"vmap{b}"), _dtype(info))
        if k >= len(samples):
            return None
        versions.append(samples[k])
    shapes = [tuple(np.shape(a)) if isinstance(a, np.ndarray) else None
              for a in versions[0].args]
    for s in versions[1:]:
        if len(s.args) != len(shapes) or [tuple(np.shape(a)) if isinstance(a, np.ndarray)
                                           else None for a in s.args] != shapes:
            return None
        if any(not isinstance(a, np.ndarray) and a != a0 for a, a0 in
               zip(s.args, versions[0].args) if not isinstance(a0, np.ndarray)):
            return None
    return versions


#: ops whose per-example geometry is storage-based: torch.func also needs the batch dim at
#: the front in memory for them
FRONT_ONLY = {"as_strided"}


def _batched_args(info, versions, rng, all_batched=False):
    """Physical arguments and in_dims: each array argument batched (at a random dim) or not."""
    args, dims = [], []
    arrays = [i for i, a in enumerate(versions[0].args) if isinstance(a, np.ndarray)]
    must = rng.choice(arrays) if arrays else None
    for i, a0 in enumerate(versions[0].args):
        if not isinstance(a0, np.ndarray):
            args.append(a0)
            dims.append(None)
            continue
        if i != must and not all_batched and rng.random() < 0.3:   # same for every example
            args.append(em.from_numpy(a0.copy()))
            dims.append(None)
            continue
        d = int(rng.integers(-(a0.ndim + 1), a0.ndim + 1)) if info.name not in FRONT_ONLY else 0
        stacked = np.stack([v.args[i] for v in versions], axis=d)
        args.append(em.from_numpy(np.ascontiguousarray(stacked)))
        dims.append(d)
    return args, dims


def _example_args(args, dims, b, own_storage=False):
    """Example ``b`` of each argument (``own_storage``: a fresh copy, for ops whose geometry
    is relative to the storage: torch.func reads as_strided's offset per example)."""
    return [a if d is None else a.select(d, b).clone() if own_storage else a.select(d, b)
            for a, d in zip(args, dims)]


def _as_tuple(r):
    return tuple(r) if isinstance(r, (tuple, list)) else (r,)


#: composites that read tensor values into Python (host NumPy code) without the
#: ``ember.ops.batching.per_example`` fallback, or whose output size depends on values: the
#: tests accept vmap's data-dependent error for them (and compare whatever does run).
HOST_READS = {
    "masked_select": "output size depends on the mask (torch.func refuses it too)",
    "sparse.mm": "sparse_coo_tensor checks its indices on the host (torch.func does not "
                 "batch sparse tensors either)",
}
_DATA_ERROR = r"vmap: (It looks like|We do not support batching operators that can output)"


def _inplace_into_unbatched(e, dims) -> bool:
    """torch.func's error for writing a batched value into an unbatched tensor (the op
    writes into a copy of an unbatched argument): legitimate only if some input is not
    batched."""
    return "vmap: inplace arithmetic" in str(e) and any(d is None for d in dims)


def _samples_of(info, limit=4):
    n = len(info.samples(_rng(info, "vmap0"), _dtype(info)))
    return range(min(n, limit))


def _run_vmap(fn, args, dims, out_dim=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _as_tuple(vmap(fn, in_dims=tuple(dims), out_dims=out_dim)(*args))


@pytest.mark.parametrize("info", INFOS, ids=repr)
def test_vmap_forward_matches_loop(info):
    rng = _rng(info, "dims")
    checked = 0
    for k in _samples_of(info):
        versions = _examples(info, k)
        if versions is None or not any(isinstance(a, np.ndarray) for a in versions[0].args):
            continue
        kwargs = versions[0].kwargs
        args, dims = _batched_args(info, versions, rng)
        out_dim = int(rng.integers(0, 2)) * -1
        fn = lambda *xs: info.fn(*xs, **kwargs)  # noqa: E731
        try:
            loop = [_as_tuple(fn(*_example_args(args, dims, b, info.name in FRONT_ONLY)))
                    for b in range(B)]
        except Exception:
            continue                                # the sample is an error case
        try:
            got = _run_vmap(fn, args, dims, out_dim)
        except RuntimeError as e:
            if info.name in HOST_READS and re.search(_DATA_ERROR, str(e)):
                continue
            if not _inplace_into_unbatched(e, dims):
                raise
            args, dims = _batched_args(info, versions, rng, all_batched=True)
            loop = [_as_tuple(fn(*_example_args(args, dims, b))) for b in range(B)]
            got = _run_vmap(fn, args, dims, out_dim)
        assert len(got) == len(loop[0]), f"{info.name}: {len(got)} outputs vs {len(loop[0])}"
        for j, g in enumerate(got):
            ref = np.stack([np.asarray(r[j].numpy()) for r in loop], axis=out_dim)
            assert tuple(g.shape) == ref.shape, (
                f"{info.name}[{k}] in_dims={dims} out_dims={out_dim}: shape "
                f"{tuple(g.shape)} vs loop {ref.shape}")
            assert g.dtype == loop[0][j].dtype, f"{info.name}[{k}]: dtype {g.dtype}"
            np.testing.assert_allclose(g.numpy(), ref, rtol=1e-10, atol=1e-12,
                                       err_msg=f"{info.name}[{k}] in_dims={dims} "
                                               f"out_dims={out_dim}")
        checked += 1
    assert checked or info.name in HOST_READS or not any(True for _ in _samples_of(info)), \
        f"{info.name}: no sample could be checked under vmap"


GRAD_INFOS = [i for i in INFOS if i.grad and "float64" in i.dtypes]


def _grad_samples(info, tag):
    """Each sample of ``info`` with a gradient and a floating tensor argument, batched:
    ``(k, versions, kwargs, args, dims, diff, rng)``, ``diff`` the indices of those
    arguments and ``rng`` the generator that batched them (for a re-batch)."""
    rng = _rng(info, tag)
    for k in _samples_of(info, limit=64):
        versions = _examples(info, k)
        if versions is None or not versions[0].grad:
            continue
        args, dims = _batched_args(info, versions, rng)
        diff = tuple(i for i, a in enumerate(args) if isinstance(a, em.Tensor) and
                     a.dtype.is_floating_point)
        if diff:
            yield k, versions, versions[0].kwargs, args, dims, diff, rng


def _total(outs):
    """The sum of the floating outputs' sums, in float64."""
    return sum((o.sum() for o in outs if o.dtype.is_floating_point),
               em.tensor(0.0, dtype=em.float64))


@pytest.mark.parametrize("info", GRAD_INFOS, ids=repr)
def test_vmap_grad_matches_loop(info):
    """Gradient of sum(vmap(op)(*args)) w.r.t. the physical inputs equals the loop's."""
    for k, versions, kwargs, args, dims, diff, rng in _grad_samples(info, "grad"):
        fn = lambda *xs: info.fn(*xs, **kwargs)  # noqa: E731

        def loss_vmap(*xs):
            return _total(_run_vmap(fn, xs, dims))

        def loss_loop(*xs):
            return sum((_total(_as_tuple(fn(*_example_args(xs, dims, b, info.name in FRONT_ONLY))))
                        for b in range(B)),
                       em.tensor(0.0, dtype=em.float64))

        try:
            want = em.func.grad(loss_loop, argnums=tuple(diff))(*args)
        except Exception:
            continue
        try:
            got = em.func.grad(loss_vmap, argnums=tuple(diff))(*args)
        except RuntimeError as e:
            if info.name in HOST_READS and re.search(_DATA_ERROR, str(e)):
                continue
            if not _inplace_into_unbatched(e, dims):
                raise
            args, dims = _batched_args(info, versions, rng, all_batched=True)
            want = em.func.grad(loss_loop, argnums=tuple(diff))(*args)
            got = em.func.grad(loss_vmap, argnums=tuple(diff))(*args)
        for i, g, w in zip(diff, got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-9, atol=1e-11,
                                       err_msg=f"{info.name}[{k}] grad of input {i}, "
                                               f"in_dims={dims}")
        return
    pytest.skip(f"{info.name}: no differentiable sample" + (
        f" runs under vmap ({HOST_READS[info.name]})" if info.name in HOST_READS else ""))




@pytest.mark.parametrize("info", GRAD_INFOS, ids=repr)
def test_vmap_of_grad_matches_per_example_grads(info):
    """vmap(grad(sum of op)): per-example gradients (the VJP rules run on batched values,
    through the batching rules) equal each example's own gradient."""
    for k, _, kwargs, args, dims, diff, _ in _grad_samples(info, "vgrad"):
        loss = lambda *xs: _total(_as_tuple(info.fn(*xs, **kwargs)))  # noqa: E731
        own = info.name in FRONT_ONLY
        try:
            want = [em.func.grad(loss, argnums=diff)(*_example_args(args, dims, b, own))
                    for b in range(B)]
        except Exception:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = vmap(em.func.grad(loss, argnums=diff), in_dims=tuple(dims))(*args)
        except (RuntimeError, NotImplementedError) as e:
            if re.search(_DATA_ERROR + "|can't differentiate|inplace arithmetic", str(e)):
                continue                       # host reads / writes into an unbatched copy
            raise
        for j, i in enumerate(diff):
            ref = np.stack([np.asarray(w[j].numpy()) for w in want])
            np.testing.assert_allclose(got[j].numpy(), ref, rtol=1e-9, atol=1e-11,
                                       err_msg=f"{info.name}[{k}] per-example grad of input "
                                               f"{i}, in_dims={dims}")
        return
    pytest.skip(f"{info.name}: no differentiable sample runs per example under vmap(grad)")


def test_every_primitive_has_a_batching_rule_or_loop_mark():
    missing = sorted(n for n, op in REGISTRY.items() if op.batch is None)
    assert not missing, (f"primitives without a batching rule (defop(..., batch=...)) or an "
                         f"explicit batch='loop' mark: {missing}")
    bad = sorted(n for n, op in REGISTRY.items()
                 if isinstance(op.batch, str) and op.batch != "loop" and op.batch not in GENERIC)
    assert not bad, f"primitives naming an unknown generic batching rule: {bad}"


RANDOM_INFOS = [i for i in OPINFOS if RANDOM & set(i.primitives) and "float64" in i.dtypes]


def test_every_random_primitive_has_a_randomness_test():
    covered = {p for i in RANDOM_INFOS for p in i.primitives}
    assert RANDOM <= covered, f"random primitives without a float64 OpInfo: {RANDOM - covered}"


@pytest.mark.parametrize("info", RANDOM_INFOS, ids=repr)
def test_random_primitives_follow_randomness(info):
    """error: raises naming the op; different: independent draws per example; same (inputs
    unbatched): one draw shared by every example."""
    versions = next(v for k in _samples_of(info, 8) if (v := _examples(info, k)) is not None
                    and all(np.size(a) > 1 for a in v[0].args if isinstance(a, np.ndarray)))
    args, dims = _batched_args(info, versions, _rng(info, "rand"), all_batched=True)
    fn = lambda *xs: info.fn(*xs, **versions[0].kwargs)  # noqa: E731
    with pytest.raises(RuntimeError, match="randomness error mode"):
        vmap(fn, in_dims=tuple(dims))(*args)
    out = _as_tuple(vmap(fn, in_dims=tuple(dims), randomness="different")(*args))[0]
    per = [np.asarray(out.select(0, b).numpy()) for b in range(B)]
    assert not np.array_equal(per[0], per[1]), f"{info.name}: examples drew the same values"
    with pytest.raises(RuntimeError, match="randomness='same' does not support a batched"):
        vmap(fn, in_dims=tuple(dims), randomness="same")(*args)
    plain = [a if d is None else a.select(d, 0) for a, d in zip(args, dims)]
    same = _as_tuple(vmap(lambda z, *xs: fn(*xs), in_dims=(0,) + (None,) * len(plain),
                          randomness="same")(em.zeros(B), *plain))[0]
    assert all(np.array_equal(same.select(0, b).numpy(), same.select(0, 0).numpy())
               for b in range(B)), f"{info.name}: randomness='same' drew per example"


NESTED = [i for i in INFOS if i.name in {
    "add", "mul", "div", "sub", "maximum", "where", "exp", "tanh", "sum", "mean", "amax",
    "argmax", "softmax", "log_softmax", "cumsum", "matmul", "bmm", "einsum", "permute",
    "reshape", "expand", "transpose", "flip", "cat", "stack", "getitem_advanced", "gather",
    "take_along_dim", "index_select", "pad", "tril", "sort", "topk", "clamp", "pow"}]


@pytest.mark.parametrize("info", NESTED, ids=repr)
def test_nested_vmap_matches_double_loop(info):
    """vmap(vmap(op)) with random in_dims at both levels (each argument batched at the outer,
    the inner, both or neither level) against a double loop: the levels stay apart."""
    rng = _rng(info, "nested")
    b1, b2 = 2, 3
    checked = 0
    for k in _samples_of(info, 3):
        grid = []
        for i in range(b1):
            row = []
            for j in range(b2):
                s = info.samples(_rng(info, f"n{i}.{j}"), _dtype(info))
                row.append(s[k] if k < len(s) else None)
            grid.append(row)
        if any(s is None for r in grid for s in r):
            continue
        a0 = grid[0][0].args
        shapes = [np.shape(a) if isinstance(a, np.ndarray) else None for a in a0]
        if any([np.shape(a) if isinstance(a, np.ndarray) else None for a in s.args] != shapes
               for r in grid for s in r):
            continue
        args, outer, inner = [], [], []
        for n, a in enumerate(a0):
            if not isinstance(a, np.ndarray):
                args.append(a)
                outer.append(None)
                inner.append(None)
                continue
            first = n == next(m for m, x in enumerate(a0) if isinstance(x, np.ndarray))
            bo, bi = first or rng.random() < 0.7, first or rng.random() < 0.7
            d2 = int(rng.integers(0, a.ndim + 1)) if bi else None
            rows = []
            for i in range(b1 if bo else 1):
                exs = [grid[i][j].args[n] for j in range(b2 if bi else 1)]
                rows.append(np.stack(exs, axis=d2) if bi else exs[0])
            d1 = int(rng.integers(0, rows[0].ndim + 1)) if bo else None
            args.append(em.from_numpy(np.ascontiguousarray(np.stack(rows, axis=d1) if bo
                                                           else rows[0])))
            outer.append(d1)
            inner.append(d2)
        if all(d is None for d in outer) or all(d is None for d in inner):
            continue
        kw = grid[0][0].kwargs
        fn = lambda *xs: info.fn(*xs, **kw)  # noqa: E731
        try:
            want = [[_as_tuple(fn(*[a if do is None and di is None else
                                     a.select(do, i) if di is None else
                                     a.select(di, j) if do is None else
                                     a.select(do, i).select(di, j)
                                     for a, do, di in zip(args, outer, inner)]))
                     for j in range(b2)] for i in range(b1)]
        except Exception:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _as_tuple(vmap(vmap(fn, in_dims=tuple(inner)), in_dims=tuple(outer))(*args))
        for m, g in enumerate(got):
            ref = np.stack([np.stack([np.asarray(w[m].numpy()) for w in row]) for row in want])
            np.testing.assert_allclose(g.numpy(), ref, rtol=1e-10, atol=1e-12,
                                       err_msg=f"{info.name}[{k}] outer={outer} inner={inner}")
        checked += 1
    assert checked, f"{info.name}: no sample was checked under nested vmap"
