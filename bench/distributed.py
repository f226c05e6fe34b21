"""Data-parallel benchmark: 1 process x 2 threads vs 2 processes x 1 thread, Ember and PyTorch.

For W1 (MLP, SGD) and W3 (GPT, AdamW) of ``bench/train.py`` — same models, the same
global batch (each of 2 ranks takes half) — it prints, side by side in one run:

* steps/s of one process with 2 threads (plain step) and of 2 processes with 1 thread
  each (DistributedDataParallel; PyTorch: DDP on gloo), and the ratio 2-proc / 1-proc;
* overlap: the fraction of all-reduce time hidden behind backward,
  ``1 - exposed / standalone``, where *standalone* is the time to all-reduce the same
  buckets alone, back to back (ranks started together by a barrier), and *exposed* is
  measured two ways (medians over 10 backward passes):

  - ``overlap`` (Ember only): exposed = time from the end of the LAST rank's backward
    computation (the reducer's end-of-backward callback; one machine, one clock) to the
    completion of the last bucket's all-reduce;
  - ``overlap (bw)`` (Ember and PyTorch alike): exposed = ``loss.backward()`` time with
    DDP syncing minus the same backward under ``no_sync()`` (ranks start each backward
    together); it also charges the hooks' bucket copies to communication;

* optimizer-state bytes per rank (W3, AdamW) with and without ZeRO-1 (Ember and, when
  installed, PyTorch's ZeroRedundancyOptimizer);
* Ember's DDP step time / PyTorch DDP's (target <= 1.0), eager and ``ember.compile``d
  (the compiled step holds each bucket's all-reduce as a start node and a wait node
  after the rest of backward).

``EMBER_DIST_PROGRESS=1`` in the environment turns on the (opt-in) MPI progress thread.

Run:
    .venv/bin/python bench/distributed.py            # about a minute on 2 cores
    .venv/bin/python bench/distributed.py --quick    # smoke run
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import ember  # noqa: E402  (before NumPy: Ember sets OpenBLAS's thread spin)
import numpy as np  # noqa: E402
from compile import train_step  # noqa: E402
from train import WORKLOADS, _import_torch, make_step  # noqa: E402

NAMES = {"W1": "W1 MLP SGD", "W3": "W3 GPT AdamW"}


# ------------------------------------------------------------------------ worker side
def _world():
    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))


def _build(lib, wl, world, rank, seed=0):
    """Model, optimizer and this rank's half of the global batch."""
    lib.manual_seed(seed)
    model, opt = wl.build(lib, **wl.size)
    x, y = wl.data(np.random.default_rng(seed), **wl.size)
    n = x.shape[0] // world
    part = slice(rank * n, (rank + 1) * n)
    return model, opt, lib.tensor(x[part]), lib.tensor(y[part])


def _step_fn(lib, model, opt, x, y, compiled=False):
    """A zero-argument training step on this rank's batch: ``bench/train.py``'s, or when
    ``compiled`` ``bench/compile.py``'s under ``lib.compile`` (the batch as arguments)."""
    if not compiled:
        return make_step(lib, model, opt, x, y)
    fn = lib.compile(train_step(lib, model, opt))
    return lambda: fn(x, y)


def _time(step, steps: int, rounds: int, barrier) -> float:
    """Median over ``rounds`` of the mean seconds per step (ranks start each round together)."""
    for _ in range(3):
        step()
    out = []
    for _ in range(rounds):
        barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        out.append((time.perf_counter() - t0) / steps)
    return statistics.median(out)


def _ember_ddp(wl, world, rank, steps, rounds, dist, bucket_mb, compiled=False):
    from ember.nn.parallel import DistributedDataParallel as DDP
    model, opt, x, y = _build(ember, wl, world, rank)
    # NOTE: DDP keeps the same Parameters: the optimizer stays valid
    ddp = DDP(model, bucket_cap_mb=bucket_mb) if world > 1 else model
    step = _step_fn(ember, ddp, opt, x, y, compiled)
    barrier = dist.barrier if world > 1 else (lambda: None)
    res = {"s_per_step": _time(step, steps, rounds, barrier)}
    if world > 1 and compiled:
        res.update(_overlap_compiled(ddp, step, dist))
    if world > 1 and not compiled:
        res.update(_overlap(ddp, step, dist))
        exposed = _exposed_backward(ember, ddp, x, y, barrier)
        res["overlap_bw"] = max(0.0, 1.0 - exposed / res["allreduce_s"])
        res["exposed_bw_s"] = exposed
    return res


