"""nn.SyncBatchNorm in a real 2-rank job equals BatchNorm over the whole batch
(forward, input and weight gradients, running statistics; see jobs/sync_bn.py)."""
from mpi_helper import mpiexec


def test_sync_batchnorm_two_ranks_equals_full_batch():
    res = mpiexec(2, "sync_bn.py", timeout=120)
    assert res.rc == 0 and res.out.count("SYNC BN OK") == 2, str(res)
