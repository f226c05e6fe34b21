"""Data-parallel pieces of ``ember train --nproc N``: the process group, the sharded loader,
the DDP wrapper, and re-launching the same command under ``mpiexec``.

Every rank runs the same training loop on its own shard of each global batch
(``--batch-size`` is the global batch, split evenly, so a 2-process run takes the same
steps with the same learning-rate schedule as a 1-process run). Ranks seed their RNGs
identically and make the same draws, so rank 0's checkpoint (model without the DDP
wrapper, optimizer, scheduler, RNG, loader position) describes every rank and loads on
any world size; only rank 0 prints, evaluates and writes checkpoints.
"""
from __future__ import annotations

import os

from ember.data import DataLoader, DistributedSampler

from .errors import UsageError

def init(nproc: int) -> tuple[int, int]:
    """(rank, world size): joins the MPI process group when this is a launched rank."""
    if nproc < 1:
        raise UsageError(f"--nproc must be a positive integer, got {nproc}")
    if nproc == 1:
        return 0, 1
    import ember.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group(backend="mpi")
    world = dist.get_world_size()
    if world != nproc:
        raise RuntimeError(f"ember train --nproc {nproc}: the job has {world} processes; "
                           f"start it with 'ember train --nproc {nproc} ...' (or mpiexec -n "
                           f"{nproc})")
    return dist.get_rank(), world


def make_loader(train_ds, batch_size: int, seed: int, gen, rank: int, world: int):
    """The training DataLoader: shuffled batches, or this rank's shard of each batch."""
    if world == 1:
        return DataLoader(train_ds, batch_size=batch_size, shuffle=True, drop_last=True,
                          generator=gen)
    if batch_size % world:
        raise UsageError(f"ember train: --batch-size {batch_size} (the global batch) must be "
                         f"divisible by --nproc {world}")
    sampler = DistributedSampler(train_ds, num_replicas=world, rank=rank, shuffle=True,
                                 seed=seed, drop_last=True)
    return DataLoader(train_ds, batch_size=batch_size // world, sampler=sampler,
                      drop_last=True, generator=gen)


def wrap(model, world: int):
    """The model ranks train: ``DistributedDataParallel(model)`` when world > 1."""
    if world == 1:
        return model
    from ember.nn.parallel import DistributedDataParallel
    return DistributedDataParallel(model)


def set_epoch(loader, epoch: int) -> None:
    """Reshuffle a DistributedSampler for ``epoch`` (a no-op otherwise)."""
    if isinstance(loader.sampler, DistributedSampler):
        loader.sampler.set_epoch(epoch)


def barrier(world: int) -> None:
    if world > 1:
        import ember.distributed as dist
        dist.barrier()


def restarted() -> bool:
    """Whether ``ember run --max-restarts`` started this job again after a failure."""
    return int(os.environ.get("EMBER_RESTART_COUNT", "0") or 0) > 0


def in_job() -> bool:
    """Whether this process is a rank of an MPI job (``ember run``, ``mpiexec``)."""
    return any(k in os.environ for k in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"))


def launch(argv: list, nproc: int, max_restarts: int) -> int:
    """Run ``ember <argv>`` on ``nproc`` ranks (``ember run``); returns the exit status."""
    from ember.distributed.run import launch as run
    return run(nproc, ["-m", "ember"] + list(argv), max_restarts=max_restarts)