def _exposed_backward(lib, ddp, x, y, barrier, reps: int = 10) -> float:
    """Median ``loss.backward()`` time syncing minus the median under ``no_sync()``."""
    F = lib.nn.functional

    def backward_s(sync):
        out = []
        for _ in range(reps + 2):
            ddp.zero_grad()
            with contextlib.nullcontext() if sync else ddp.no_sync():
                o = ddp(x)
                loss = F.cross_entropy(o.reshape(-1, o.shape[-1]), y.reshape(-1))
                barrier()
                t0 = time.perf_counter()
                loss.backward()
                out.append(time.perf_counter() - t0)
        return statistics.median(out[2:])
    return max(0.0, backward_s(True) - backward_s(False))


def _allreduce_alone(dist, flats, reps: int = 10) -> float:
    out = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        for f in flats:
            dist.all_reduce(f)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _overlap(ddp, step, dist):
    """Exposed all-reduce time after backward vs the same all-reduces run alone."""
    red = ddp.reducer
    marks = []
    for _ in range(10):
        step()
        marks.append((red.stats["backward_end"], red.stats["comm_done"]))
    # NOTE: the ranks share one machine's monotonic clock: communication is exposed only
    # after the LAST rank's backward ends (waiting for a slower peer is not communication)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, marks)
    exposed = [max(0.0, done - max(r[i][0] for r in every))
               for i, (_, done) in enumerate(marks)]
    e, a = statistics.median(exposed), _allreduce_alone(dist, [b.flat for b in red.buckets])
    return {"exposed_s": e, "allreduce_s": a, "overlap": max(0.0, 1.0 - e / a) if a else 1.0,
            "buckets": len(red.buckets)}


def _overlap_compiled(ddp, step, dist):
    """Compiled DDP: exposed = from the LAST rank's first wait node to this rank's last
    wait node's completion (the wait nodes run after the rest of backward)."""
    from ember.nn.parallel._traced import _IN_FLIGHT
    nb = len(ddp.reducer.buckets)
    marks = []
    for _ in range(10):
        _IN_FLIGHT.log.clear()
        step()
        waits = list(_IN_FLIGHT.log)[-nb:]
        marks.append((waits[0][0], waits[-1][1]))
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, marks)
    exposed = [max(0.0, done - max(r[i][0] for r in every))
               for i, (_, done) in enumerate(marks)]
    e = statistics.median(exposed)
    a = _allreduce_alone(dist, [b.flat for b in ddp.reducer.buckets])
    return {"exposed_s": e, "allreduce_s": a, "overlap": max(0.0, 1.0 - e / a) if a else 1.0,
            "buckets": nb}


def _ember_zero_bytes(world, rank):
    from ember.distributed.optim import ZeroRedundancyOptimizer
    from ember.nn.parallel import DistributedDataParallel as DDP
    wl = WORKLOADS[NAMES["W3"]]
    out = {}
    for zero in (False, True):
        model, opt, x, y = _build(ember, wl, world, rank)
        ddp = DDP(model)
        if zero:
            opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=ember.optim.AdamW,
                                          lr=3e-4)
        else:
            opt = ember.optim.AdamW(ddp.parameters(), lr=3e-4)
        _step_fn(ember, ddp, opt, x, y)()
        state = (opt.optim.state if zero else opt.state).values()
        out["zero" if zero else "plain"] = sum(
            v.numel() * v.element_size() for st in state for v in st.values()
            if isinstance(v, ember.Tensor))
    return out


