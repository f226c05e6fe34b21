"""``scan`` and ``fori_loop`` (see :mod:`ember.graph.control` for the design)."""
from __future__ import annotations

from ..autograd.grad_mode import state
from ..errors import GraphError
from ..func._tree import tree_flatten, tree_unflatten
from ..tensor import Tensor
from .autodiff import graph_vjp, is_float
from .control import _as_tensor, _check_same, _emit, _meta, _mode, _zeros, trace_fn
from .trace import Tracer


def scan(f, init, xs, length=None, reverse=False):
    """Loop ``f(carry, x) -> (carry, y)`` over the leading axis of ``xs`` (``jax.lax.scan``).

    Returns ``(final carry, ys)`` with the ``y``\\ s stacked along a new leading axis.
    ``xs`` is a tensor, a pytree of tensors or None (then give ``length``); ``reverse``
    walks from the end (``ys[t]`` still belongs to ``xs[t]``). Differentiable eagerly and
    in graphs (reverse-mode is a reverse scan over the carries the forward stored).

    Example (cumulative sum):
        >>> total, sums = ember.scan(lambda c, x: (c + x, c + x), ember.tensor(0.0), xs)
    """
    xleaves, xspec = tree_flatten(xs) if xs is not None else ([], None)
    length = _length(xleaves, length)
    if _mode() is None:
        return _scan_eager(f, init, xs, xleaves, xspec, length, reverse)
    cleaves, cspec = tree_flatten(init)
    cleaves = [_as_tensor(c) for c in cleaves]
    nc, nx = len(cleaves), len(xleaves)
    metas = [_meta(c) for c in cleaves] + [(tuple(x._data.shape[1:]), x._dtype, x._device)
                                          for x in xleaves]
    specs = {}

    def body(*t):
        x = tree_unflatten(list(t[nc:]), xspec) if xs is not None else None
        c, y = f(tree_unflatten(list(t[:nc]), cspec), x)
        cl, specs["c"] = tree_flatten(c)
        yl, specs["y"] = tree_flatten(y)
        specs["ny"] = len(yl)
        return cl + yl

    tr = trace_fn(body, metas, "scan_body")
    if specs["c"] != cspec or not all(tr.present[:nc]):
        raise GraphError(f"scan: f must return the carry's structure ({cspec}), got "
                         f"{specs['c']}")
    outs = tr.graph.outputs
    _check_same("scan", metas[:nc], [(v.shape, v.dtype, v.device) for v in outs[:nc]],
                "init", "f's carry")
    inputs = cleaves + list(xleaves) + tr.captured
    m = _mode()
    save = isinstance(m, Tracer) and state.grad_enabled and any(
        t._requires_grad for t in inputs)
    params = {"body": tr.graph, "nc": nc, "nx": nx, "length": length, "reverse": reverse,
              "save": save}
    res = stage_scan(inputs, params)
    ys = iter(res[nc:nc + len(outs) - nc])
    yflat = [next(ys) if p else None for p in tr.present[nc:]]
    return tree_unflatten(res[:nc], cspec), tree_unflatten(yflat, specs["y"])


def _length(xleaves, length):
    lens = {int(x.shape[0]) for x in xleaves if x.ndim}
    if any(not x.ndim for x in xleaves):
        raise GraphError("scan: every leaf of xs needs a leading axis to scan over")
    if len(lens) > 1 or (length is not None and lens and lens != {length}):
        raise GraphError(f"scan: xs leaves have leading sizes {sorted(lens)}"
                         + (f" but length={length}" if length is not None else ""))
    if length is None and not lens:
        raise GraphError("scan: give length when xs is None")
    return int(length if length is not None else lens.pop())


def stage_scan(inputs, params) -> list:
    """Emit a scan node (outputs: carries, stacked ys, then stored carries when ``save``)."""
    g, nc, n = params["body"], params["nc"], params["length"]
    metas = [(v.shape, v.dtype, v.device) for v in g.outputs[:nc]]
    metas += [((n,) + v.shape, v.dtype, v.device) for v in g.outputs[nc:]]
    if params["save"]:
        metas += [((n,) + v.shape, v.dtype, v.device) for v in g.inputs[:nc]]
    return _emit("scan", _run_scan, _scan_vjp, metas, inputs, params)


def with_saved_carries(n, builder):
    """A copy of scan node ``n`` that also outputs its stored carries (new vars)."""
    from .control import ControlOp
    from .ir import Node
    params = dict(n.params, save=True)
    g, nc, length = params["body"], params["nc"], params["length"]
    extra = [((length,) + v.shape, v.dtype, v.device) for v in g.inputs[:nc]]
    op = ControlOp("scan", _run_scan, list(n.op.metas) + extra, _scan_vjp)
    return Node(op, n.inputs, params, n.outs + tuple(builder.new_var(*m) for m in extra), n.ct)


