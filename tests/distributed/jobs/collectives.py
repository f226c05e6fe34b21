"""One multi-process job: every collective vs NumPy on every dtype (2 or 3 ranks).

Each rank can compute every other rank's input (seeded by rank), so each checks its
own result against a NumPy reference. Values are multiples of 1/4 in [-4, 4] (small
integers for integer dtypes), so sums and products are exact in every dtype and the
comparisons are exact. Rank 0 prints ``ALL CHECKS PASSED: <n> checks`` or the list
of failures (exit status 1).
"""
import datetime
import os
import sys
import traceback

import ml_dtypes
import numpy as np

import ember
import ember.distributed as dist
from ember.distributed import ReduceOp as R
from ember.errors import DTypeError, ShapeError

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
          "float32", "float64"]
NP = {d: np.dtype(ml_dtypes.bfloat16) if d == "bfloat16" else np.dtype(d) for d in DTYPES}
FLOATS = {"float16", "bfloat16", "float32", "float64"}
FAILS, COUNT = [], [0]


def data(key, rank, dtype, shape):
    rng = np.random.default_rng([key, rank])
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "uint8":
        return rng.integers(0, 6, shape).astype(np.uint8)
    if dtype.startswith("int"):
        return rng.integers(-5, 6, shape).astype(NP[dtype])
    return (rng.integers(-16, 17, shape) / 4).astype(NP[dtype])


def tens(arr, strided):
    """An Ember tensor of ``arr``; with ``strided``, a non-contiguous view [:, ::2]."""
    if not strided:
        return ember.tensor(arr), None
    base = np.zeros(arr.shape[:-1] + (2 * arr.shape[-1],), arr.dtype)
    base[..., ::2] = arr
    b = ember.tensor(base)
    t = b[:, ::2] if arr.ndim == 2 else b[:, :, ::2]
    assert not t.is_contiguous()
    return t, b


def check(what, got, want, base=None):
    COUNT[0] += 1
    got = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
    ok = got.dtype == want.dtype and got.shape == want.shape and np.array_equal(
        got.astype(np.float64), want.astype(np.float64))
    if ok and base is not None:   # the untouched half of a strided tensor's storage
        odd = np.asarray(base.numpy())[..., 1::2]
        ok = not odd.astype(np.float64).any()
        what += " (wrote outside the view)" if not ok else ""
    if not ok:
        FAILS.append(f"[rank {RANK}] {what}: got {got.dtype}{got.shape} {got.ravel()[:8]}, "
                     f"want {want.dtype}{want.shape} {want.ravel()[:8]}")


def ref_reduce(arrs, op, dtype):
    n = len(arrs)
    if dtype == "bool":
        st = np.stack(arrs)
        if op in (R.SUM, R.MAX, R.BOR):
            return st.any(0)
        if op in (R.PRODUCT, R.MIN, R.BAND):
            return st.all(0)
        return np.logical_xor.reduce(st, 0)
    wide = np.float64 if dtype in FLOATS else np.int64
    st = np.stack([a.astype(wide) for a in arrs])
    if op is R.AVG:
        acc = np.dtype(np.float32) if dtype in ("float16", "bfloat16") else NP[dtype]
        return (st.sum(0).astype(acc) / acc.type(n)).astype(NP[dtype])
    fn = {R.SUM: np.sum, R.PRODUCT: np.prod, R.MIN: np.min, R.MAX: np.max,
          R.BAND: np.bitwise_and.reduce, R.BOR: np.bitwise_or.reduce,
          R.BXOR: np.bitwise_xor.reduce}[op]
    return fn(st, axis=0).astype(NP[dtype])


def ops_for(dtype):
    if dtype in FLOATS:
        return [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX]
    return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]


def reductions(dt, n):
    for k, op in enumerate(ops_for(dt)):
        for strided in (False, True):
            key = 100 + 2 * k + strided
            t, base = tens(data(key, RANK, dt, (3, 4)), strided)
            dist.all_reduce(t, op=op)
            want = ref_reduce([data(key, r, dt, (3, 4)) for r in range(n)], op, dt)
            check(f"all_reduce {dt} {op} strided={strided}", t, want, base)
    t = ember.tensor(data(7, RANK, dt, (5,)))
    work = dist.all_reduce(t, op=R.MAX, async_op=True)
    assert work.wait() is True and work.is_completed()
    check(f"all_reduce async {dt}", t, ref_reduce([data(7, r, dt, (5,)) for r in range(n)],
                                                  R.MAX, dt))
    for op in (R.SUM, R.MAX):
        t, base = tens(data(8, RANK, dt, (2, 3)), True)
        dist.reduce(t, dst=1, op=op)
        want = (ref_reduce([data(8, r, dt, (2, 3)) for r in range(n)], op, dt) if RANK == 1
                else data(8, RANK, dt, (2, 3)))
        check(f"reduce {dt} {op}", t, want, base)
    for op in (R.SUM, R.MIN) + ((R.AVG,) if dt in FLOATS else ()):
        for stacked in (False, True):
            shape = (n, 2, 4) if stacked else (2 * n, 4)
            inp, _ = tens(data(9, RANK, dt, shape), False)
            out, base = tens(np.zeros((2, 4), NP[dt]), True)
            dist.reduce_scatter_tensor(out, inp, op=op)
            full = ref_reduce([data(9, r, dt, shape) for r in range(n)], op, dt)
            want = full[RANK] if stacked else full[2 * RANK:2 * RANK + 2]
            check(f"reduce_scatter_tensor {dt} {op} stacked={stacked}", out, want, base)
    ins = [ember.tensor(data(10 + j, RANK, dt, (3,))) for j in range(n)]
    out = ember.tensor(np.zeros(3, NP[dt]))
    dist.reduce_scatter(out, ins, op=R.SUM)
    check(f"reduce_scatter list {dt}", out,
          ref_reduce([data(10 + RANK, r, dt, (3,)) for r in range(n)], R.SUM, dt))


