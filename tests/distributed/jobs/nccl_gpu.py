"""One GPU job (``mpiexec -n 1``): ``init_process_group("nccl")`` with CuPy's real NCCL.

Checks the collectives end to end, then a send that no one receives: it must time out,
abort the NCCL communicator and raise naming rank and op, well within the job's limit.
Prints ``ALL CHECKS PASSED`` (exit 0) or the failures (exit 1).
"""
import datetime
import os
import sys
import time

import ember
import ember.distributed as dist
from ember.distributed import DistributedError, groups


def main():
    fails = []
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=60), device_id=0)
    assert dist.get_backend() == "nccl" and dist.get_world_size() == 1
    t = ember.arange(6.0, device="cuda")
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    out = ember.zeros(6, device="cuda")
    dist.all_gather_into_tensor(out, t)
    if out.cpu().tolist() != [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]:
        fails.append(f"all_gather_into_tensor: {out.cpu().tolist()}")
    objs = [{"a": 1}]
    dist.broadcast_object_list(objs, src=0)
    if objs != [{"a": 1}]:
        fails.append(f"broadcast_object_list: {objs}")
    world = dist.group.WORLD
    call = {"op": "send", "seq": 0, "shape": [1 << 20], "dtype": "float32",
            "where": "nccl_gpu.py"}
    start = time.monotonic()
    buf = ember.ones(1 << 20, device="cuda")
    try:
        with ember.cuda.stream(ember.cuda.Stream()):   # NOTE: keep the default stream free
            req = world.comm.send(buf._data, 0, 0)     # no receiver: never completes
        dist.Work([req], timeout=3.0,
                  on_timeout=lambda e: groups.timeout_error(world, call, e)).wait()
        fails.append("an unmatched NCCL send completed")
    except DistributedError as e:
        # NOTE: a timeout (ncclCommAbort) or NCCL refusing the call at once; both abort
        msg = str(e)
        if "[rank 0] send" not in msg or "abort" not in msg.lower():
            fails.append(f"the error lacks rank/op/abort: {msg}")
    if time.monotonic() - start > 30:
        fails.append(f"the timeout took {time.monotonic() - start:.0f} s")
    print("FAILURES:\n" + "\n".join(fails) if fails else "ALL CHECKS PASSED")
    sys.stdout.flush()
    from mpi4py import MPI
    MPI.Finalize()        # NOTE: Open MPI's mpiexec fails a rank that exits without it
    os._exit(1 if fails else 0)   # NOTE: no teardown that could wait on the aborted send


if __name__ == "__main__":
    main()
