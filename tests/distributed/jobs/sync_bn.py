"""SyncBatchNorm across ranks equals BatchNorm on the whole batch (run by
tests/distributed/test_sync_batchnorm.py under mpiexec): each rank holds an unequal slice
of one batch; outputs, input gradients, summed weight gradients and running statistics
must equal a single-process BatchNorm over the concatenated batch."""
import datetime
import sys

import numpy as np

import ember
import ember.distributed as dist
import ember.nn as nn


def main():
    dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(7)
    sizes = [3 + r for r in range(n)]                 # unequal local batches
    full_x = rng.standard_normal((sum(sizes), 3, 5))
    full_g = rng.standard_normal(full_x.shape)
    lo = sum(sizes[:rank])
    sl = slice(lo, lo + sizes[rank])
    weight = ember.tensor([1.5, -0.5, 2.0], dtype=ember.float64)

    sync = nn.SyncBatchNorm(3).double()
    ref = nn.BatchNorm1d(3).double()
    with ember.no_grad():
        sync.weight.copy_(weight)
        ref.weight.copy_(weight)
    for _ in range(2):                                 # two steps: running stats compound
        x = ember.tensor(full_x[sl], requires_grad=True)
        xr = ember.tensor(full_x, requires_grad=True)
        out, want = sync(x), ref(xr)
        (out * ember.tensor(full_g[sl])).sum().backward()
        (want * ember.tensor(full_g)).sum().backward()
        np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy()[sl], rtol=1e-10)
        np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy()[sl], rtol=1e-9,
                                   atol=1e-12)
    for p in (sync.weight, sync.bias):
        dist.all_reduce(p.grad)
    np.testing.assert_allclose(sync.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(sync.bias.grad.numpy(), ref.bias.grad.numpy(), rtol=1e-10)
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(sync, name).numpy(), getattr(ref, name).numpy(),
                                   rtol=1e-10)
    sync.eval()                                        # eval: running stats, no collectives
    x = ember.tensor(full_x[sl])
    got, want = sync(x).detach().numpy(), ref.eval()(ember.tensor(full_x)).detach().numpy()
    np.testing.assert_allclose(got, want[sl], rtol=1e-10)
    print(f"SYNC BN OK rank {rank} of {n}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