def _torch_side(torch, wl, world, rank, steps, rounds):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    model, opt, x, y = _build(torch, wl, world, rank)
    barrier = lambda: None  # noqa: E731
    if world > 1:
        import torch.distributed as tdist
        from torch.nn.parallel import DistributedDataParallel as TDDP
        model = TDDP(model)
        barrier = tdist.barrier
    res = {"s_per_step": _time(_step_fn(torch, model, opt, x, y), steps, rounds, barrier)}
    if world > 1:
        from ember.nn.parallel._buckets import assign_buckets
        params = [p for p in model.parameters() if p.requires_grad]
        # NOTE: PyTorch's default buckets (1 MiB first, then 25 MiB, reverse order)
        flats = [torch.zeros(sum(params[i].numel() for i in b)) for b in
                 assign_buckets(params, 25 * 2**20)]
        res["allreduce_s"] = _allreduce_alone(tdist, flats)
        res["buckets"] = len(flats)
        res["exposed_bw_s"] = _exposed_backward(torch, model, x, y, barrier)
        res["overlap_bw"] = max(0.0, 1.0 - res["exposed_bw_s"] / res["allreduce_s"])
    return res


def _torch_zero_bytes(torch, world, rank):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as TDDP
    wl = WORKLOADS[NAMES["W3"]]
    model, _, x, y = _build(torch, wl, world, rank)
    model = TDDP(model)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=3e-4)
    _step_fn(torch, model, opt, x, y)()
    return sum(v.numel() * v.element_size() for st in opt.optim.state.values()
               for v in st.values() if torch.is_tensor(v))


def worker(out_path: str, steps: int, rounds: int, use_torch: bool, bucket_mb: float) -> None:
    world, rank = _world()
    dist = None
    if world > 1:
        import ember.distributed as dist
        dist.init_process_group("mpi")
    torch = _import_torch() if use_torch else None
    if torch is not None and world > 1:
        import torch.distributed as tdist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        tdist.init_process_group("gloo", rank=rank, world_size=world)
    res = {"world": world, "bucket_mb": bucket_mb}
    for key, name in NAMES.items():
        wl = WORKLOADS[name]
        res[key] = {"ember": _ember_ddp(wl, world, rank, steps, rounds, dist, bucket_mb),
                    "ember.compile": _ember_ddp(wl, world, rank, steps, rounds, dist,
                                                bucket_mb, compiled=True)}
        if torch is not None:
            res[key]["torch"] = _torch_side(torch, wl, world, rank, steps, rounds)
    if world > 1:
        res["zero_bytes"] = {"ember": _ember_zero_bytes(world, rank)}
        if torch is not None:
            res["zero_bytes"]["torch_zero"] = _torch_zero_bytes(torch, world, rank)
        all_res = [None] * world
        dist.all_gather_object(all_res, res)
        res["zero_bytes_per_rank"] = [r["zero_bytes"] for r in all_res]
    if rank == 0:
        Path(out_path).write_text(json.dumps(res))
    if world > 1:
        dist.barrier()
        if torch is not None:
            torch.distributed.destroy_process_group()
        dist.destroy_process_group()


# ------------------------------------------------------------------------ driver side
def _run(nproc: int, threads: int, args, out: Path) -> dict:
    from ember.distributed.run import mpiexec_command
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), MASTER_PORT=str(29500 + os.getpid() % 1000))
    target = [sys.executable, __file__, "--worker", str(out), "--steps", str(args.steps),
              "--rounds", str(args.rounds)]
    target += ["--bucket-mb", str(args.bucket_mb)] if args.bucket_mb is not None else []
    target += ["--no-torch"] if args.no_torch else []
    cmd = target if nproc == 1 else mpiexec_command(nproc, target)
    subprocess.run(cmd, env=env, check=True, timeout=1800)
    return json.loads(out.read_text())


