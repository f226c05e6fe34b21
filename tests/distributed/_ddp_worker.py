"""One 2-process job checking DDP, no_sync and ZeRO-1 against single-process references.

Run as ``mpiexec -n 2 python tests/distributed/_ddp_worker.py OUT.json``; rank 0 writes
``{check: value}`` (differences and flags) that ``test_ddp.py`` asserts on. Every rank
trains its own shard; rank 0 additionally trains the single-process references.
"""
from __future__ import annotations

import json
import sys

import numpy as np

import ember
import ember.distributed as dist
from ember import nn
from ember.distributed.optim import ZeroRedundancyOptimizer
from ember.nn.parallel import DistributedDataParallel as DDP

F = nn.functional
STEPS = 20


def mlp(dtype):
    """W1 of bench/train.py: 784-512-512-10 with ReLU (5 classes used by the data)."""
    ember.manual_seed(1)
    m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 10))
    return m.to(dtype)


def cnn(dtype):
    ember.manual_seed(2)
    m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 5))
    return m.to(dtype)


def data(kind, step, dtype, batch=8):
    """The global batch of ``step`` (the same on every rank); shards are halves of it."""
    rng = np.random.default_rng(100 + step)
    shape = (batch, 784) if kind == "mlp" else (batch, 1, 8, 8)
    x = ember.tensor(rng.standard_normal(shape)).to(dtype)
    return x, ember.tensor(rng.integers(0, 5, batch))


def shard(t, r, world):
    n = t.shape[0] // world
    return t[r * n:(r + 1) * n]


def params(m):
    return [p.detach().numpy().copy() for p in m.parameters()] + \
        [b.detach().numpy().copy() for b in m.buffers()]


def rel(a, b):
    return max(float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-30))
               for x, y in zip(a, b))


def exact(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def sgd(m):
    return ember.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)


def train_ddp(make, kind, dtype, rank, world, opt_fn=sgd, zero=False):
    model = DDP(make(dtype))
    if zero:
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=ember.optim.AdamW,
                                      lr=1e-2, weight_decay=0.01)
    else:
        opt = opt_fn(model)
    for s in range(STEPS):
        x, y = data(kind, s, dtype)
        opt.zero_grad()
        F.cross_entropy(model(shard(x, rank, world)), shard(y, rank, world)).backward()
        opt.step()
    return model, opt


def train_concat(make, kind, dtype, opt_fn=sgd):
    model = make(dtype)
    opt = opt_fn(model)
    for s in range(STEPS):
        x, y = data(kind, s, dtype)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model


def train_per_shard(make, kind, dtype, world):
    """One process, the loss averaged over per-shard forwards (BatchNorm normalises each
    shard with its own statistics, as each DDP rank does; rank 0's running stats win)."""
    model = make(dtype)
    opt = sgd(model)
    bufs = list(model.buffers())
    for s in range(STEPS):
        x, y = data(kind, s, dtype)
        opt.zero_grad()
        before = [b.clone() for b in bufs]
        losses, rank0 = [], None
        for r in range(world):
            with ember.no_grad():
                for b, v in zip(bufs, before):
                    b.copy_(v)
            losses.append(F.cross_entropy(model(shard(x, r, world)), shard(y, r, world)))
            if r == 0:
                rank0 = [b.clone() for b in bufs]
        with ember.no_grad():
            for b, v in zip(bufs, rank0):
                b.copy_(v)
        (sum(losses[1:], losses[0]) / world).backward()
        opt.step()
    return model


def check_equivalence(out, rank, world):
    for kind, make in (("mlp", mlp), ("cnn", cnn)):
        for dtype in (ember.float32, ember.float64):
            name = f"{kind}_{dtype.name}"
            m, _ = train_ddp(make, kind, dtype, rank, world)
            got = params(m.module)
            if rank == 0:
                out[f"{name}_vs_per_shard_exact"] = exact(got, params(train_per_shard(
                    make, kind, dtype, world)))
                if kind == "mlp":
                    out[f"{name}_vs_concat_rel"] = rel(got, params(train_concat(make, kind,
                                                                              dtype)))


def check_replicas_agree(out, rank, world):
    m, _ = train_ddp(cnn, "cnn", ember.float32, rank, world)
    gathered = [None] * world
    weights = [p.detach().numpy().copy() for p in m.module.parameters()]
    dist.all_gather_object(gathered, weights)   # buffers differ: each rank's own BN stats
    out["replicas_agree"] = all(exact(g, gathered[0]) for g in gathered)
    out["state_dict_keys"] = sorted(m.state_dict())[:2]


