"""``ember.nn.utils.prune``: mask-based pruning with PyTorch's layout.

Pruning ``m.weight`` moves the parameter to ``weight_orig``, adds a ``weight_mask`` buffer
and a forward pre-hook setting ``m.weight = weight_orig * weight_mask``; pruning the same
tensor again narrows the mask (a ``PruningContainer``); ``remove`` makes the pruned tensor
the parameter again.

Example:
    >>> m = ember.nn.Linear(4, 3)
    >>> l1_unstructured(m, "weight", amount=0.5)   # the 6 smallest |w| masked
"""
from __future__ import annotations

import numbers

from ...autograd.grad_mode import no_grad
from ...ops.factories import ones_like
from ...random import rand_like
from ..parameter import Parameter
from .convert_parameters import parameters_to_vector

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured",
           "L1Unstructured", "CustomFromMask", "identity", "random_unstructured",
           "l1_unstructured", "global_unstructured", "custom_from_mask", "remove", "is_pruned"]


def _validate_amount_init(amount) -> None:
    if isinstance(amount, bool) or not isinstance(amount, numbers.Real) or \
            (isinstance(amount, float) and not 0.0 <= amount <= 1.0) or \
            (isinstance(amount, numbers.Integral) and amount < 0):
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or "
                         f"a non-negative integer")


def _nparams_toprune(amount, size: int) -> int:
    if isinstance(amount, numbers.Integral):
        if amount > size:
            raise ValueError(f"amount={amount} should be smaller than the number of "
                             f"parameters to prune={size}")
        return int(amount)
    return round(amount * size)


def _zero_at(mask, idx):
    flat = mask.reshape(-1).clone()
    flat[idx] = 0
    return flat.reshape(mask.shape)


class BasePruningMethod:
    """A pruning technique: ``compute_mask(t, default_mask)`` gives the new mask."""

    PRUNING_TYPE = "unstructured"
    _tensor_name: str | None = None

    def __call__(self, module, inputs) -> None:
        setattr(module, self._tensor_name, self.apply_mask(module))

    def compute_mask(self, t, default_mask):
        raise NotImplementedError

    def apply_mask(self, module):
        """``<name>_orig * <name>_mask``."""
        if self._tensor_name is None:
            raise RuntimeError(f"{type(module).__name__} has to be pruned first")
        orig = getattr(module, self._tensor_name + "_orig")
        return getattr(module, self._tensor_name + "_mask").to(orig.dtype) * orig

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune ``module.<name>`` in place with this method (combined with earlier ones)."""
        method = cls._composite(module, name, *args, **kwargs)
        orig = getattr(module, name)
        if importance_scores is not None and tuple(importance_scores.shape) != tuple(orig.shape):
            raise ValueError(f"prune: importance_scores has shape {tuple(importance_scores.shape)}"
                             f"; expected {name}'s shape {tuple(orig.shape)}")
        scores = orig if importance_scores is None else importance_scores
        fresh = not isinstance(method, PruningContainer)
        if fresh:
            if name not in module._parameters:
                raise ValueError(f"prune: module {type(module).__name__} has no parameter "
                                 f"'{name}' (parameters: {list(module._parameters)})")
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default = ones_like(orig)
        else:
            default = getattr(module, name + "_mask").detach().clone()
        try:
            with no_grad():
                mask = method.compute_mask(scores.detach(), default_mask=default)
            module.register_buffer(name + "_mask", mask)
            setattr(module, name, method.apply_mask(module))
            module.register_forward_pre_hook(method)
        except Exception:
            if fresh:
                module.register_parameter(name, module._parameters.pop(name + "_orig"))
            raise
        return method

    @classmethod
    def _composite(cls, module, name, *args, **kwargs):
        old = [(k, h) for k, h in module._forward_pre_hooks.items()
               if isinstance(h, BasePruningMethod) and h._tensor_name == name]
        method = cls(*args, **kwargs)
        method._tensor_name = name
        for k, _ in old:
            del module._forward_pre_hooks[k]
        if not old:
            return method
        prev = old[0][1]
        if not isinstance(prev, PruningContainer):
            prev = PruningContainer(prev)
        prev.add_pruning_method(method)
        return prev

    def remove(self, module) -> None:
        """Make the pruned tensor ``module.<name>`` a plain parameter again."""
        if self._tensor_name is None:
            raise RuntimeError(f"{type(module).__name__} has to be pruned before pruning can "
                               f"be removed")
        with no_grad():
            weight = self.apply_mask(module)
        name = self._tensor_name
        module.__dict__.pop(name, None)
        orig = module._parameters.pop(name + "_orig")
        del module._buffers[name + "_mask"]
        with no_grad():
            orig.copy_(weight)
        module.register_parameter(name, orig if isinstance(orig, Parameter)
                                  else Parameter(orig.detach()))


class PruningContainer(BasePruningMethod):
    """Successive unstructured prunings of one tensor: each prunes what is left."""

    def __init__(self, *methods):
        self._pruning_methods: tuple = ()
        for m in methods:
            self.add_pruning_method(m)

    def add_pruning_method(self, method) -> None:
        if not isinstance(method, BasePruningMethod):
            raise TypeError(f"PruningContainer: {type(method).__name__} is not a "
                            f"BasePruningMethod subclass")
        if self._tensor_name is not None and method._tensor_name != self._tensor_name:
            raise ValueError(f"PruningContainer: can only add methods acting on "
                             f"'{self._tensor_name}', got '{method._tensor_name}'")
        if method.PRUNING_TYPE != "unstructured":
            raise NotImplementedError(f"PruningContainer: only unstructured pruning is "
                                      f"supported, got {method.PRUNING_TYPE}")
        self._tensor_name = method._tensor_name
        self._pruning_methods += (method,)

    def __len__(self) -> int:
        return len(self._pruning_methods)

    def compute_mask(self, t, default_mask):
        method = self._pruning_methods[-1]
        keep = default_mask.reshape(-1) == 1
        flat_t = t.reshape(-1)[keep]
        partial = method.compute_mask(flat_t, default_mask=ones_like(flat_t))
        new = default_mask.reshape(-1).clone()
        new[keep] = partial.to(new.dtype)
        return new.reshape(default_mask.shape)


class Identity(BasePruningMethod):
    """Prunes nothing (an all-ones mask)."""

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


class _AmountPruning(BasePruningMethod):
    """Shared body of the unstructured methods that zero ``amount`` entries.

    Subclasses give ``_scores(t)`` and ``_LARGEST``: the ``k`` entries with the highest
    (``_LARGEST``) or lowest score are pruned.
    """

    _LARGEST = True

    def __init__(self, amount):
        _validate_amount_init(amount)
        self.amount = amount

    def _scores(self, t):
        raise NotImplementedError

    def compute_mask(self, t, default_mask):
        k = _nparams_toprune(self.amount, t.numel())
        if k == 0:
            return default_mask.clone()
        return _zero_at(default_mask,
                        self._scores(t).reshape(-1).topk(k, largest=self._LARGEST).indices)


class RandomUnstructured(_AmountPruning):
    """Prunes ``amount`` (a fraction or a count) of the entries chosen uniformly at random."""

    def _scores(self, t):
        return rand_like(t)

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(_AmountPruning):
    """Prunes the ``amount`` (fraction or count) entries of smallest absolute value."""

    _LARGEST = False

    def _scores(self, t):
        return t.abs()

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prunes where the given ``mask`` is 0."""

    def __init__(self, mask):
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if tuple(default_mask.shape) != tuple(self.mask.shape):
            raise ValueError(f"custom_from_mask: mask has shape {tuple(self.mask.shape)}; "
                             f"expected {tuple(default_mask.shape)}")
        return default_mask * self.mask.to(default_mask.dtype)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


