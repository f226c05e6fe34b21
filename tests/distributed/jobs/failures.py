"""Jobs that fail on purpose: ``python failures.py SCENARIO`` on 2 or 3 ranks.

kill        rank 1 kills itself (SIGKILL) before the first all_reduce (on the first
            attempt only when ``EMBER_RESTART_COUNT`` is set: a restart then succeeds)
raise       rank 1 raises ValueError before the first all_reduce
exit_early  the last rank returns before the all_reduce the others wait in (timeout 3 s)
mismatch    rank 0 all_reduces shape (3,), the others shape (4,) (with the debug flag)
order       rank 0 calls broadcast then all_reduce, the others the reverse (debug flag)
no_init     rank 1 exits before init_process_group
"""
import datetime
import os
import signal
import sys

import ember
import ember.distributed as dist

scenario = sys.argv[1]
if scenario == "no_init" and os.environ.get("PMI_RANK") == "1":
    sys.exit(0)   # rank 1 never joins: the others must not wait in MPI forever
# NOTE: a generous timeout to start (a loaded CI machine starts ranks seconds apart),
# 3 s for the collectives of the scenarios (group g spans every rank)
dist.init_process_group("mpi", timeout=datetime.timedelta(
    seconds=3 if scenario == "no_init" else 60))   # INIT-LINE
g = dist.new_group(timeout=datetime.timedelta(seconds=3))
rank, n = dist.get_rank(), dist.get_world_size()
t = ember.ones(4)
dist.all_reduce(t, group=g)   # everyone is up
first_attempt = os.environ.get("EMBER_RESTART_COUNT", "0") == "0"
if scenario == "kill" and rank == 1 and first_attempt:
    os.kill(os.getpid(), signal.SIGKILL)
if scenario == "raise" and rank == 1:
    raise ValueError("rank 1 fails on purpose")
if scenario == "exit_early" and rank == n - 1:
    sys.exit(0)
if scenario == "mismatch":
    dist.all_reduce(ember.ones(3) if rank == 0 else ember.ones(4), group=g)   # MISMATCH-LINE
if scenario == "order":
    if rank == 0:
        dist.broadcast(t, src=0, group=g)   # ORDER-LINE-A
        dist.all_reduce(t, group=g)
    else:
        dist.all_reduce(t, group=g)   # ORDER-LINE-B
        dist.broadcast(t, src=0, group=g)
dist.all_reduce(t, group=g)   # WAIT-LINE
print(f"rank {rank} finished: {t.numpy().tolist()}", flush=True)
