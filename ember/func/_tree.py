"""A tiny pytree: nested tuples, lists and dicts with tensors (or anything) as leaves.

Example:
    >>> leaves, spec = tree_flatten({"a": x, "b": (y, z)})
    >>> tree_unflatten(leaves, spec)     # {"a": x, "b": (y, z)}
"""
from __future__ import annotations

__all__ = ["tree_flatten", "tree_unflatten", "tree_map", "LEAF"]

LEAF = None   # the spec of a leaf


def tree_flatten(tree):
    """``(leaves, spec)``; tuples, lists and dicts (sorted keys) are containers."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree, leaves):
    if isinstance(tree, (tuple, list)):
        return (type(tree), None, [_flatten(t, leaves) for t in tree])
    if isinstance(tree, dict):
        keys = sorted(tree)
        return (dict, keys, [_flatten(tree[k], leaves) for k in keys])
    leaves.append(tree)
    return LEAF


def tree_unflatten(leaves, spec):
    """Rebuild the structure ``spec`` (from :func:`tree_flatten`) with ``leaves``."""
    it = iter(leaves)
    out = _unflatten(it, spec)
    if next(it, _END) is not _END:
        raise ValueError("tree_unflatten: more leaves than the structure holds")
    return out


_END = object()


def _unflatten(it, spec):
    if spec is LEAF:
        leaf = next(it, _END)
        if leaf is _END:
            raise ValueError("tree_unflatten: fewer leaves than the structure holds")
        return leaf
    kind, keys, children = spec
    vals = [_unflatten(it, c) for c in children]
    if kind is dict:
        return dict(zip(keys, vals))
    if hasattr(kind, "_fields"):   # namedtuple
        return kind(*vals)
    return kind(vals)


def tree_map(fn, tree):
    """Apply ``fn`` to every leaf of ``tree``."""
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([fn(x) for x in leaves], spec)
