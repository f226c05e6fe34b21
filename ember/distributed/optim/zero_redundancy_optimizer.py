"""ZeRO stage 1: optimizer state sharded across ranks (``ZeroRedundancyOptimizer``).

Each parameter is owned by one rank (greedy by size, largest first, as PyTorch does).
A rank's local optimizer holds state for its own parameters only, so per-rank
optimizer memory is about ``1/world_size`` of a replicated optimizer. ``step()``
updates the owned parameters from the (already averaged) gradients, then every rank's
parameters are broadcast from their owner, one flat buffer per owner, so all replicas
agree bit for bit. ``consolidate_state_dict(to=0)`` gathers the shards; ``state_dict()``
on that rank then returns an ordinary optimizer state dict (global parameter indices)
that loads into a ZeroRedundancyOptimizer of any world size or a plain optimizer.

Example:
    >>> opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=ember.optim.AdamW,
    ...                               lr=1e-3)
    >>> loss_fn(ddp(x), y).backward(); opt.step()
    >>> opt.consolidate_state_dict(to=0)
    >>> if dist.get_rank() == 0: ember.save({"optimizer": opt.state_dict()}, path)
"""
from __future__ import annotations

import numpy as np

from ...autograd.grad_mode import no_grad
from ...optim.optimizer import Optimizer
from ...tensor import Tensor

__all__ = ["ZeroRedundancyOptimizer"]


def _dist():
    from ... import distributed as dist
    if not dist.is_initialized():
        raise RuntimeError("ZeroRedundancyOptimizer: the default process group has not been "
                           "initialized; call ember.distributed.init_process_group() first")
    return dist


