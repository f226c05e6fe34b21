"""``stack_module_state``: the weights of several models stacked for ``vmap`` (``torch.func``).

Example:
    >>> models = [ember.nn.Linear(3, 3) for _ in range(5)]
    >>> params, buffers = stack_module_state(models)
    >>> call = lambda p, b, x: functional_call(models[0], (p, b), (x,))
    >>> ember.func.vmap(call, in_dims=(0, 0, None))(params, buffers, ember.randn(64, 3)).shape
    ember.Size([5, 64, 3])
"""
from __future__ import annotations

from ..tensor import Tensor

__all__ = ["stack_module_state"]


def _check_same(models) -> None:
    if len(models) == 0:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if len({bool(m.training) for m in models}) > 1:
        raise RuntimeError("stack_module_state: Expected all models to have the same "
                           "training/eval mode.")
    kinds = {type(m).__name__ for m in models}
    if len(kinds) > 1:
        raise RuntimeError(f"stack_module_state: Expected all models to be of the same class, "
                           f"got {sorted(kinds)}")


def _stacked(models, what: str) -> dict:
    """``{name: stacked tensor}`` of ``named_parameters``/``named_buffers`` of all models."""
    per_model = [dict(getattr(m, what)()) for m in models]
    names = list(per_model[0])
    for i, d in enumerate(per_model[1:], 1):
        if list(d) != names:
            missing = sorted(set(names) - set(d))
            extra = sorted(set(d) - set(names))
            raise RuntimeError(f"stack_module_state: model {i} has different {what[6:]} from "
                               f"model 0 (missing {missing}, unexpected {extra}); all models "
                               f"must have the same structure")
    return {k: _stacked_leaf([d[k] for d in per_model], k) for k in names}


def _stacked_leaf(tensors, name: str) -> Tensor:
    from ..ops.join import stack
    shapes = {tuple(t.shape) for t in tensors}
    dtypes = {str(t.dtype) for t in tensors}
    if len(shapes) > 1 or len(dtypes) > 1:
        raise RuntimeError(f"stack_module_state: '{name}' differs across models (shapes "
                           f"{sorted(shapes)}, dtypes {sorted(dtypes)}); all models must have "
                           f"the same structure")
    grads = {bool(t.requires_grad) for t in tensors}
    if len(grads) > 1:
        raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
    out = stack([t.detach() for t in tensors])
    if grads == {True}:
        out.requires_grad_()
    return out


def stack_module_state(models) -> tuple[dict, dict]:
    """Stack the parameters and buffers of ``models`` along a new dim 0 (``torch.func``).

    Args:
        models: a list (or ``nn.ModuleList``) of ``M`` models of the same class and
            structure, all in training or all in eval mode.

    Returns:
        ``(params, buffers)``: ``{name: tensor of shape (M, *shape)}`` by the names of
        ``named_parameters()`` and ``named_buffers()``. Stacked parameters are new leaves
        that require grad (an optimizer can take them), detached from the models'.

    Raises:
        RuntimeError: no models, mixed train/eval modes, different classes, or different
            parameter/buffer names, shapes, dtypes or ``requires_grad``.

    Example:
        >>> params, buffers = stack_module_state([ember.nn.Linear(3, 2) for _ in range(4)])
        >>> params["weight"].shape
        ember.Size([4, 2, 3])
    """
    models = list(models)
    _check_same(models)
    return _stacked(models, "named_parameters"), _stacked(models, "named_buffers")
