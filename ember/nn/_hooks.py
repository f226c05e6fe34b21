"""Module hooks: handles, global forward hooks, and the slow call path that runs hooks.

Full backward hooks work like PyTorch's ``BackwardHook``: the module's tensor inputs and
outputs pass through identity :class:`~ember.autograd.Function` s whose backward sees the
gradients, so ``hook(module, grad_input, grad_output)`` runs once the input gradients
are known and may replace them.
"""
from __future__ import annotations

from collections import OrderedDict

from ..autograd.function import Function
from ..autograd.grad_mode import state as _grad_state
from ..autograd.hooks import RemovableHandle  # noqa: F401 - re-exported (its home below nn)
from ..tensor import Tensor

__all__ = ["RemovableHandle", "register_module_forward_pre_hook",
           "register_module_forward_hook"]

_global_forward_pre_hooks: OrderedDict = OrderedDict()
_global_forward_hooks: OrderedDict = OrderedDict()




def register_module_forward_pre_hook(hook) -> RemovableHandle:
    """``hook(module, args)`` before every module's forward (debugging/profiling)."""
    return RemovableHandle(_global_forward_pre_hooks, hook)


def register_module_forward_hook(hook) -> RemovableHandle:
    """``hook(module, args, output)`` after every module's forward."""
    return RemovableHandle(_global_forward_hooks, hook)


def has_global_hooks() -> bool:
    return bool(_global_forward_pre_hooks or _global_forward_hooks)


def call_with_hooks(module, args: tuple, kwargs: dict):
    """``Module.__call__`` when any hook is registered (PyTorch's order: global hooks first)."""
    d = module.__dict__
    pre_kw = d["_forward_pre_hooks_with_kwargs"]
    for hid, hook in [*_global_forward_pre_hooks.items(), *d["_forward_pre_hooks"].items()]:
        if hid in pre_kw:
            r = hook(module, args, kwargs)
            if r is not None:
                if not (isinstance(r, tuple) and len(r) == 2):
                    raise RuntimeError(f"forward pre-hook must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {r}.")
                args, kwargs = r
        else:
            r = hook(module, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
    bw = None
    if (d["_backward_hooks"] or d["_backward_pre_hooks"]) and _grad_state.grad_enabled:
        bw = _BackwardHookState(module)
        args = bw.wrap_inputs(args)
    out = module.forward(*args, **kwargs)
    post_kw = d["_forward_hooks_with_kwargs"]
    for hid, hook in [*_global_forward_hooks.items(), *d["_forward_hooks"].items()]:
        r = hook(module, args, kwargs, out) if hid in post_kw else hook(module, args, out)
        if r is not None:
            out = r
    if bw is not None:
        out = bw.wrap_outputs(out)
    return out


class _BackwardHookState:
    def __init__(self, module):
        self.module = module
        self.n_inputs = 0
        self.inputs_hooked = False
        self.grad_outputs = None

    def wrap_inputs(self, args: tuple) -> tuple:
        idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        self.n_inputs = len(idx)
        if not any(args[i].requires_grad for i in idx):
            return args
        self.inputs_hooked = True
        new = _as_tuple(_HookInputs.apply(self, *[args[i] for i in idx]))
        args = list(args)
        for i, t in zip(idx, new):
            args[i] = t
        return tuple(args)

    def wrap_outputs(self, out):
        flat = [out] if isinstance(out, Tensor) else list(out) \
            if isinstance(out, (tuple, list)) else []
        idx = [i for i, o in enumerate(flat) if isinstance(o, Tensor) and o.requires_grad]
        if not idx:
            return out
        new = _as_tuple(_HookOutputs.apply(self, *[flat[i] for i in idx]))
        for i, t in zip(idx, new):
            flat[i] = t
        return flat[0] if isinstance(out, Tensor) else type(out)(flat)

    def run_pre_hooks(self, grads: tuple) -> tuple:
        for hook in tuple(self.module.__dict__["_backward_pre_hooks"].values()):
            r = hook(self.module, grads)
            if r is not None:
                grads = _as_tuple(r)
        self.grad_outputs = grads
        if not self.inputs_hooked:
            self.run_hooks((None,) * self.n_inputs)
        return grads

    def run_hooks(self, grad_inputs: tuple) -> tuple:
        for hook in tuple(self.module.__dict__["_backward_hooks"].values()):
            r = hook(self.module, grad_inputs, self.grad_outputs)
            if r is not None:
                r = _as_tuple(r)
                if len(r) != len(grad_inputs):
                    raise RuntimeError(f"Backward hook returned an invalid number of grad_input, "
                                       f"got {len(r)}, but expected {len(grad_inputs)}")
                grad_inputs = r
        return grad_inputs


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


class _HookInputs(Function):
    """Identity on the module's tensor inputs; its backward runs the full backward hooks."""

    @staticmethod
    def forward(ctx, st, *xs):
        ctx.st = st
        return xs if len(xs) > 1 else xs[0]

    @staticmethod
    def backward(ctx, *grads):
        need = ctx.needs_input_grad[1:]
        grads = tuple(g if n else None for g, n in zip(grads, need))
        return (None, *ctx.st.run_hooks(grads))


class _HookOutputs(Function):
    """Identity on the module's outputs; its backward captures ``grad_output``."""

    @staticmethod
    def forward(ctx, st, *ys):
        ctx.st = st
        return ys if len(ys) > 1 else ys[0]

    @staticmethod
    def backward(ctx, *grads):
        return (None, *ctx.st.run_pre_hooks(grads))
