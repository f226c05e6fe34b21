"""``ember.utils._pytree``: ``torch.utils._pytree``'s API, with its conventions.

Libraries written for PyTorch register their output classes here
(``register_pytree_node(ModelOutput, flatten, unflatten)``) and map over nested
containers with ``tree_map``. PyTorch's conventions hold: dicts keep their insertion
order; tuples, lists, dicts, namedtuples, ``OrderedDict``, ``defaultdict`` and ``deque``
are nodes, anything else (``None`` too) a leaf. (:mod:`ember.func`'s own pytree sorts dict
keys, as ``jax.tree_util`` does; the two are kept apart.)

Example:
    >>> tree_map(lambda t: t * 2, {"a": ember.ones(2), "b": [ember.ones(1), None]})
    {'a': tensor([2., 2.]), 'b': [tensor([2.]), None]}
"""
from __future__ import annotations

from collections import OrderedDict, defaultdict, deque
from typing import Callable, NamedTuple

__all__ = ["TreeSpec", "LeafSpec", "register_pytree_node", "tree_flatten", "tree_unflatten",
           "tree_leaves", "tree_structure", "tree_map", "tree_map_only", "tree_all",
           "tree_any", "treespec_dumps", "tree_iter"]


class _Node(NamedTuple):
    flatten: Callable      # obj -> (children, context)
    unflatten: Callable    # (children, context) -> obj


SUPPORTED_NODES: dict = {}


def register_pytree_node(cls, flatten_fn, unflatten_fn, *, serialized_type_name=None,
                         to_dumpable_context=None, from_dumpable_context=None,
                         flatten_with_keys_fn=None) -> None:
    """Make ``cls`` a container: ``flatten_fn(obj) -> (children, context)`` and
    ``unflatten_fn(children, context) -> obj``.

    Raises:
        ValueError: ``cls`` is already registered.
    """
    if cls in SUPPORTED_NODES:
        raise ValueError(f"{cls} is already registered as pytree node.")
    SUPPORTED_NODES[cls] = _Node(flatten_fn, unflatten_fn)


def _is_namedtuple(cls) -> bool:
    return issubclass(cls, tuple) and hasattr(cls, "_fields")


def _node_of(x):
    cls = type(x)
    node = SUPPORTED_NODES.get(cls)
    if node is None and _is_namedtuple(cls):
        return _NAMEDTUPLE
    return node


register_pytree_node(tuple, lambda t: (list(t), None), lambda c, _: tuple(c))
register_pytree_node(list, lambda t: (list(t), None), lambda c, _: list(c))
register_pytree_node(dict, lambda d: (list(d.values()), list(d)),
                     lambda c, keys: dict(zip(keys, c)))
register_pytree_node(OrderedDict, lambda d: (list(d.values()), list(d)),
                     lambda c, keys: OrderedDict(zip(keys, c)))
register_pytree_node(defaultdict, lambda d: (list(d.values()), (d.default_factory, list(d))),
                     lambda c, ctx: defaultdict(ctx[0], zip(ctx[1], c)))
register_pytree_node(deque, lambda d: (list(d), d.maxlen), lambda c, m: deque(c, maxlen=m))
_NAMEDTUPLE = _Node(lambda t: (list(t), type(t)), lambda c, cls: cls(*c))


class TreeSpec:
    """The structure of a pytree: its node type, context and children's specs."""

    def __init__(self, type, context, children_specs):
        self.type, self.context, self.children_specs = type, context, list(children_specs)
        self.num_leaves = sum(c.num_leaves for c in self.children_specs)
        self.num_children = len(self.children_specs)

    def is_leaf(self) -> bool:
        return False

    def unflatten(self, leaves):
        return tree_unflatten(leaves, self)

    def __eq__(self, other) -> bool:
        return (isinstance(other, TreeSpec) and self.is_leaf() == other.is_leaf() and
                self.type is other.type and self.context == other.context and
                self.children_specs == other.children_specs)

    def __repr__(self) -> str:
        if self.is_leaf():
            return "*"
        name = getattr(self.type, "__name__", str(self.type))
        return f"TreeSpec({name}, {self.context!r}, [{', '.join(map(repr, self.children_specs))}])"


