"""Shared plumbing of the hook-based reparametrisations (``weight_norm``, ``spectral_norm``).

Each keeps one forward pre-hook object per parameter name on the module; these helpers find
the parameter, refuse a second hook on it and remove one again.
"""

from __future__ import annotations

from ..module import Module


def take_hooked_parameter(module: Module, name: str, hook_cls: type, fn_name: str):
    """Return ``module``'s parameter ``name``, checked free for a new ``hook_cls`` hook.

    Args:
        module: the module.
        name: the parameter's name.
        hook_cls: the hook class (``WeightNorm``, ``SpectralNorm``).
        fn_name: the public function's name, for the messages.

    Raises:
        RuntimeError: a ``hook_cls`` hook is already registered on ``name``.
        ValueError: ``module`` has no parameter ``name``.
    """
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, hook_cls) and hook.name == name:
            raise RuntimeError(f"{fn_name}: cannot register two {fn_name} hooks on the same "
                               f"parameter '{name}'")
    weight = module._parameters.get(name)
    if weight is None:
        raise ValueError(f"{fn_name}: module {type(module).__name__} has no parameter "
                         f"'{name}' (parameters: {list(module._parameters)})")
    return weight


def remove_hook(module: Module, name: str, hook_cls: type, fn_name: str) -> Module:
    """Undo the ``hook_cls`` reparametrisation of ``module.<name>``.

    Raises:
        ValueError: no ``hook_cls`` hook on ``name``.
    """
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, hook_cls) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"remove_{fn_name}: {fn_name} of '{name}' not found in "
                     f"{type(module).__name__}")