def report(one: dict, two: dict) -> None:
    libs = ["ember", "ember.compile"] + (["torch"] if "torch" in one["W1"] else [])
    default = ("PyTorch's default (1 MiB, 25 MiB)" if os.environ.get(
        "EMBER_BENCH_PYTORCH_BUCKETS") == "1" else "default")
    print(f"Ember DDP bucket_cap_mb={two['bucket_mb'] or default}, MPI progress thread "
          f"{'on' if os.environ.get('EMBER_DIST_PROGRESS') == '1' else 'off'}")
    print(f"{'workload':<14}{'lib':<14}{'1p x 2t steps/s':>10}{'2p x 1t steps/s':>17}"
          f"{'2p / 1p':>9}{'overlap':>9}{'overlap (bw)':>14}")

    def pct(r, k):
        return f"{r[k] * 100:7.0f}%" if k in r else f"{'n/a':>8}"
    for key in NAMES:
        for lib in libs:
            a, b = one[key][lib], two[key][lib]
            print(f"{NAMES[key]:<14}{lib:<14}{1 / a['s_per_step']:10.1f}"
                  f"{1 / b['s_per_step']:17.1f}{a['s_per_step'] / b['s_per_step']:8.2f}x"
                  f"{pct(b, 'overlap')}{pct(b, 'overlap_bw'):>14}")
        if "torch" in libs:
            for lib in ("ember", "ember.compile"):
                r = two[key][lib]["s_per_step"] / two[key]["torch"]["s_per_step"]
                print(f"{'':<14}{lib} DDP step / PyTorch DDP (gloo) step: {r:.2f}x "
                      f"(target <= 1.0)")
        for lib in libs:
            e = two[key][lib]
            extra = (f", exposed after the last backward {e['exposed_s'] * 1e3:.2f} ms"
                     if "exposed_s" in e else "")
            bw = (f", backward sync - no_sync {e['exposed_bw_s'] * 1e3:.2f} ms"
                  if "exposed_bw_s" in e else "")
            print(f"{'':<14}{lib}: all-reduce alone {e['allreduce_s'] * 1e3:.2f} ms in "
                  f"{e['buckets']} bucket(s){extra}{bw}")
    per_rank = two["zero_bytes_per_rank"]
    plain = max(r["ember"]["plain"] for r in per_rank)
    zero = max(r["ember"]["zero"] for r in per_rank)
    print(f"W3 AdamW optimizer state per rank: plain {plain / 2**20:.2f} MiB, ZeRO-1 "
          f"{zero / 2**20:.2f} MiB (max over ranks) = {zero / plain:.2f}x (target <= 0.55)")
    if "torch_zero" in per_rank[0]:
        tz = max(r["torch_zero"] for r in per_rank)
        print(f"PyTorch ZeroRedundancyOptimizer per rank: {tz / 2**20:.2f} MiB")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="few steps (smoke run)")
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    p.add_argument("--repeat", type=int, default=2,
                   help="run each configuration this many times, alternating; keep the fastest")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--bucket-mb", type=float, default=None,
                   help="Ember DDP bucket_cap_mb (default: DDP's default)")
    p.add_argument("--pytorch-buckets", action="store_true",
                   help="Ember DDP with PyTorch's default buckets (1 MiB, then 25 MiB)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.rounds, args.repeat = 3, 2, 1
    if args.pytorch_buckets:   # NOTE: read by the workers' DDP default (see _buckets)
        os.environ["EMBER_BENCH_PYTORCH_BUCKETS"] = "1"
    if args.worker:
        if os.environ.get("EMBER_BENCH_PYTORCH_BUCKETS") == "1":
            from ember.nn.parallel import distributed as ddp_mod
            ddp_mod.default_cap_bytes = lambda params: 25 * 2**20
        worker(args.worker, args.steps, args.rounds, not args.no_torch, args.bucket_mb)
        return 0
    ones, twos = [], []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.repeat):   # NOTE: alternated, so both see the same machine state
            ones.append(_run(1, 2, args, Path(d) / "one.json"))
            twos.append(_run(2, 1, args, Path(d) / "two.json"))
    report(_fastest(ones), _fastest(twos))
    return 0


def _fastest(runs: list) -> dict:
    """Per workload and library, the run with the fastest step (the least disturbed)."""
    best = dict(runs[0])
    for key in NAMES:
        best[key] = {lib: min((r[key][lib] for r in runs), key=lambda e: e["s_per_step"])
                     for lib in runs[0][key]}
    return best


if __name__ == "__main__":
    sys.exit(main())
