"""``torch.autograd.functional``: Jacobians, Hessians and their products, on the tape.

:func:`vjp`, :func:`jvp`, :func:`jacobian`, :func:`hessian`, :func:`vhp` and :func:`hvp`
take a function of tensors and the point to differentiate at, PyTorch's way: ``inputs``
is a tensor or a tuple of them (results follow that shape: a tuple, or a tuple of tuples
for a Jacobian of several outputs and inputs), ``create_graph=True`` keeps the results
differentiable, ``strict=True`` raises where an output does not depend on an input
instead of answering with zeros.

They run on reverse mode (``ember.autograd.grad``): a Jacobian is one backward per output
element, :func:`jvp` and :func:`hvp` use the double-backward trick as PyTorch does (so a
custom ``Function`` without a JVP works). ``vectorize=True`` computes a Jacobian with
Ember's batched transforms instead (``ember.func.jacrev``, or ``jacfwd`` for
``strategy="forward-mode"``): one batched pass for all rows. ``ember.func`` has the
composable, JAX-style versions of the same (``jacrev(f)(x)``).

Example:
    >>> from ember.autograd.functional import jacobian, hessian
    >>> jacobian(lambda x: x ** 2, ember.tensor([1.0, 2.0]))
    tensor([[2., 0.],
            [0., 4.]])
    >>> hessian(lambda x: (x ** 3).sum(), ember.tensor([1.0, 2.0]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
"""
from __future__ import annotations

from ..tensor import Tensor
from .grad_mode import enable_grad, is_grad_enabled, set_grad_enabled

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]

_STRATEGIES = ("forward-mode", "reverse-mode")


def _as_tuple(x, what: str, fn: str):
    """(was it a tuple, ``x`` as a tuple of tensors)."""
    was_tuple = isinstance(x, tuple)
    xs = x if was_tuple else (x,)
    for i, el in enumerate(xs):
        if not isinstance(el, Tensor):
            where = f"the value at index {i}" if was_tuple else f"the given {what}"
            raise TypeError(f"{fn}: the {what} must be a Tensor or a tuple of Tensors, but "
                            f"{where} has type {type(el).__name__}")
    return was_tuple, xs


def _untuple(res, was_tuple):
    """Undo :func:`_as_tuple` on a result: ``was_tuple`` is one flag, or two for a nested
    (outputs, inputs) result."""
    if isinstance(was_tuple, tuple):
        outs, ins = was_tuple
        if not ins:
            res = tuple(r[0] for r in res)
        return res if outs else res[0]
    return res if was_tuple else res[0]


def _fresh(xs, create_graph: bool, need_graph: bool):
    """New tensor objects for the function to see: a differentiable view of an input that
    requires grad when ``create_graph`` (the results' graph reaches the caller's tensor),
    else a detached copy of the reference that requires grad as ``need_graph`` says. A new
    object tells the function's own closures (the caller's tensor) from the argument."""
    out = []
    for x in xs:
        if create_graph and x.requires_grad:
            out.append(x.view_as(x))
        else:
            out.append(x.detach().requires_grad_(need_graph))
    return tuple(out)


def _final(xs, create_graph: bool):
    """Results without history unless the caller asked for it."""
    if create_graph:
        return xs
    return tuple(x.detach() if isinstance(x, Tensor) else _final(x, False) for x in xs)


def _check_v(v, ref, ref_was_tuple: bool, fn: str):
    if len(v) != len(ref):
        if ref_was_tuple:
            raise RuntimeError(f"{fn}: v is a tuple of invalid length: should be {len(ref)} "
                               f"but got {len(v)}")
        raise RuntimeError(f"{fn}: the given v should contain a single Tensor")
    for i, (a, b) in enumerate(zip(v, ref)):
        if tuple(a.shape) != tuple(b.shape):
            entry = f"entry {i} of " if ref_was_tuple else ""
            raise RuntimeError(f"{fn}: {entry}v has invalid size: should be "
                               f"{tuple(b.shape)} but got {tuple(a.shape)}")


_STRICT = {
    "outputs": "output {i} of the user-provided function does not require gradients; in "
               "strict mode the outputs must be computed differentiably from the inputs",
    "grad_inputs": "the gradient with respect to input {i} is independent of the inputs of "
                   "the user-provided function, which strict mode does not allow",
    "jacobian": "while computing the hessian, the jacobian of the user-provided function "
                "with respect to input {i} is independent of the input, which strict mode "
                "does not allow (the function must be twice differentiable with a jacobian "
                "that depends on the inputs; a linear function's does not)",
    "hessian": "the hessian of the user-provided function with respect to input {i} is "
               "independent of the input, which strict mode does not allow",
}