def identity(module, name):
    """Apply an all-ones mask to ``module.<name>`` (PyTorch's ``prune.identity``)."""
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    """Prune ``amount`` random entries of ``module.<name>``.

    Args:
        module: the module.
        name: its parameter's name.
        amount: a float in [0, 1] (fraction) or a non-negative int (count).

    Returns:
        ``module``.
    """
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    """Prune the ``amount`` entries of ``module.<name>`` of smallest absolute value.

    Args:
        module: the module.
        name: its parameter's name.
        amount: a float in [0, 1] (fraction) or a non-negative int (count).
        importance_scores: scores ranked instead of the parameter's values.

    Returns:
        ``module``.
    """
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def custom_from_mask(module, name, mask):
    """Prune ``module.<name>`` where ``mask`` is 0."""
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """Prune several tensors at once, ranking all their entries together.

    Args:
        parameters: ``(module, name)`` pairs.
        pruning_method: an unstructured method class (``L1Unstructured``...).
        importance_scores: optional ``{(module, name): scores}``.
        **kwargs: the method's arguments (``amount=``).

    Raises:
        TypeError: ``parameters`` is not an iterable of pairs, or the method is not
            unstructured.
    """
    if not hasattr(parameters, "__iter__") or isinstance(parameters, (str, bytes)):
        raise TypeError(f"global_unstructured: parameters must be an iterable of "
                        f"(module, name) pairs, got {type(parameters).__name__}")
    parameters = list(parameters)
    scores = importance_scores or {}
    flat_scores = parameters_to_vector(
        [scores.get((m, n), getattr(m, n)).detach() for m, n in parameters])
    default = parameters_to_vector(
        [getattr(m, n + "_mask", ones_like(getattr(m, n))) for m, n in parameters])
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(f"global_unstructured: only unstructured pruning methods are "
                        f"supported, got PRUNING_TYPE={method.PRUNING_TYPE!r}")
    container = PruningContainer(method)
    with no_grad():
        mask = container.compute_mask(flat_scores, default)
    at = 0
    for m, n in parameters:
        p = getattr(m, n)
        custom_from_mask(m, n, mask[at:at + p.numel()].reshape(p.shape))
        at += p.numel()


def remove(module, name):
    """Make the pruning of ``module.<name>`` permanent (the masked tensor as parameter).

    Raises:
        ValueError: ``module.<name>`` is not pruned.
    """
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"prune.remove: parameter '{name}' of {type(module).__name__} has to "
                     f"be pruned before pruning can be removed")


def is_pruned(module) -> bool:
    """True if any submodule of ``module`` has a pruning hook."""
    return any(isinstance(h, BasePruningMethod) for m in module.modules()
               for h in m._forward_pre_hooks.values())
