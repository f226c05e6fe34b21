"""Which nodes a backward pass visits: everything reachable from its roots, and (for
``autograd.grad``) only the nodes on a path to a requested input."""
from __future__ import annotations

from .graph import Node


def _collect(roots):
    """All nodes reachable from ``roots`` and the leaves they reach."""
    # NOTE: one dict is both the seen-set and the list, in visiting order (Node hashes by
    # identity: no id() calls)
    seen: dict = {}
    stack = [n for n in roots if n is not None]
    push = stack.append
    pop = stack.pop
    while stack:
        n = pop()
        if n in seen:
            continue
        seen[n] = None
        for e in n.next:
            if e is not None:
                t = e[0]
                if t.__class__ is Node and t not in seen:
                    push(t)
    return list(seen)


def _prune(nodes, target_nodes, target_leaves):
    """Nodes that lie on a path to some target (for ``autograd.grad``)."""
    needed = set()
    for n in sorted(nodes, key=lambda n: n.seq):  # inputs before consumers
        if id(n) in target_nodes:
            needed.add(id(n))
            continue
        for e in n.next:
            if e is None:
                continue
            if e[0].__class__ is not Node:   # a leaf tensor (Tensor or a subclass)
                if id(e[0]) in target_leaves:
                    needed.add(id(n))
                    break
            elif id(e[0]) in needed:
                needed.add(id(n))
                break
    return needed
