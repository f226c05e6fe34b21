"""Function transforms with ``torch.func`` signatures (JAX's shapes).

``grad``, ``grad_and_value``, ``value_and_grad``, ``vjp``, ``jacrev`` / ``jacobian``
(reverse mode); ``jvp``, ``jacfwd``, ``hessian`` (forward mode). They compose:
``grad(grad(f))``, ``jvp(grad(f), ...)``, ``hessian = jacfwd(jacrev(f))``.

Example:
    >>> import ember as em
    >>> em.func.grad(lambda x: (x.exp() * x).sum())(em.tensor([0.0, 1.0]))
"""
from ._tree import tree_flatten, tree_map, tree_unflatten
from .forward import hessian, jacfwd, jvp
from .reverse import grad, grad_and_value, jacobian, jacrev, value_and_grad, vjp

__all__ = ["grad", "grad_and_value", "value_and_grad", "vjp", "jvp", "jacrev", "jacfwd",
           "jacobian", "hessian", "tree_flatten", "tree_unflatten", "tree_map"]