def movement(dt, n):
    src = n - 1
    t, base = tens(data(20, RANK, dt, (3, 4)), True)
    dist.broadcast(t, src=src)
    check(f"broadcast {dt}", t, data(20, src, dt, (3, 4)), base)
    outs = [tens(np.zeros((2, 3), NP[dt]), j % 2 == 1) for j in range(n)]
    dist.all_gather([o for o, _ in outs], tens(data(21, RANK, dt, (2, 3)), True)[0])
    for j, (o, b) in enumerate(outs):
        check(f"all_gather {dt} [{j}]", o, data(21, j, dt, (2, 3)), b)
    for shape in ((3 * n, 4), (n, 3, 4)):
        out = ember.tensor(np.zeros(shape, NP[dt]))
        dist.all_gather_into_tensor(out, tens(data(22, RANK, dt, (3, 4)), True)[0])
        want = np.stack([data(22, j, dt, (3, 4)) for j in range(n)]).reshape(shape)
        check(f"all_gather_into_tensor {dt} {shape}", out, want)
    glist = [ember.tensor(np.zeros((2, 2), NP[dt])) for _ in range(n)] if RANK == 0 else None
    dist.gather(ember.tensor(data(23, RANK, dt, (2, 2))), glist, dst=0)
    for j, g in enumerate(glist or []):
        check(f"gather {dt} [{j}]", g, data(23, j, dt, (2, 2)))
    slist = ([ember.tensor(data(24, j, dt, (2, 3))) for j in range(n)] if RANK == src
             else None)
    t, base = tens(np.zeros((2, 3), NP[dt]), True)
    dist.scatter(t, slist, src=src)
    check(f"scatter {dt}", t, data(24, RANK, dt, (2, 3)), base)
    exchanges(dt, n)


def exchanges(dt, n):
    ins = [ember.tensor(data(30 + j, RANK, dt, (j + 1, 2))) for j in range(n)]
    outs = [ember.tensor(np.zeros((RANK + 1, 2), NP[dt])) for _ in range(n)]
    dist.all_to_all(outs, ins)
    for j, o in enumerate(outs):
        check(f"all_to_all {dt} from {j}", o, data(30 + RANK, j, dt, (RANK + 1, 2)))
    rows = sum(j + 1 for j in range(n))
    inp = ember.tensor(data(31, RANK, dt, (rows, 3)))
    out = ember.tensor(np.zeros((n * (RANK + 1), 3), NP[dt]))
    dist.all_to_all_single(out, inp, output_split_sizes=[RANK + 1] * n,
                           input_split_sizes=[j + 1 for j in range(n)])
    start = sum(j + 1 for j in range(RANK))
    want = np.concatenate([data(31, j, dt, (rows, 3))[start:start + RANK + 1]
                           for j in range(n)])
    check(f"all_to_all_single {dt}", out, want)
    even_in = ember.tensor(data(32, RANK, dt, (2 * n, 2)))
    even_out, base = tens(np.zeros((2 * n, 2), NP[dt]), True)
    dist.all_to_all_single(even_out, even_in)
    want = np.concatenate([data(32, j, dt, (2 * n, 2))[2 * RANK:2 * RANK + 2]
                           for j in range(n)])
    check(f"all_to_all_single even {dt}", even_out, want, base)
    nxt, prev = (RANK + 1) % n, (RANK - 1) % n
    box, base = tens(np.zeros((2, 2), NP[dt]), True)
    sw = dist.isend(ember.tensor(data(33, RANK, dt, (2, 2))), dst=nxt, tag=5)
    rw = dist.irecv(box, src=None if RANK % 2 else prev, tag=5)
    sw.wait()
    rw.wait()
    check(f"isend/irecv {dt}", box, data(33, prev, dt, (2, 2)), base)
    check(f"irecv source {dt}", np.array(rw.result()), np.array(prev))