def check_no_sync(out, rank, world):
    """Two micro-batches per rank (one under no_sync) == one step on the whole batch."""
    dtype = ember.float64
    model = DDP(mlp(dtype))
    opt = sgd(model)
    ref = mlp(dtype)
    ref_opt = sgd(ref)
    for s in range(5):
        x, y = data("mlp", s, dtype, batch=16)
        xs, ys = shard(x, rank, world), shard(y, rank, world)
        opt.zero_grad()
        with model.no_sync():
            (F.cross_entropy(model(xs[:4]), ys[:4]) / 2).backward()
        (F.cross_entropy(model(xs[4:]), ys[4:]) / 2).backward()
        opt.step()
        ref_opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        ref_opt.step()
    out["no_sync_rel"] = rel(params(model.module), params(ref))


def check_zero(out, rank, world):
    """ZeRO-1 (AdamW sharded) == plain DDP with AdamW, bit for bit; state ~ 1/N per rank."""
    adamw = lambda m: ember.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)  # noqa
    plain, popt = train_ddp(mlp, "mlp", ember.float32, rank, world, opt_fn=adamw)
    zmodel, zopt = train_ddp(mlp, "mlp", ember.float32, rank, world, zero=True)
    out[f"zero_equals_ddp_rank{rank}"] = exact(params(zmodel.module), params(plain.module))
    full = sum(v.numel() * v.element_size() for st in popt.state.values()
               for v in st.values() if isinstance(v, ember.Tensor))
    shares = [None] * world
    dist.all_gather_object(shares, zopt.local_state_bytes())
    # NOTE: whole tensors are sharded (greedy by size, as PyTorch): W1's 784x512 weight
    # alone is 60% of its state, so the max share is 0.60 here (0.50 on W3, see bench)
    out["zero_state_shares"] = [s / full for s in shares]
    zopt.consolidate_state_dict(to=0)
    sd = zopt.state_dict() if rank == 0 else None
    [sd] = _bcast_state(sd)
    reloaded = ember.optim.AdamW(plain.module.parameters(), lr=1e-2, weight_decay=0.01)
    reloaded.load_state_dict(sd)   # the consolidated state loads into a plain optimizer...
    out["zero_consolidated_matches_plain"] = all(
        all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)
        for a, b in zip((reloaded.state[p] for p in plain.module.parameters()),
                        (popt.state[p] for p in plain.module.parameters())))
    z2 = ZeroRedundancyOptimizer(zmodel.parameters(), optimizer_class=ember.optim.AdamW,
                                 lr=1e-2, weight_decay=0.01)
    z2.load_state_dict(sd)         # ...and back into a fresh ZeRO
    out[f"zero_reload_bytes_rank{rank}"] = z2.local_state_bytes() == zopt.local_state_bytes()


def _bcast_state(sd):
    """Send a state dict with Ember tensors from rank 0 (tensors travel as NumPy)."""
    from ember.distributed.optim.zero_redundancy_optimizer import _from_host, _to_host
    box = [_to_host(sd)]
    dist.broadcast_object_list(box, src=0)
    return [_from_host(box[0])]


def check_unused(out, rank, world):
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

        def forward(self, x, use_b):
            return self.a(x) + (self.b(x) if use_b else 0)

    ember.manual_seed(0)
    m = DDP(Two(), find_unused_parameters=True)
    x = ember.ones(2, 3)
    m(x, use_b=(rank == 0)).sum().backward()   # b is used on rank 0 only
    gathered = [None] * world
    dist.all_gather_object(gathered, m.module.b.weight.grad.numpy().tolist())
    out["unused_b_grad_averaged"] = bool(np.allclose(gathered[rank], np.full((2, 3), 2.0 / world)))
    m.module.zero_grad()
    m(x, use_b=False).sum().backward()          # unused everywhere: .grad stays None
    out["unused_everywhere_grad_none"] = m.module.b.weight.grad is None
    strict = DDP(Two())
    try:
        strict(x, use_b=False).sum().backward()
        out["strict_unused_raises"] = False
    except RuntimeError as e:
        out["strict_unused_raises"] = "find_unused_parameters=True" in str(e)


def _compiled_run(make, kind, compiled, rank, world, steps=5, zero=False):
    import warnings
    model = DDP(make(ember.float32))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=ember.optim.SGD,
                                  lr=0.05, momentum=0.9) if zero else sgd(model)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    fn = ember.compile(step) if compiled else step
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for s in range(steps):
            x, y = data(kind, s, ember.float32)
            fn(shard(x, rank, world).clone(), shard(y, rank, world).clone())
    return model, fn, any("graph break" in str(w.message) for w in caught)