class LeafSpec(TreeSpec):
    """The spec of one leaf."""

    def __init__(self):
        super().__init__(None, None, [])
        self.num_leaves = 1

    def is_leaf(self) -> bool:
        return True


def _is_leaf(x, is_leaf) -> bool:
    return (is_leaf is not None and is_leaf(x)) or _node_of(x) is None


def tree_flatten(tree, is_leaf=None):
    """``(leaves, spec)`` of ``tree``; ``is_leaf(x)`` may stop the descent early."""
    leaves: list = []

    def walk(x):
        if _is_leaf(x, is_leaf):
            leaves.append(x)
            return LeafSpec()
        node = _node_of(x)
        children, ctx = node.flatten(x)
        typ = type(x) if node is not _NAMEDTUPLE else _NAMEDTUPLE
        return TreeSpec(typ, ctx, [walk(c) for c in children])
    return leaves, walk(tree)


def tree_unflatten(leaves, treespec: TreeSpec):
    """The pytree of ``treespec``'s structure holding ``leaves``."""
    leaves = list(leaves)
    if len(leaves) != treespec.num_leaves:
        raise ValueError(f"treespec.unflatten(leaves): `leaves` has length {len(leaves)} but "
                         f"the spec refers to a pytree that holds {treespec.num_leaves} items "
                         f"({treespec}).")
    it = iter(leaves)

    def build(spec):
        if spec.is_leaf():
            return next(it)
        children = [build(c) for c in spec.children_specs]
        node = spec.type if spec.type is _NAMEDTUPLE else SUPPORTED_NODES[spec.type]
        return node.unflatten(children, spec.context)
    return build(treespec)


def tree_leaves(tree, is_leaf=None) -> list:
    """The leaves of ``tree``, in flattening order."""
    return tree_flatten(tree, is_leaf)[0]


def tree_iter(tree, is_leaf=None):
    """An iterator over the leaves of ``tree``."""
    return iter(tree_leaves(tree, is_leaf))


def tree_structure(tree, is_leaf=None) -> TreeSpec:
    """The :class:`TreeSpec` of ``tree``."""
    return tree_flatten(tree, is_leaf)[1]


def tree_map(func, tree, *rests, is_leaf=None):
    """``func`` applied to each leaf of ``tree`` (and the matching leaves of ``rests``,
    which must have ``tree``'s structure), in ``tree``'s structure.

    Raises:
        ValueError: a tree in ``rests`` has another structure.
    """
    leaves, spec = tree_flatten(tree, is_leaf)
    others = []
    for r in rests:
        rl, rs = tree_flatten(r, is_leaf)
        if rs != spec:
            raise ValueError(f"tree_map: the trees have different structures: {spec} vs {rs}")
        others.append(rl)
    return tree_unflatten([func(*xs) for xs in zip(leaves, *others)], spec)


def _only(types):
    return types if isinstance(types, tuple) else (types,)


def tree_map_only(type_or_types, func, tree, is_leaf=None):
    """``func`` applied to the leaves that are instances of ``type_or_types``; other
    leaves stay as they are."""
    types = _only(type_or_types)
    return tree_map(lambda x: func(x) if isinstance(x, types) else x, tree, is_leaf=is_leaf)


def tree_all(pred, tree, is_leaf=None) -> bool:
    return all(pred(x) for x in tree_leaves(tree, is_leaf))


def tree_any(pred, tree, is_leaf=None) -> bool:
    return any(pred(x) for x in tree_leaves(tree, is_leaf))


def treespec_dumps(treespec: TreeSpec, protocol=None) -> str:
    """A readable string of ``treespec`` (PyTorch writes JSON it can load back; Ember has
    no ``treespec_loads``)."""
    return repr(treespec)