def objects(n):
    objs = [{"epoch": 3, "names": ["a", "b"]}, 2.5, None] if RANK == 0 else [None] * 3
    dist.broadcast_object_list(objs, src=0)
    check("broadcast_object_list", np.array(objs == [{"epoch": 3, "names": ["a", "b"]},
                                                     2.5, None]), np.array(True))
    got = [None] * n
    dist.all_gather_object(got, {"rank": RANK, "t": (RANK, "x")})   # a tuple: pickled
    check("all_gather_object", np.array(got == [{"rank": r, "t": (r, "x")} for r in range(n)]),
          np.array(True))
    got = [None] * n if RANK == 0 else None
    dist.gather_object([RANK] * RANK, got, dst=0)
    if RANK == 0:
        check("gather_object", np.array(got == [[r] * r for r in range(n)]), np.array(True))
    expect_error("all_gather_object pickle refused", TypeError,
                 lambda: dist.all_gather_object([None] * n, (1, 2), allow_pickle=False))


def groups(n):
    g = dist.new_group([0, n - 1])
    t = ember.tensor(np.array([RANK + 1.0], np.float32))
    res = dist.all_reduce(t, group=g)
    inside = RANK in (0, n - 1)
    check("new_group all_reduce", t, np.array([float(n + 1) if inside else RANK + 1.0],
                                               np.float32))
    check("new_group rank", np.array(dist.get_rank(g)),
          np.array(({0: 0, n - 1: 1}).get(RANK, -1)))
    check("new_group size", np.array(dist.get_world_size(g)), np.array(2 if inside else -1))
    check("new_group returns None", np.array(res is None), np.array(True))
    if inside:
        b = ember.tensor(np.array([float(RANK)], np.float32))
        dist.broadcast(b, src=n - 1, group=g)   # src is a global rank
        check("new_group broadcast src", b, np.array([n - 1.0], np.float32))
    dist.destroy_process_group(g)
    dist.barrier()
    check("barrier async", np.array(dist.barrier(async_op=True).wait()), np.array(True))


def expect_error(what, kind, fn, text=""):
    COUNT[0] += 1
    try:
        fn()
    except kind as e:
        if text not in str(e):
            FAILS.append(f"[rank {RANK}] {what}: message lacks {text!r}: {e}")
        return
    except Exception as e:   # noqa: BLE001 - report the wrong kind
        FAILS.append(f"[rank {RANK}] {what}: raised {type(e).__name__}: {e}")
        return
    FAILS.append(f"[rank {RANK}] {what}: did not raise {kind.__name__}")


def errors(n):
    f = ember.zeros(4)
    expect_error("bad output shape", ShapeError,
                 lambda: dist.all_gather_into_tensor(ember.zeros(3), f), "(4,)")
    expect_error("AVG on ints", DTypeError,
                 lambda: dist.all_reduce(ember.zeros(2, dtype=ember.int64), op=R.AVG),
                 "int64")
    expect_error("op as string", TypeError, lambda: dist.all_reduce(f, op="sum"), "ReduceOp")
    expect_error("src out of range", ValueError, lambda: dist.broadcast(f, src=n), str(n))
    expect_error("init twice", ValueError, lambda: dist.init_process_group("mpi"), "twice")
    expect_error("list length", ValueError, lambda: dist.all_gather([f], f), str(n))


def main():
    global RANK
    dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=60))
    RANK, n = dist.get_rank(), dist.get_world_size()
    assert dist.is_initialized() and dist.get_backend() == "mpi"
    assert os.environ["RANK"] == str(RANK) and os.environ["WORLD_SIZE"] == str(n)
    for dt in DTYPES:
        reductions(dt, n)
        movement(dt, n)
    for shape in ((), (0,), (0, 3)):
        t = ember.tensor(data(40, RANK, "float32", shape))
        dist.all_reduce(t)
        check(f"all_reduce shape {shape}", t,
              ref_reduce([data(40, r, "float32", shape) for r in range(n)], R.SUM, "float32"))
    objects(n)
    groups(n)
    errors(n)
    report = [None] * n
    dist.all_gather_object(report, [COUNT[0], FAILS])
    dist.destroy_process_group()
    assert not dist.is_initialized()
    dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=60))   # again
    again = ember.tensor(np.array([1.0], np.float32))
    dist.all_reduce(again)
    check("all_reduce after re-init", again, np.array([float(n)], np.float32))
    dist.destroy_process_group()
    if RANK == 0:
        fails = [f for _, fs in report for f in fs]
        if fails:
            print(f"{len(fails)} FAILED CHECKS:\n" + "\n".join(fails), flush=True)
            sys.exit(1)
        print(f"ALL CHECKS PASSED: {sum(c for c, _ in report)} checks on {n} ranks", flush=True)


if __name__ == "__main__":
    RANK = -1
    try:
        main()
    except Exception:
        traceback.print_exc()
        raise