def _to_host(v):
    """State values as picklable NumPy arrays (Ember tensors are not picklable)."""
    if isinstance(v, Tensor):
        return ("__tensor__", v.detach().cpu().numpy().copy())
    if isinstance(v, dict):
        return {k: _to_host(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_to_host(x) for x in v)
    return v


def _from_host(v):
    from ...ops.factories import from_numpy
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "__tensor__":
        return from_numpy(v[1])
    if isinstance(v, dict):
        return {k: _from_host(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_from_host(x) for x in v)
    return v


class ZeroRedundancyOptimizer(Optimizer):
    """Wraps ``optimizer_class`` so each rank keeps 1/N of the optimizer state.

    Args:
        params: parameters or parameter groups, as for any optimizer (same on every rank).
        optimizer_class: the local optimizer, e.g. ``ember.optim.AdamW``.
        process_group: the group to shard over (default: the whole world).
        parameters_as_bucket_view, overlap_with_ddp: accepted for PyTorch compatibility;
            only ``False`` is supported.
        **defaults: the local optimizer's hyper-parameters (``lr=...``).
    """

    def __init__(self, params, optimizer_class, process_group=None,
                 parameters_as_bucket_view: bool = False, overlap_with_ddp: bool = False,
                 **defaults) -> None:
        if overlap_with_ddp or parameters_as_bucket_view:
            raise ValueError("ZeroRedundancyOptimizer: overlap_with_ddp and "
                             "parameters_as_bucket_view are not supported (pass False)")
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, Optimizer)):
            raise TypeError(f"ZeroRedundancyOptimizer: optimizer_class must be an Optimizer "
                            f"subclass, got {optimizer_class!r}")
        self._dist, self.process_group = _dist(), process_group
        self.world_size = self._dist.get_world_size(process_group)
        self.rank = self._dist.get_rank(process_group)
        self._optimizer_class = optimizer_class
        super().__init__(params, defaults)
        self._all_state_dicts = None
        self._build()

    def _validate_group(self, group) -> None:
        pass   # NOTE: the local optimizer validates its own hyper-parameters

    def add_param_group(self, param_group: dict) -> None:
        """Add a group before the first step (the partition is rebuilt; no state is lost)."""
        super().add_param_group(param_group)
        if hasattr(self, "_owned"):
            if self.optim is not None and self.optim.state:
                raise RuntimeError("ZeroRedundancyOptimizer.add_param_group: not supported "
                                   "after the first step (the optimizer state is sharded by "
                                   "the old partition); add every group before stepping")
            self._build()

    # ------------------------------------------------------------------ partition
    def _build(self) -> None:
        """Assign each parameter an owner and build this rank's local optimizer."""
        sizes = [0] * self.world_size
        self._owned = []   # per global group: {rank: [params]}
        for group in self.param_groups:
            per_rank = {r: [] for r in range(self.world_size)}
            for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):
                r = sizes.index(min(sizes))
                per_rank[r].append(p)
                sizes[r] += p.numel()
            self._owned.append(per_rank)
        self._index = {id(p): i for i, p in enumerate(
            p for g in self.param_groups for p in g["params"])}
        local = [dict({k: v for k, v in g.items() if k not in ("params", "param_names")},
                      params=per_rank[self.rank])
                 for g, per_rank in zip(self.param_groups, self._owned)]
        self._has_local = any(g["params"] for g in local)
        self.optim = self._optimizer_class(local, **self.defaults) if self._has_local else None
        self._flat = {}

    def params_of(self, rank: int) -> list:
        """Parameters owned (updated and broadcast) by ``rank``, in a fixed order."""
        return [p for per_rank in self._owned for p in per_rank[rank]]

    # ------------------------------------------------------------------ stepping
    def step(self, closure=None):
        """Update this rank's parameters, then broadcast every rank's to all the others."""
        loss = None
        if self.optim is not None:
            for g, lg in zip(self.param_groups, self.optim.param_groups):
                lg.update({k: v for k, v in g.items() if k not in ("params", "param_names")})
            loss = self.optim.step(closure)
        self._sync_params()
        return loss

    def _sync_params(self) -> None:
        if self.world_size == 1:
            return
        from ...nn.parallel import _traced
        tr = _traced.active_tracer()
        if tr is not None:
            self._sync_traced(tr, _traced)
            return
        from ...ops.factories import empty
        from ...ops.join import cat
        with no_grad():
            for r in range(self.world_size):
                params = self.params_of(r)
                if not params:
                    continue
                if r == self.rank:
                    flat = cat([p.detach().reshape(-1) for p in params])
                else:
                    flat = self._flat.get(r)
                    if flat is None:
                        n = sum(p.numel() for p in params)
                        flat = self._flat[r] = empty(n, dtype=params[0].dtype)
                self._dist.broadcast(flat, src=self._global_rank(r), group=self.process_group)
                if r != self.rank:
                    o = 0
                    for p in params:
                        p.detach().copy_(flat[o:o + p.numel()].view(p.shape))
                        o += p.numel()

    def _sync_traced(self, tr, _traced) -> None:
        """Under ``ember.compile``: one broadcast node per owner, copied into the params.

        NOTE: the owner copies its own values back too, so its node has a reader (never
        dead code) and every rank's graph holds the same chain of collectives.
        """
        from ...ops.join import cat
        after = None
        with no_grad():
            for r in range(self.world_size):
                params = self.params_of(r)
                if not params:
                    continue
                flat = cat([p.detach().reshape(-1) for p in params])
                after = _traced.broadcast_node(tr, flat, after, self._dist, self.process_group,
                                               src=self._global_rank(r))
                o = 0
                for p in params:
                    p.detach().copy_(after[o:o + p.numel()].view(p.shape))
                    o += p.numel()

    def _global_rank(self, r: int) -> int:
        if self.process_group is None:
            return r
        return self._dist.get_global_rank(self.process_group, r)

    # ------------------------------------------------------------------ state dicts
    def local_state_bytes(self) -> int:
        """Bytes of optimizer state this rank holds (its shard)."""
        if self.optim is None:
            return 0
        return sum(v.numel() * v.element_size() for st in self.optim.state.values()
                   for v in st.values() if isinstance(v, Tensor))

    def _local_global_state(self) -> dict:
        """This rank's state keyed by global parameter index, as NumPy (picklable)."""
        if self.optim is None:
            return {}
        local = [p for g in self.optim.param_groups for p in g["params"]]
        sd = self.optim.state_dict()
        return {self._index[id(local[k])]: _to_host(v) for k, v in sd["state"].items()}

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather the state shards on rank ``to`` (collective: call it on every rank)."""
        parts = [None] * self.world_size
        self._dist.all_gather_object(parts, self._local_global_state(), group=self.process_group)
        if self.rank == to:
            merged = {}
            for part in parts:
                merged.update(part)
            self._all_state_dicts = {k: _from_host(v) for k, v in sorted(merged.items())}
        else:
            self._all_state_dicts = None

    def state_dict(self) -> dict:
        """The whole optimizer's state dict (call :meth:`consolidate_state_dict` first)."""
        if self._all_state_dicts is None:
            raise RuntimeError("Optimizer state has not been consolidated on this rank. Please "
                               "call `consolidate_state_dict(to=0)` on all ranks beforehand if "
                               "you meant to save the global state.")
        groups, n = [], 0
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = list(range(n, n + len(g["params"])))
            n += len(g["params"])
            groups.append(packed)
        return {"state": dict(self._all_state_dicts), "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a whole-optimizer state dict (from any world size); keep this rank's shard."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(saved)} parameter groups, the "
                             f"optimizer has {len(self.param_groups)}")
        for g, s in zip(self.param_groups, saved):
            g.update({k: v for k, v in s.items() if k not in ("params", "param_names")})
        if self.optim is None:
            return
        state = {int(k): v for k, v in state_dict["state"].items()}
        local_state, local_groups, n = {}, [], 0
        for lg, g in zip(self.optim.param_groups, self.param_groups):
            packed = {k: v for k, v in g.items() if k not in ("params", "param_names")}
            packed["params"] = list(range(n, n + len(lg["params"])))
            for k, p in enumerate(lg["params"]):
                if self._index[id(p)] in state:
                    local_state[n + k] = state[self._index[id(p)]]
            n += len(lg["params"])
            local_groups.append(packed)
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})
