"""One multi-process job: ``init_process_group("nccl")`` on the fake CUDA device.

Each rank uses the ``EMBER_FAKE_CUDA`` stand-in and the fake NCCL module
(``tests/distributed/_fake_nccl.py``, emulating NCCL over MPI), runs every collective on
``cuda`` tensors and checks the results against NumPy (every rank can compute the
others' inputs) and that the work went through NCCL calls, not MPI. Rank 0 prints
``ALL CHECKS PASSED: <n> checks`` or the failures (exit status 1).
"""
import datetime
import os
import pathlib
import sys
import traceback

os.environ["EMBER_FAKE_CUDA"] = "1"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import _fake_nccl  # noqa: E402
import ember  # noqa: E402
import ember.distributed as dist  # noqa: E402
from ember.distributed import nccl  # noqa: E402

FAILS, COUNT = [], [0]


def check(what, got, want):
    COUNT[0] += 1
    got = np.asarray(got.cpu().float().numpy() if hasattr(got, "cpu") else got, np.float64)
    if got.shape != want.shape or not np.array_equal(got, np.asarray(want, np.float64)):
        FAILS.append(f"{what}: got {got.tolist()} want {np.asarray(want).tolist()}")


def data(rank, shape):
    return np.random.default_rng(rank).integers(-8, 9, shape) / 4


def cuda(arr, dtype=ember.float32):
    return ember.tensor(arr, dtype=dtype, device="cuda")


def run(rank, n):
    every = [data(r, (3, 4)) for r in range(n)]
    for dt in (ember.float32, ember.float64, ember.bfloat16, ember.float16, ember.int64):
        for op, ref in (("SUM", np.sum), ("MAX", np.max), ("MIN", np.min)):
            t = cuda(every[rank] * (4 if dt is ember.int64 else 1), dt)
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            want = ref(np.stack(every) * (4 if dt is ember.int64 else 1), axis=0)
            check(f"all_reduce {op} {dt.name}", t, want)
    base = cuda(every[rank])                     # AVG, on a non-contiguous view
    dist.all_reduce(base[:, ::2], op=dist.ReduceOp.AVG)
    check("all_reduce AVG strided", base[:, ::2], np.mean(np.stack(every), 0)[:, ::2])
    check("strided untouched", base[:, 1::2], every[rank][:, 1::2])
    t = cuda(every[rank])
    dist.broadcast(t, src=n - 1)
    check("broadcast", t, every[n - 1])
    out = [cuda(np.zeros((3, 4))) for _ in range(n)]
    dist.all_gather(out, cuda(every[rank]))
    for r in range(n):
        check(f"all_gather[{r}]", out[r], every[r])
    big = cuda(np.zeros((3 * n, 4)))
    dist.all_gather_into_tensor(big, cuda(every[rank]))
    check("all_gather_into_tensor", big, np.concatenate(every))
    rs = cuda(np.zeros((1, 4)))
    dist.reduce_scatter_tensor(rs, cuda(every[rank][:n]))      # n <= 3 rows
    check("reduce_scatter_tensor", rs, np.sum([e[:n] for e in every], 0)[rank:rank + 1])
    t = cuda(every[rank])
    dist.reduce(t, dst=0)
    check("reduce", t, np.sum(every, 0) if rank == 0 else every[rank])
    g = [cuda(np.zeros((3, 4))) for _ in range(n)] if rank == 0 else None
    dist.gather(cuda(every[rank]), g, dst=0)
    if rank == 0:
        for r in range(n):
            check(f"gather[{r}]", g[r], every[r])
    s = cuda(np.zeros((3, 4)))
    dist.scatter(s, [cuda(every[r]) for r in range(n)] if rank == 1 else None, src=1)
    check("scatter", s, every[rank])
    o = cuda(np.zeros((2 * n, 4)))
    dist.all_to_all_single(o, cuda(np.repeat(np.arange(n)[:, None] + 10 * rank, 2, 0)
                                    .repeat(4, 1)))
    want = np.concatenate([np.full((2, 4), rank + 10 * r) for r in range(n)])
    check("all_to_all_single", o, want)
    if rank < 2:
        t = cuda(every[rank])
        if rank == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
        check("send/recv", t, every[0])
    objs = [{"rank": rank}] if rank == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    check("broadcast_object_list", np.array([objs[0]["rank"]]), np.array([0]))
    gathered = [None] * n
    dist.all_gather_object(gathered, ("r", rank))
    check("all_gather_object", np.array([x[1] for x in gathered]), np.arange(n))
    dist.barrier()
    names = {c[0] for c in _fake_nccl.calls}
    for need in ("allReduce", "broadcast", "allGather", "reduceScatter", "reduce", "send",
                 "recv", "groupStart", "groupEnd"):
        check(f"NCCL call {need} made", np.array([need in names]), np.array([True]))
    try:
        dist.all_reduce(cuda(np.ones(2), ember.int32), op=dist.ReduceOp.BXOR)
        FAILS.append("BXOR was not refused")
    except ValueError as e:
        check("BXOR refused", np.array(["NCCL" in str(e)]), np.array([True]))


def main():
    nccl.set_nccl_module(_fake_nccl)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "nccl"
    try:
        run(rank, n)
    except Exception:   # noqa: BLE001 - report, then fail the job
        FAILS.append(f"[rank {rank}] " + traceback.format_exc())
    fails = [None] * n
    dist.all_gather_object(fails, FAILS)
    dist.destroy_process_group()
    if rank == 0:
        bad = [f"[rank {r}] {f}" for r, fs in enumerate(fails) for f in fs]
        if bad:
            print("FAILURES:\n" + "\n".join(bad))
            sys.exit(1)
        from ember.device.base import cuda_backend
        print(f"ALL CHECKS PASSED: {COUNT[0]} checks on {n} ranks "
              f"({cuda_backend()[0].runtime.name})")


if __name__ == "__main__":
    main()
