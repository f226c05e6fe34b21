"""Distributed training: process groups and collectives (``torch.distributed``'s API).

Start a job with ``ember run --nproc N script.py`` (or ``mpiexec -n N python
script.py``); each process calls ``init_process_group`` and then the collectives, which
work on Ember CPU tensors *in place*. The backend is MPI through ``mpi4py``
(``pip install 'ember[distributed]'``); ``backend="nccl"`` runs CUDA tensors' collectives
on NCCL through CuPy (``nccl.py``), MPI still starting the job. Importing this package
does not start MPI.

Interface (PyTorch's names, defaults and semantics; ``src``/``dst`` are global ranks)::

    import ember.distributed as dist
    dist.init_process_group(backend="mpi", init_method=None | "env://",
                            timeout=datetime.timedelta(minutes=30))
    dist.is_available(); dist.is_initialized(); dist.get_backend(group=None)
    dist.get_rank(group=None); dist.get_world_size(group=None)     # -1 outside group
    dist.new_group(ranks=None, timeout=None); dist.destroy_process_group(group=None)
    dist.group.WORLD; dist.get_process_group_ranks(g); dist.get_global_rank(g, r)
    dist.barrier(group=None, async_op=False)
    dist.ReduceOp.{SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR}
    dist.all_reduce(t, op=ReduceOp.SUM, group=None, async_op=False)
    dist.broadcast(t, src, group=None, async_op=False)
    dist.reduce(t, dst, op=ReduceOp.SUM, group=None, async_op=False)
    dist.all_gather(tensor_list, t, group=None, async_op=False)
    dist.all_gather_into_tensor(out, inp, group=None, async_op=False)
    dist.reduce_scatter_tensor(out, inp, op=ReduceOp.SUM, group=None, async_op=False)
    dist.reduce_scatter(out, input_list, op=ReduceOp.SUM, group=None, async_op=False)
    dist.gather(t, gather_list=None, dst=0, ...); dist.scatter(t, scatter_list=None, src=0, ...)
    dist.all_to_all(out_list, in_list, ...)
    dist.all_to_all_single(out, inp, output_split_sizes=None, input_split_sizes=None, ...)
    dist.send(t, dst, group=None, tag=0); dist.recv(t, src=None, group=None, tag=0) -> sender
    dist.isend(...) / dist.irecv(...) -> Work
    dist.broadcast_object_list(objs, src=0); dist.all_gather_object(out, obj)
    dist.gather_object(obj, out=None, dst=0)     # JSON for plain data, else pickle
    work = dist.all_reduce(t, async_op=True); work.wait(timeout=None); work.is_completed()

float16 and bfloat16 are reduced in float32 (MPI has no such types) and rounded once.
A collective that waits longer than the group's timeout raises ``DistributedError``
(a ``RuntimeError``) naming the rank, the op and the call site; an uncaught exception
on any rank prints ``[rank N] Traceback ...`` and aborts the whole job.
``EMBER_DISTRIBUTED_DEBUG=1`` checks before every collective that all ranks call the
same one with the same shapes, and reports each rank's op, shapes and ``file:line``
(one small message per peer per collective). Without it, MPI does not notice ranks
that pass different shapes to the same collective: the results are then wrong.
Launched by ``ember run``, each rank reports to the launcher, which names a rank that
was killed or failed, and restarts the job with ``--max-restarts``.

Example:
    >>> import ember, ember.distributed as dist
    >>> dist.init_process_group("mpi")
    >>> t = ember.ones(3) * dist.get_rank()
    >>> dist.all_reduce(t, op=dist.ReduceOp.SUM)
"""
from .backend import (Backend, CompletedWork, Communicator, DistributedError,
                      DistributedUnavailable, ReduceOp, Request, Work)
from .collectives import (all_gather, all_gather_into_tensor, all_reduce, barrier, broadcast,
                          gather, reduce, reduce_scatter, reduce_scatter_tensor, scatter)
from .groups import (ProcessGroup, default_pg_timeout, destroy_process_group, get_backend,
                     get_global_rank, get_process_group_ranks, get_rank, get_world_size, group,
                     init_process_group, is_available, is_initialized, is_mpi_available,
                     is_nccl_available, new_group)
from .objects import all_gather_object, broadcast_object_list, gather_object
from .p2p import all_to_all, all_to_all_single, irecv, isend, recv, send

__all__ = [
    "Backend", "CompletedWork", "Communicator", "DistributedError", "DistributedUnavailable", "ProcessGroup",
    "ReduceOp", "Request", "Work", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_reduce", "all_to_all", "all_to_all_single", "barrier", "broadcast",
    "broadcast_object_list", "default_pg_timeout", "destroy_process_group", "gather",
    "gather_object", "get_backend", "get_global_rank", "get_process_group_ranks", "get_rank",
    "get_world_size", "group", "init_process_group", "irecv", "is_available",
    "is_initialized", "is_mpi_available", "is_nccl_available", "isend", "new_group", "recv", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "scatter", "send",
]
