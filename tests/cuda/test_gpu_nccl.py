"""The NCCL backend on a real GPU with one rank (CuPy's ``cupy.cuda.nccl``); skips with
"no CUDA GPU/CuPy" elsewhere. On a GPU machine:
``python -m pytest -q tests/cuda/test_gpu_nccl.py``.

In process: every collective through a one-rank ``NCCLCommunicator`` (host communicator
local, no MPI). Through ``mpiexec -n 1`` (``tests/distributed/jobs/nccl_gpu.py``):
``init_process_group("nccl")`` end to end, and a send nobody receives, which must time
out, abort the communicator and name rank and collective instead of hanging.
"""
import pathlib
import sys

import numpy as np
import pytest

import ember as em
import ember.distributed as dist
from ember.distributed import groups, nccl as ember_nccl
from test_gpu_pinned import gpu  # noqa: F401 - the module-scoped real-GPU fixture
from test_nccl_units import _LocalHost

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "distributed"))


@pytest.fixture
def world(gpu, monkeypatch):  # noqa: F811
    ember_nccl.set_nccl_module(None)
    try:
        mod = ember_nccl.load_nccl()
    except ImportError as e:
        pytest.skip(f"no CUDA GPU/CuPy with NCCL ({e})")
    comm = ember_nccl.NCCLCommunicator(_LocalHost(), mod, gpu)
    pg = groups.ProcessGroup(comm, [0], 30.0, False)
    monkeypatch.setattr(groups.group, "WORLD", pg)
    monkeypatch.setattr(groups._State, "groups", [pg])
    yield pg
    comm.free()


@pytest.mark.parametrize("dtype", [em.float32, em.float16, em.float64, em.int64, em.uint8])
def test_all_reduce_each_op(world, dtype):
    import cupy
    x = em.arange(12, device="cuda").reshape(3, 4).to(dtype)
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT):
        t = x.clone()
        dist.all_reduce(t, op=op)
        assert isinstance(t._data, cupy.ndarray)
        np.testing.assert_array_equal(t.cpu().numpy(), x.cpu().numpy())
    if dtype.is_floating_point:
        t = x.clone()
        dist.all_reduce(t[:, ::2], op=dist.ReduceOp.AVG)        # a strided view
        np.testing.assert_array_equal(t.cpu().numpy(), x.cpu().numpy())


def test_moves_gathers_and_async_work(world):
    x = em.arange(8.0, device="cuda")
    dist.broadcast(x, src=0)
    out = [em.zeros(8, device="cuda")]
    dist.all_gather(out, x)
    big = em.zeros(8, device="cuda")
    dist.all_gather_into_tensor(big, x)
    rs = em.zeros(8, device="cuda")
    dist.reduce_scatter_tensor(rs, x)
    g = [em.zeros(8, device="cuda")]
    dist.gather(x, g, dst=0)
    s = em.zeros(8, device="cuda")
    dist.scatter(s, [x], src=0)
    a2a = em.zeros(8, device="cuda")
    dist.all_to_all_single(a2a, x)
    for t in (out[0], big, rs, g[0], s, a2a):
        assert t.cpu().tolist() == list(map(float, range(8)))
    side = em.cuda.Stream()
    with em.cuda.stream(side):
        work = dist.all_reduce(x, async_op=True)
    assert work.wait() and work.is_completed()
    dist.barrier()


def test_nccl_job_through_mpiexec(gpu):  # noqa: F811
    from mpi_helper import mpiexec
    res = mpiexec(1, "nccl_gpu.py", timeout=180)
    assert res.rc == 0 and "ALL CHECKS PASSED" in res.out, str(res)