def _scan_eager(f, init, xs, xleaves, xspec, length, reverse):
    from ..ops.movement import stack
    carry, ys = init, []
    steps = range(length - 1, -1, -1) if reverse else range(length)
    for t in steps:
        x = tree_unflatten([leaf[t] for leaf in xleaves], xspec) if xs is not None else None
        carry, y = f(carry, x)
        ys.append(tree_flatten(y))
    if not ys:
        raise GraphError("scan: a length-0 scan needs a graph (ys' shapes are unknown)")
    if reverse:
        ys.reverse()
    spec = ys[0][1]
    cols = zip(*[leaves for leaves, _ in ys])
    return carry, tree_unflatten([None if c[0] is None else stack(list(c)) for c in cols],
                                 spec)


def _run_scan(op, xp, arrays, *, body, nc, nx, length, reverse, save):
    p = op.program(body)
    carry = list(arrays[:nc])
    xs, caps = arrays[nc:nc + nx], list(arrays[nc + nx:])
    ys, cs = [], []
    for t in (range(length - 1, -1, -1) if reverse else range(length)):
        if save:
            cs.append(carry)
        out = p.run(carry + [x[t] for x in xs] + caps)
        carry, y = list(out[:nc]), out[nc:]
        ys.append(y)
    if reverse:
        ys.reverse()
        cs.reverse()
    res = carry + [_stack(xp, [y[k] for y in ys], v, length)
                   for k, v in enumerate(body.outputs[nc:])]
    if save:
        res += [_stack(xp, [c[k] for c in cs], v, length)
                for k, v in enumerate(body.inputs[:nc])]
    return res


def _stack(xp, arrays, v, length):
    if not length:
        return xp.empty((0,) + v.shape, v.dtype.np)
    return xp.stack(arrays)


def _scan_vjp(op, gouts, outs, ins, params, need):
    """A reverse scan of the body's VJP over the stored carries, summing the captures'."""
    body, nc, nx, n = params["body"], params["nc"], params["nx"], params["length"]
    ny = len(body.outputs) - nc
    if params["save"]:
        carries = outs[nc + ny:]
    else:                       # the forward did not store its carries: run it again
        carries = stage_scan(list(ins), dict(params, save=True))[nc + ny:]
    caps = list(ins[nc + nx:])
    fc = [i for i in range(nc) if is_float(ins[i]._dtype)]
    fy = [k for k in range(ny) if is_float(body.outputs[nc + k].dtype)]
    fx = [k for k in range(nx) if need[nc + k]]
    fk = [k for k in range(len(caps)) if need[nc + nx + k]]

    def bwd(st, xt):
        cbar, kbar = st
        c_t, x_t, gy_t = xt
        cot = [None] * len(body.outputs)
        for j, i in enumerate(fc):
            cot[i] = cbar[j]
        for j, k in enumerate(fy):
            cot[nc + k] = gy_t[j]
        gin = graph_vjp(body, list(c_t) + list(x_t) + caps, cot)
        new_c = [gin[i] if gin[i] is not None else _zeros(c_t[i]) for i in fc]
        new_k = [kb if gin[nc + nx + k] is None else kb + gin[nc + nx + k]
                 for kb, k in zip(kbar, fk)]
        xbar = [gin[nc + k] if gin[nc + k] is not None else _zeros(x_t[k]) for k in fx]
        return (new_c, new_k), xbar

    init = ([gouts[i] for i in fc], [_zeros(caps[k]) for k in fk])
    xs_b = (list(carries), list(ins[nc:nc + nx]), [gouts[nc + k] for k in fy])
    (cbar, kbar), xbars = scan(bwd, init, xs_b, length=n, reverse=not params["reverse"])
    grads = [None] * len(ins)
    for j, i in enumerate(fc):
        grads[i] = cbar[j]
    for j, k in enumerate(fx):
        grads[nc + k] = xbars[j]
    for j, k in enumerate(fk):
        grads[nc + nx + k] = kbar[j]
    return grads


def fori_loop(lower, upper, body_fn, init):
    """``val = init; for i in range(lower, upper): val = body_fn(i, val)`` (JAX's).

    With Python int bounds the trip count is static: in graphs it is a :func:`scan` over
    ``arange(lower, upper)`` (``i`` is a 0-d int64 tensor there, a Python int eagerly), so
    it is differentiable. Tensor bounds make a :func:`while_loop` (forward-only in graphs).
    """
    static = not isinstance(lower, Tensor) and not isinstance(upper, Tensor)
    if _mode() is None:
        val = init
        for i in range(int(lower), int(upper)):
            val = body_fn(i, val)
        return val
    if static:
        from ..ops.factories import arange
        if int(upper) <= int(lower):
            return init
        val, _ = scan(lambda c, i: (body_fn(i, c), None), init,
                      arange(int(lower), int(upper)))
        return val
    from ._cond_while import while_loop
    lo, hi = _as_tensor(lower), _as_tensor(upper)
    return while_loop(lambda s: s[0] < s[1], lambda s: (s[0] + 1, s[1], body_fn(s[0], s[2])),
                      (lo, hi, init))[2]
