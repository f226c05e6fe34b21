"""Function transforms with ``torch.func`` signatures (JAX's shapes).

``grad``, ``grad_and_value``, ``value_and_grad``, ``vjp``, ``jacrev`` / ``jacobian``
(reverse mode); ``jvp``, ``jacfwd``, ``hessian`` (forward mode). They compose:
``grad(grad(f))``, ``jvp(grad(f), ...)``, ``hessian = jacfwd(jacrev(f))``.
``functional_call`` calls a module with a dict of weights; ``stack_module_state`` stacks
the weights of several models for ensembles.

Example:
    >>> import ember as em
    >>> em.func.grad(lambda x: (x.exp() * x).sum())(em.tensor([0.0, 1.0]))
"""
from ._tree import tree_flatten, tree_map, tree_unflatten
from .ensembling import stack_module_state
from .forward import hessian, jacfwd, jvp
from .functional_call import functional_call
from .reverse import grad, grad_and_value, jacobian, jacrev, value_and_grad, vjp
from ._vmap import vmap

__all__ = ["grad", "grad_and_value", "value_and_grad", "vjp", "jvp", "jacrev", "jacfwd",
           "jacobian", "hessian", "vmap", "functional_call", "stack_module_state", "tree_flatten",
           "tree_unflatten", "tree_map"]
