"""Ember's own worker threads for generated kernels (instead of OpenMP's runtime).

Why not ``#pragma omp parallel``: libgomp keeps one process-wide thread pool whose wait
policy is read once, when the library is first loaded. PyTorch's wheel ships its own
``libgomp.so.1``; imported first, it owns that soname, Ember's kernels bind to it, and its
default policy (spin after every parallel region) steals the second core from BLAS's
threads between kernels — a compiled W1 step measured 40 ms instead of 5 ms on 2 cores.
Setting ``OMP_WAIT_POLICY`` from inside the library cannot help once libgomp is loaded, and
must not change the user's or PyTorch's own threading.

So kernels are compiled with ``-fopenmp-simd`` (SIMD pragmas and libmvec only, no OpenMP
runtime), and their driver hands the row range to :data:`ember_parallel` below through a
per-library hook (``ember_parallel_hook``, set when a kernel library is loaded). The pool:
``nthreads - 1`` detached pthreads created on first use; the caller runs the first chunk
itself; workers sleep on a condition variable between kernels (never spin); a call that
finds the pool busy (another Python thread is inside a kernel) runs serially; a forked
child runs serially (the parent's threads do not exist there).
"""
from __future__ import annotations

import ctypes

from . import cache
from .toolchain import find_compiler

_SOURCE = r"""
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

typedef void (*ember_run_fn)(char **, const int64_t *, const int64_t *, int64_t, int64_t);

#define EMBER_MAX_WORKERS 63
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;   /* one kernel in the pool */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;     /* job, gen, pending */
static pthread_cond_t go = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static int64_t nworkers = 0, pending = 0;
static uint64_t gen = 0;
static pid_t owner = 0;
static struct {
    ember_run_fn run; char **ptrs; const int64_t *shape, *st; int64_t work, chunk, nt;
} job;

static void *ember_worker(void *arg) {
    const int64_t t = (int64_t)(intptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (gen == seen) pthread_cond_wait(&go, &mu);
        seen = gen;
        if (t >= job.nt) continue;                /* not needed for this kernel */
        const ember_run_fn run = job.run;
        char **ptrs = job.ptrs;
        const int64_t *shape = job.shape, *st = job.st;
        const int64_t lo = t * job.chunk;
        const int64_t hi = lo + job.chunk < job.work ? lo + job.chunk : job.work;
        pthread_mutex_unlock(&mu);
        if (lo < hi) run(ptrs, shape, st, lo, hi);
        pthread_mutex_lock(&mu);
        if (--pending == 0) pthread_cond_signal(&done);
    }
    return 0;
}

/* Run rows [0, work) of a kernel on up to nthreads threads; chunks rounded up to a
   multiple of `align` rows (vector-friendly boundaries). */
void ember_parallel(ember_run_fn run, char **ptrs, const int64_t *shape, const int64_t *st,
                    int64_t work, int64_t align, int64_t nthreads) {
    if (nthreads > EMBER_MAX_WORKERS + 1) nthreads = EMBER_MAX_WORKERS + 1;
    if (nthreads < 2 || work < 2 || (owner && owner != getpid())
            || pthread_mutex_trylock(&busy) != 0) {
        run(ptrs, shape, st, 0, work);
        return;
    }
    owner = getpid();
    while (nworkers < nthreads - 1) {
        pthread_t th;
        if (pthread_create(&th, 0, ember_worker, (void *)(intptr_t)(nworkers + 1)) != 0) break;
        pthread_detach(th);
        nworkers++;
    }
    int64_t nt = nworkers + 1 < nthreads ? nworkers + 1 : nthreads;
    int64_t chunk = (work + nt - 1) / nt;
    if (align > 1) chunk = (chunk + align - 1) / align * align;
    nt = (work + chunk - 1) / chunk;
    pthread_mutex_lock(&mu);
    job.run = run; job.ptrs = ptrs; job.shape = shape; job.st = st;
    job.work = work; job.chunk = chunk; job.nt = nt;
    pending = nt - 1;
    gen++;
    if (nt > 1) pthread_cond_broadcast(&go);
    pthread_mutex_unlock(&mu);
    run(ptrs, shape, st, 0, chunk < work ? chunk : work);
    pthread_mutex_lock(&mu);
    while (pending > 0) pthread_cond_wait(&done, &mu);
    pthread_mutex_unlock(&mu);
    pthread_mutex_unlock(&busy);
}
"""

_state: dict = {}


def address() -> int | None:
    """Address of ``ember_parallel`` (built once into the kernel cache), or None."""
    if "addr" not in _state:
        _state["addr"] = None
        cc = find_compiler()
        if cc is not None:
            lib = cache.load(_SOURCE, cc)
            _state["lib"] = lib      # NOTE: keeps the library (and its threads' code) mapped
            _state["addr"] = ctypes.cast(lib.ember_parallel, ctypes.c_void_p).value
    return _state["addr"]


def install(lib: ctypes.CDLL) -> None:
    """Point a kernel library's ``ember_parallel_hook`` at the pool (no-op without one)."""
    try:
        hook = ctypes.c_void_p.in_dll(lib, "ember_parallel_hook")
    except ValueError:
        return
    hook.value = address()


def load_kernels(source, names) -> tuple | None:
    """``(library, {name: ctypes function})`` for the hand-written C kernels of ``source``
    (a string, or a function of the compiler returning one), compiled once into the kernel
    cache with the pool hook installed; None without a C compiler. Each ``ember_<name>``
    takes ``(char **ptrs, const int64_t *geometry, int64_t nthreads)``: how
    :mod:`.conv_kernels` and :mod:`.attention_kernels` call theirs.
    """
    cc = find_compiler()
    if cc is None:
        return None
    lib = cache.load(source if isinstance(source, str) else source(cc), cc)
    install(lib)
    fns = {}
    for name in names:
        f = getattr(lib, f"ember_{name}")
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        f.restype = None
        fns[name] = f
    return lib, fns


def fast_addresses(lib, names) -> dict:
    """``{name: address of ember_<name>_fast}``: the raw entry points a cached launch plan
    calls without ctypes argument conversion (attention and reduction kernels)."""
    return {k: ctypes.cast(getattr(lib, f"ember_{k}_fast"), ctypes.c_void_p).value
            for k in names}