def _check_requires_grad(xs, kind: str, strict: bool, fn: str) -> None:
    if not strict:
        return
    for i, x in enumerate(xs):
        if x is None:
            raise RuntimeError(f"{fn}: the output of the user-provided function is "
                               f"independent of input {i}, which strict mode does not allow")
        if not x.requires_grad:
            raise RuntimeError(f"{fn}: " + _STRICT[kind].format(i=i))


def _grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None):
    """``autograd.grad`` of the outputs that require grad (None for every input when none
    does), unused inputs giving None."""
    from .engine import grad
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    keep = [(o, g) for o, g in zip(outputs, grad_outputs)
            if o is not None and o.requires_grad]
    if not keep:
        return (None,) * len(inputs)
    outs, gos = zip(*keep)
    if all(g is None for g in gos):
        gos = None
    return tuple(grad(list(outs), list(inputs), None if gos is None else list(gos),
                      retain_graph=retain_graph, create_graph=create_graph,
                      allow_unused=True))


_INDEPENDENT = {
    "back": "the output of the user-provided function is independent of input {i}",
    "back_trick": "the gradient with respect to the input is independent of entry {i} of "
                  "the grad_outputs when the double-backward trick computes forward-mode "
                  "gradients",
    "double_back": "the jacobian of the user-provided function is independent of input {i}",
    "double_back_trick": "the hessian of the user-provided function is independent of "
                         "entry {i} of the grad_jacobian, which the double-backward trick "
                         "needs",
}


def _zeros_for_none(grads, refs, strict: bool, create_graph: bool, stage: str, fn: str):
    """None gradients as zeros shaped like ``refs`` (strict mode raises instead)."""
    from ..ops.factories import zeros_like
    out = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                raise RuntimeError(f"{fn}: " + _INDEPENDENT[stage].format(i=i) +
                                   ", which strict mode does not allow")
            g = zeros_like(refs[i])
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(f"{fn}: the {what} of the user-provided function is "
                               f"independent of input {i}, which strict mode does not allow "
                               f"with create_graph=True")
        out.append(g)
    return tuple(out)


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), v^T J)``: the vector-Jacobian product at ``inputs``.

    ``v`` has the outputs' shapes; it may be left out when ``func`` returns one element.

    Example:
        >>> out, g = vjp(lambda x: 2 * x, ember.ones(2), ember.tensor([1.0, 3.0]))
        >>> g
        tensor([2., 6.])
    """
    ins_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
    with enable_grad():
        inputs = _fresh(inputs, create_graph, True)
        outputs = func(*inputs)
        outs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function",
                                        "vjp")
        _check_requires_grad(outputs, "outputs", strict, "vjp")
        if v is not None:
            _, v = _as_tuple(v, "v", "vjp")
            v = _fresh(v, create_graph, False)
            _check_v(v, outputs, outs_tuple, "vjp")
        elif len(outputs) != 1 or outputs[0].numel() != 1:
            raise RuntimeError("vjp: v can only be None if the user-provided function "
                               "returns a single Tensor with a single element; got "
                               f"outputs of shapes {[tuple(o.shape) for o in outputs]}")
        res = _grad(outputs, inputs, v, create_graph=create_graph)
        res = _zeros_for_none(res, inputs, strict, create_graph, "back", "vjp")
    return (_untuple(_final(outputs, create_graph), outs_tuple),
            _untuple(_final(res, create_graph), ins_tuple))


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), J v)``: the Jacobian-vector product at ``inputs``, by the
    double-backward trick (as PyTorch: a backward with zero cotangents, differentiated
    with respect to them).

    ``v`` has the inputs' shapes; it may be left out when the input is one element.

    Example:
        >>> out, t = jvp(lambda x: x ** 2, ember.tensor([1.0, 2.0]), ember.ones(2))
        >>> t
        tensor([2., 4.])
    """
    from ..ops.factories import ones_like, zeros_like
    ins_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
    with enable_grad():
        inputs = _fresh(inputs, create_graph, True)
        if v is not None:
            _, v = _as_tuple(v, "v", "jvp")
            v = _fresh(v, create_graph, False)
            _check_v(v, inputs, ins_tuple, "jvp")
        elif len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError("jvp: v can only be None if the input to the user-provided "
                               "function is a single Tensor with a single element; got "
                               f"inputs of shapes {[tuple(x.shape) for x in inputs]}")
        else:
            v = (ones_like(inputs[0]),)
        outputs = func(*inputs)
        outs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function",
                                        "jvp")
        _check_requires_grad(outputs, "outputs", strict, "jvp")
        cot = tuple(zeros_like(o).requires_grad_(True) for o in outputs)
        grad_inputs = _grad(outputs, inputs, cot, create_graph=True)
        _check_requires_grad(grad_inputs, "grad_inputs", strict, "jvp")
        with set_grad_enabled(create_graph or is_grad_enabled()):
            res = _grad(grad_inputs, cot, v, create_graph=create_graph)
            res = _zeros_for_none(res, outputs, strict, create_graph, "back_trick", "jvp")
    return (_untuple(_final(outputs, create_graph), outs_tuple),
            _untuple(_final(res, create_graph), outs_tuple))


