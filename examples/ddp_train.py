"""Data-parallel training, written as a PyTorch DDP user writes it.

Every process trains a replica of the model on its own shard of each batch
(``DistributedSampler``); ``DistributedDataParallel`` averages the gradients during
``backward()``, so the replicas stay identical. Optionally ``--zero`` shards the Adam
state across the processes (``ZeroRedundancyOptimizer``, ZeRO stage 1). Rank 0 prints
and saves the checkpoint (one file, loadable on any number of processes).

Run:
    ember run --nproc 2 examples/ddp_train.py --epochs 3
    ember run --nproc 2 examples/ddp_train.py --epochs 3 --zero
    python examples/ddp_train.py --epochs 3          # one process works too
"""
from __future__ import annotations

import argparse
import os

import ember
import ember.distributed as dist
import ember.nn as nn
import ember.nn.functional as F
from ember.data import DataLoader, DistributedSampler, TensorDataset
from ember.datasets import make_spirals
from ember.distributed.optim import ZeroRedundancyOptimizer
from ember.nn.parallel import DistributedDataParallel as DDP


def build_model():
    return nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 3))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per process")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--zero", action="store_true", help="ZeRO-1: shard the optimizer state")
    p.add_argument("--checkpoint", default="checkpoints/ddp_train.safetensors")
    args = p.parse_args(argv)

    dist.init_process_group(backend="mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    ember.manual_seed(0)   # DDP broadcasts rank 0's weights anyway

    x, y = make_spirals(n_per_class=200, n_classes=3, noise=0.2, seed=0)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = DDP(build_model())
    if args.zero:
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=ember.optim.Adam,
                                      lr=args.lr)
    else:
        opt = ember.optim.Adam(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)          # a new shuffle each epoch, the same on all ranks
        total, n = ember.zeros(()), 0
        for xb, yb in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()               # gradients are averaged across ranks here
            opt.step()
            total, n = total + loss.detach(), n + 1
        mean = total / n
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)   # the loss over all ranks
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {mean.item():.4f} ({world} process(es))")

    if args.zero:
        opt.consolidate_state_dict(to=0)  # gather the optimizer shards on rank 0
    if rank == 0:
        os.makedirs(os.path.dirname(os.path.abspath(args.checkpoint)), exist_ok=True)
        ember.save({"model": model.module.state_dict(), "optimizer": opt.state_dict()},
                   args.checkpoint)
    with ember.no_grad():
        acc = (model.module(x).argmax(-1) == y).float().mean().item()
    if rank == 0:
        print(f"training accuracy {acc * 100:.1f}%; checkpoint: {args.checkpoint}")
    dist.destroy_process_group()
    return {"loss": mean.item(), "accuracy": acc, "world": world}


if __name__ == "__main__":
    main()