def check_compiled(out, rank, world):
    """ember.compile of a DDP step: bucket all-reduces and the BatchNorm buffer broadcasts
    are graph nodes; find_unused_parameters still graph-breaks (runs eagerly)."""
    for kind, make, zero in (("mlp", mlp, False), ("cnn", cnn, False), ("zero", mlp, True)):
        data_kind = "cnn" if kind == "cnn" else "mlp"
        eager, _, _ = _compiled_run(make, data_kind, False, rank, world, zero=zero)
        comp, fn, broke = _compiled_run(make, data_kind, True, rank, world, zero=zero)
        caps = fn.explain().captures
        names = [n.op.name for n in caps[-1].graph.nodes]
        out[f"compiled_{kind}_graph_break"] = broke
        out[f"compiled_{kind}_captures"] = len(caps)   # 5 calls: the rest replayed
        out[f"compiled_{kind}_collective_nodes"] = [names.count("all_reduce_start"),
                                                    names.count("broadcast")]
        out[f"compiled_{kind}_waits"] = names.count("all_reduce_wait")
        if kind == "mlp":   # 2 buckets: [fc3, fc2], [fc1]
            first, wait = names.index("all_reduce_start"), names.index("all_reduce_wait")
            out["compiled_between_first_start_and_wait"] = names[first + 1:wait]
        out[f"compiled_{kind}_vs_eager_rel_rank{rank}"] = rel(params(comp.module),
                                                              params(eager.module))
        gathered = [None] * world
        weights = [p.detach().numpy().copy() for p in comp.module.parameters()]
        dist.all_gather_object(gathered, weights)
        out[f"compiled_{kind}_replicas_agree"] = all(exact(g, gathered[0]) for g in gathered)
    try:
        model = DDP(mlp(ember.float32), find_unused_parameters=True)
        ember.compile(lambda x: model(x).sum().backward(), fullgraph=True)(ember.ones(2, 784))
        out["fullgraph_raises"] = False
    except RuntimeError as e:
        out["fullgraph_raises"] = "DistributedDataParallel" in str(e)


class LateFirst(nn.Module):
    """Registers ``late`` first, but backward makes its gradients first: reverse
    registration order puts ``early`` (ready last) in the first bucket."""

    def __init__(self):
        super().__init__()
        ember.manual_seed(3)
        self.late = nn.Linear(512, 512)      # 1 MiB + 2 KiB: a first bucket of its own
        self.early = nn.Linear(784, 512)

    def forward(self, x):
        return self.late(F.relu(self.early(x)))


def check_overlap_structure(out, rank, world):
    """A bucket's all-reduce starts before backward ends (launch vs gradient-ready order);
    the first backward rebuilds the buckets in ready order (PyTorch's rebuild_buckets)."""
    model = DDP(LateFirst())
    red = model.reducer
    x, y = data("mlp", 0, ember.float32)
    xs, ys = shard(x, rank, world), shard(y, rank, world)
    launches = []
    for _ in range(2):
        model.module.zero_grad()
        F.cross_entropy(model(xs), ys).backward()
        ev = red.stats["events"]
        first_launch = ev.index(("launch", 0))
        last_ready = max(i for i, e in enumerate(ev) if e[0] == "ready")
        launches.append(first_launch < last_ready)
    out["ddp_first_launch_before_backward_end"] = launches   # before / after the rebuild
    out["ddp_rebuilt_buckets"] = [[red.names[i] for i in b.indices] for b in red.buckets]
    local = LateFirst()   # the same weights, no DDP: this rank's own gradients
    F.cross_entropy(local(xs), ys).backward()
    every = [None] * world
    dist.all_gather_object(every, [p.grad.numpy().copy() for p in local.parameters()])
    mean = [sum(g[k] for g in every) / world for k in range(len(every[0]))]
    out[f"ddp_rebuilt_grads_vs_mean_rel_rank{rank}"] = rel(
        [p.grad.numpy() for p in model.module.parameters()], mean)


def check_failed_backward(out, rank, world):
    """A backward that raised midway (after some buckets launched) must not leave the next
    one unaveraged: the replicas still agree after another step."""
    model = DDP(mlp(ember.float32), bucket_cap_mb=0.001)   # several buckets
    x, y = data("mlp", 0, ember.float32)
    xs, ys = shard(x, rank, world), shard(y, rank, world)

    def boom(g):
        raise ValueError("boom")

    h = model.module[0].weight.register_hook(boom)   # the last gradient backward makes
    try:
        F.cross_entropy(model(xs), ys).backward()
        out["failed_backward_raised"] = False
    except ValueError:
        out["failed_backward_raised"] = True
    h.remove()
    model.module.zero_grad()
    F.cross_entropy(model(xs), ys).backward()
    grads = [None] * world
    dist.all_gather_object(grads, [p.grad.numpy().copy() for p in model.module.parameters()])
    out["after_failed_backward_grads_agree"] = all(exact(g, grads[0]) for g in grads)


def main(path):
    dist.init_process_group(backend="mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"world": world}
    check_equivalence(out, rank, world)
    check_replicas_agree(out, rank, world)
    check_no_sync(out, rank, world)
    check_zero(out, rank, world)
    check_unused(out, rank, world)
    check_compiled(out, rank, world)
    check_overlap_structure(out, rank, world)
    check_failed_backward(out, rank, world)
    results = [None] * world
    dist.all_gather_object(results, out)
    if rank == 0:
        merged = {}
        for r in results:
            merged.update(r)
        with open(path, "w") as f:
            json.dump(merged, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