def jacobian(func, inputs, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: for an output of shape ``O`` and an input of
    shape ``I``, a tensor of shape ``O + I``; a tuple over the inputs (outputs) when
    ``inputs`` (the output) is a tuple, a tuple of tuples ``[output][input]`` when both are.

    ``vectorize=True`` computes all rows in one batched pass (``ember.func.jacrev``, or
    ``jacfwd`` with ``strategy="forward-mode"``, which needs ``vectorize=True``); otherwise
    one backward per output element.

    Example:
        >>> jacobian(lambda x, y: x * y, (ember.tensor([1.0, 2.0]), ember.tensor([3.0, 4.0])))
        (tensor([[3., 0.],
                [0., 4.]]), tensor([[1., 0.],
                [0., 2.]]))
    """
    if strategy not in _STRATEGIES:
        raise ValueError(f"jacobian: expected strategy to be 'forward-mode' or "
                         f"'reverse-mode', got {strategy!r}")
    if strategy == "forward-mode":
        if not vectorize:
            raise NotImplementedError("jacobian: strategy='forward-mode' needs "
                                      "vectorize=True (as in PyTorch)")
        if create_graph:
            raise NotImplementedError("jacobian: create_graph=True and "
                                      "strategy='forward-mode' are not supported together "
                                      "(as in PyTorch)")
    if strict and vectorize:
        raise RuntimeError("jacobian: strict=True and vectorize=True are not supported "
                           "together; set strict=False or vectorize=False")
    ins_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
    with enable_grad():
        inputs = _fresh(inputs, create_graph, True)
        if vectorize:
            return _vectorized(func, inputs, ins_tuple, create_graph, strategy)
        outputs = func(*inputs)
        outs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function",
                                        "jacobian")
        _check_requires_grad(outputs, "outputs", strict, "jacobian")
        jac = tuple(_rows(out, i, inputs, strict, create_graph)
                    for i, out in enumerate(outputs))
    return _untuple(_final(jac, create_graph), (outs_tuple, ins_tuple))


def _rows(out, i: int, inputs, strict: bool, create_graph: bool):
    """d out / d input_j for every input: one backward per element of ``out``."""
    from ..ops.factories import zeros, zeros_like
    from ..ops.join import stack
    flat = out.reshape(-1)
    rows = [[] for _ in inputs]
    for k in range(flat.numel()):
        grads = _grad((flat[k],), inputs, retain_graph=True, create_graph=create_graph)
        for j, (g, x) in enumerate(zip(grads, inputs)):
            if g is None:
                if strict:
                    raise RuntimeError(f"jacobian: output {i} of the user-provided function "
                                       f"is independent of input {j}, which strict mode "
                                       f"does not allow")
                g = zeros_like(x)
            rows[j].append(g)
    shape = tuple(out.shape)
    return tuple(
        stack(r, 0).reshape(shape + tuple(x.shape)) if r else
        zeros(shape + tuple(x.shape), dtype=x.dtype, device=x.device)
        for r, x in zip(rows, inputs))


def _vectorized(func, inputs, ins_tuple: bool, create_graph: bool, strategy: str):
    """The Jacobian by one batched VJP (JVP) over the identity: ``ember.func``'s."""
    from ..func import jacfwd, jacrev
    box = {}

    def as_tuple_out(*xs):
        was, outs = _as_tuple(func(*xs), "outputs of the user-provided function",
                              "jacobian")
        box["outs_tuple"] = was
        return outs
    transform = jacrev if strategy == "reverse-mode" else jacfwd
    jac = transform(as_tuple_out, argnums=tuple(range(len(inputs))))(*inputs)
    return _untuple(_final(tuple(tuple(r) for r in jac), create_graph),
                    (box["outs_tuple"], ins_tuple))


def hessian(func, inputs, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False, outer_jacobian_strategy: str = "reverse-mode"):
    """The Hessian of a scalar function at ``inputs``: shape ``I + I`` for one input, a
    tuple of tuples ``[i][j]`` (d2 f / dx_i dx_j) for a tuple of inputs. The Jacobian of the
    gradient: ``vectorize`` and ``outer_jacobian_strategy`` choose how the outer Jacobian
    is computed, as :func:`jacobian`'s ``vectorize`` and ``strategy``.

    Example:
        >>> hessian(lambda x: (x[0] * x[1]) ** 2, ember.tensor([1.0, 2.0]))
        tensor([[8., 8.],
                [8., 2.]])
    """
    ins_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in _STRATEGIES:
        raise ValueError(f"hessian: expected outer_jacobian_strategy to be 'forward-mode' "
                         f"or 'reverse-mode', got {outer_jacobian_strategy!r}")

    def scalar(*xs):
        return _scalar_output(func, xs, strict, "hessian")[0].reshape(())

    def gradient(*xs):
        if vectorize:           # NOTE: inside ember.func's transforms: their gradient
            from ..func import jacrev
            return tuple(jacrev(scalar, argnums=tuple(range(len(xs))))(*xs))
        if outer_jacobian_strategy == "forward-mode":
            xs = tuple(x.requires_grad_(True) if x.is_leaf else x for x in xs)
        jac = jacobian(scalar, xs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict, "hessian")
        return jac
    res = jacobian(gradient, inputs, create_graph=create_graph, strict=strict,
                   vectorize=vectorize, strategy=outer_jacobian_strategy)
    return _untuple(res, (ins_tuple, ins_tuple))


def _scalar_output(func, inputs, strict: bool, fn: str):
    outputs = func(*inputs)
    outs_tuple, outs = _as_tuple(outputs, "outputs of the user-provided function", fn)
    _check_requires_grad(outs, "outputs", strict, fn)
    if outs_tuple:
        raise RuntimeError(f"{fn}: the function given to {fn} should return a single "
                           f"Tensor, got a tuple of {len(outs)}")
    if outputs.numel() != 1:
        raise RuntimeError(f"{fn}: the Tensor returned by the function given to {fn} should "
                           f"have a single element, got shape {tuple(outputs.shape)}")
    return outs


def _second_order_prep(inputs, v, create_graph: bool, fn: str):
    from ..ops.factories import ones_like
    ins_tuple, inputs = _as_tuple(inputs, "inputs", fn)
    inputs = _fresh(inputs, create_graph, True)
    if v is not None:
        _, v = _as_tuple(v, "v", fn)
        v = _fresh(v, create_graph, False)
        _check_v(v, inputs, ins_tuple, fn)
    elif len(inputs) != 1 or inputs[0].numel() != 1:
        raise RuntimeError(f"{fn}: v can only be None if the input to the user-provided "
                           f"function is a single Tensor with a single element; got inputs "
                           f"of shapes {[tuple(x.shape) for x in inputs]}")
    else:
        v = (ones_like(inputs[0]),)
    return ins_tuple, inputs, v


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), v^T H)``: the vector-Hessian product of a scalar function.

    Example:
        >>> out, p = vhp(lambda x: (x ** 3).sum(), ember.tensor([1.0, 2.0]), ember.ones(2))
        >>> p
        tensor([ 6., 12.])
    """
    with enable_grad():
        ins_tuple, inputs, v = _second_order_prep(inputs, v, create_graph, "vhp")
        outs = _scalar_output(func, inputs, strict, "vhp")
        jac = _grad(outs, inputs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict, "vhp")
        with set_grad_enabled(create_graph or is_grad_enabled()):
            res = _grad(jac, inputs, v, create_graph=create_graph)
            res = _zeros_for_none(res, inputs, strict, create_graph, "double_back", "vhp")
    return (_untuple(_final(outs, create_graph), False),
            _untuple(_final(res, create_graph), ins_tuple))


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), H v)``: the Hessian-vector product of a scalar function, by the
    double-backward trick (PyTorch's; :func:`vhp` is cheaper and equal for a symmetric
    Hessian, i.e. a twice continuously differentiable function).

    Example:
        >>> out, p = hvp(lambda x: (x ** 3).sum(), ember.tensor([1.0, 2.0]), ember.ones(2))
        >>> p
        tensor([ 6., 12.])
    """
    from ..ops.factories import zeros_like
    with enable_grad():
        ins_tuple, inputs, v = _second_order_prep(inputs, v, create_graph, "hvp")
        outs = _scalar_output(func, inputs, strict, "hvp")
        jac = _grad(outs, inputs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict, "hvp")
        cot = tuple(zeros_like(x).requires_grad_(True) for x in inputs)
        back = _grad(jac, inputs, cot, create_graph=True)
        _check_requires_grad(back, "hessian", strict, "hvp")
        with set_grad_enabled(create_graph or is_grad_enabled()):
            res = _grad(back, cot, v, create_graph=create_graph)
            res = _zeros_for_none(res, inputs, strict, create_graph, "double_back_trick",
                                  "hvp")
    return (_untuple(_final(outs, create_graph), False),
            _untuple(_final(res, create_graph), ins_tuple))
