"""``DistributedDataParallel``: one model replica per process, gradients averaged across them.

Like ``torch.nn.parallel.DistributedDataParallel`` on CPU: at construction the
parameters and buffers are broadcast from rank 0 so every replica starts equal; during
backward, gradients are averaged in buckets whose all-reduces are launched from
autograd hooks as soon as a bucket is full, overlapping communication with the rest of
the backward pass (see :mod:`ember.nn.parallel._buckets`); before each forward the
buffers (BatchNorm running statistics) are broadcast from rank 0. Each rank normalises
with its own batch's statistics (no SyncBatchNorm), as in PyTorch. Under
``ember.compile`` the collectives become graph nodes (see :mod:`._traced`): the compiled
step replays with MPI calls inside, each bucket's all-reduce a start node and a wait node
after the rest of backward (overlapped); ``find_unused_parameters`` graph-breaks (the
step runs eagerly).

Example (run under ``ember run --nproc 2 train.py``)::

    dist.init_process_group("mpi")
    model = DistributedDataParallel(Net())
    loss_fn(model(x), y).backward()   # .grad now holds the average over all ranks
    opt.step()
"""
from __future__ import annotations

import contextlib

from ..module import Module
from . import _traced
from ._buckets import FIRST_BUCKET_BYTES, Reducer, default_cap_bytes, graph_break

__all__ = ["DistributedDataParallel"]


def _dist():
    from ... import distributed as dist   # NOTE: late import: nn sits below distributed
    if not dist.is_initialized():
        raise RuntimeError("DistributedDataParallel: the default process group has not been "
                           "initialized; call ember.distributed.init_process_group() first")
    return dist


class DistributedDataParallel(Module):
    """Data parallelism across processes (``torch.nn.parallel.DistributedDataParallel``).

    Args:
        module: the model; wrapped as ``self.module`` (state_dict keys get ``module.``).
        device_ids, output_device, dim: accepted for PyTorch compatibility (CPU: unused).
        broadcast_buffers: broadcast buffers from rank 0 before each synced forward.
        process_group: the group to average over (default: the whole world).
        bucket_cap_mb: bucket size in MiB (every bucket's, as in PyTorch 2.13). Default
            (None): a 1 MiB first bucket, then PyTorch's 25 MiB but at most a quarter of
            the model's gradient bytes, so a model under ~100 MiB still gets several
            buckets to overlap with backward (``_buckets.default_cap_bytes``; PyTorch's
            default gives such a model 1 MiB + one bucket ready only at the end). After
            the first backward the buckets are rebuilt in the order gradients became
            ready (PyTorch's ``rebuild_buckets``; not with ``find_unused_parameters``).
        find_unused_parameters: allow parameters that get no gradient in some backward
            passes (they contribute zeros; unused on every rank, ``.grad`` is untouched).
        gradient_as_bucket_view, static_graph: accepted; gradients are copied back.

    Example:
        >>> ddp = DistributedDataParallel(model)
        >>> with ddp.no_sync():            # accumulate locally, no communication
        ...     loss_fn(ddp(x1), y1).backward()
        >>> loss_fn(ddp(x2), y2).backward()  # this backward averages the sum
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None,
                 bucket_cap_mb: float | None = None, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False,
                 static_graph: bool = False) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: module must be an ember.nn.Module, got "
                            f"{type(module).__name__}")
        dist = _dist()
        self.module = module
        self.dim, self.device_ids, self.output_device = dim, device_ids, output_device
        self.broadcast_buffers = bool(broadcast_buffers)
        self.process_group = process_group
        self.find_unused_parameters = bool(find_unused_parameters)
        self.gradient_as_bucket_view, self.static_graph = gradient_as_bucket_view, static_graph
        self.require_backward_grad_sync = True
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't "
                               "have any parameter that requires a gradient.")
        self.bucket_bytes_cap = (default_cap_bytes([p for _, p in named])
                                 if bucket_cap_mb is None else int(bucket_cap_mb * 2**20))
        self._sync_state(dist, [p for _, p in module.named_parameters()])
        self._sync_state(dist, [b for _, b in module.named_buffers()])
        first = FIRST_BUCKET_BYTES if bucket_cap_mb is None else self.bucket_bytes_cap
        self.reducer = Reducer([p for _, p in named], [n for n, _ in named], dist,
                               process_group, self.bucket_bytes_cap / 2**20,
                               self.find_unused_parameters, first_cap_bytes=first)

    def _sync_state(self, dist, tensors) -> None:
        """Broadcast ``tensors`` in place from rank 0 (parameters, then buffers)."""
        if dist.get_world_size() == 1:
            return
        tr = _traced.active_tracer()
        if tr is not None:   # under ember.compile: broadcast nodes, written back per run
            self._sync_traced(tr, dist, tensors)
            return
        graph_break("DistributedDataParallel's broadcast from rank 0")
        for t in tensors:
            dist.broadcast(t.detach(), 0, group=self.process_group)

    def _sync_traced(self, tr, dist, tensors) -> None:
        from ...autograd.grad_mode import no_grad
        after = None
        with no_grad():
            for t in tensors:
                after = _traced.broadcast_node(tr, t.detach(), after, dist,
                                               self.process_group)
                t.detach().copy_(after)
        self.reducer.last_traced = after   # NOTE: the all-reduces come after, in order

    def forward(self, *inputs, **kwargs):
        self.reducer.abandon()   # NOTE: a previous backward raised midway (no-op otherwise)
        if self.broadcast_buffers and self.require_backward_grad_sync:
            buffers = [b for _, b in self.module.named_buffers()]
            if buffers:
                self._sync_state(_dist(), buffers)
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Skip gradient averaging inside the block: gradients accumulate locally, and the
        first backward outside averages the accumulated sum.

        Example:
            >>> with ddp.no_sync():
            ...     ddp(x).sum().backward()
        """
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = self.reducer.enabled = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = self.reducer.enabled = old

    def extra_repr(self) -> str:
        return (f"bucket_cap_mb={self.bucket_bytes_cap / 2**20:g}, "
                f"buckets={len(self.reducer.buckets)}, "
                f"find_unused_parameters={self.find_unused_parameters}")
