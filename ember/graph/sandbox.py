"""Run a traced call and put back everything it changed (``memory_plan`` of a new signature).

``ember.compile`` traces with real values, so a capture *is* a call: a training step's
capture updates the parameters, creates gradients and optimizer state and draws random
numbers. :meth:`CompiledFunction.memory_plan` must answer before anything runs, so it
captures inside :func:`side_effects_undone`, which first saves what the call can reach —
the values and autograd fields of the argument tensors, of the parameters, buffers and
gradients of the modules it reaches, of the optimizers' state, and of the tensors in its
closure and globals; the modules' parameter/buffer slots; the optimizers' state dicts,
param groups and attributes; the random generators' states — and restores all of it after
the capture, also when the capture raises.
"""
from __future__ import annotations

import contextlib

from ..func._tree import tree_flatten
from ..tensor import Tensor

__all__ = ["side_effects_undone"]


@contextlib.contextmanager
def side_effects_undone(fn, args, kwargs, roots):
    """Save the state ``fn(*args, **kwargs)`` can change; restore it on exit.

    Args:
        fn: the traced function (or Module).
        args, kwargs: the call's arguments.
        roots: the modules, parameters and optimizers ``fn`` reaches
            (``ember.graph.discover.discover``).

    Example:
        >>> with side_effects_undone(step, (x, y), {}, discover(step, (x, y), {})):
        ...     step(x, y)          # parameters, .grad, optimizer state: as before
    """
    snap = _Snapshot(fn, args, kwargs, roots)
    try:
        yield snap
    finally:
        snap.restore()


class _Snapshot:
    def __init__(self, fn, args, kwargs, roots):
        from ..random import Generator, default_generator
        self.tensors: dict = {}      # id -> (tensor, its autograd fields)
        self.values: dict = {}       # id(storage) -> (root array, copy of its values, version)
        self.slots: list = []        # (dict, shallow copy): module slots, optimizer state...
        self.generators = {id(default_generator): default_generator}
        found = [x for x in tree_flatten((args, kwargs))[0]]
        found += _reachable_objects(fn)
        for _, m in roots.modules:
            self.slots += [(m._parameters, dict(m._parameters)),
                           (m._buffers, dict(m._buffers))]
            found += [v for v in vars(m).values() if isinstance(v, Generator)]
            found += [b for b in m._buffers.values() if b is not None]
        for _, p in roots.params:
            found += [p, p.grad]
        for _, opt in roots.optimizers:
            self._save_optimizer(opt, found)
        for x in found:
            if isinstance(x, Tensor):
                self._save_tensor(x)
            elif isinstance(x, Generator):
                self.generators[id(x)] = x
        self.rng = [(g, g.get_state()) for g in self.generators.values()]

    def _save_optimizer(self, opt, found: list) -> None:
        self.slots.append((opt.state, {p: dict(s) for p, s in opt.state.items()}))
        self.slots += [(g, dict(g)) for g in opt.param_groups]
        self.slots.append((vars(opt), dict(vars(opt))))
        for s in opt.state.values():
            found += [v for v in s.values() if isinstance(v, Tensor)]

    def _save_tensor(self, t: Tensor) -> None:
        if id(t) in self.tensors:
            return
        self.tensors[id(t)] = (t, (t._data, t._grad, t._grad_fn, t._out_nr, t._requires_grad))
        if t._grad is not None:
            self._save_tensor(t._grad)
        st = t._storage
        root = t._base._data if t._base is not None else t._data
        if id(st) not in self.values and getattr(root, "flags", None) is not None and \
                root.flags.writeable:     # NOTE: nothing writes a read-only array
            self.values[id(st)] = (st, root, root.copy(), st.version)

    def restore(self) -> None:
        for st, root, saved, version in self.values.values():
            root[...] = saved
            st.version = version
        for t, (data, grad, grad_fn, out_nr, req) in self.tensors.values():
            t._data, t._grad, t._grad_fn, t._out_nr, t._requires_grad = \
                data, grad, grad_fn, out_nr, req
        for d, saved in self.slots:
            d.clear()
            d.update(saved)
        for g, state in self.rng:
            g.set_state(state)


def _reachable_objects(fn) -> list:
    """Tensors and generators in ``fn``'s closure, the globals it names and its ``self``
    (and in lists, tuples and dicts there, one level down)."""
    f = getattr(fn, "__func__", fn)
    objs = [getattr(fn, "__self__", None)]
    code = getattr(f, "__code__", None)
    if code is not None:
        for cell in f.__closure__ or ():
            with contextlib.suppress(ValueError):
                objs.append(cell.cell_contents)
        objs += list(f.__defaults__ or ()) + list((f.__kwdefaults__ or {}).values())
        g = getattr(f, "__globals__", {})
        objs += [g[n] for n in code.co_names if n in g]
    out = []
    for o in objs:
        out.append(o)
        if isinstance(o, (list, tuple)):
            out += list(o)[:256]
        elif isinstance(o, dict) and len(o) <= 256:
            out += list(o.values())
    return out
