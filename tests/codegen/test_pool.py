"""Ember's kernel thread pool: parallel runs equal serial ones, from several Python threads at
once, in forked children, and kernels never pull in an OpenMP runtime."""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ember import dtypes as dt
from ember.codegen import InputSpec, Kernel, Load, OutSpec, Reduce, ReduceKernel, Row, call
from ember.codegen import compile as kcompile
from ember.codegen import pool, set_num_threads
from ember.codegen.render_c import PARALLEL_THRESHOLD

N = PARALLEL_THRESHOLD * 4 + 13          # parallel, with a tail no chunk divides evenly


def _gelu_kernel(n):
    x = Load(0)
    y = 0.5 * x * (1 + call("tanh", 0.79788456 * (x + 0.044715 * x ** 3)))
    return kcompile(Kernel([InputSpec(dt.float32, (1,))], OutSpec(dt.float32, (n,)), y))


@pytest.fixture
def threads():
    yield
    set_num_threads(None)


def test_parallel_equals_serial_elementwise(cc, threads):
    k = _gelu_kernel(N)
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    set_num_threads(1)
    serial = k(x)
    for n in (2, 3, 8):
        set_num_threads(n)
        np.testing.assert_array_equal(k(x), serial)
    assert pool.address() is not None


def test_parallel_equals_serial_row_reduction(cc, threads):
    rows, cols = PARALLEL_THRESHOLD // 64 + 3, 128
    x = Load(0)
    k = kcompile(ReduceKernel([InputSpec(dt.float64, (cols, 1))], (rows, cols), 1,
                              [Reduce("amax", x)], x - Row(0),
                              OutSpec(dt.float64, (rows, cols)), full=True))
    a = np.random.default_rng(1).standard_normal((rows, cols))
    set_num_threads(1)
    serial = k(a)
    np.testing.assert_array_equal(serial, a - a.max(axis=1, keepdims=True))
    set_num_threads(2)
    np.testing.assert_array_equal(k(a), serial)


def test_kernels_from_many_python_threads_at_once(cc, threads):
    set_num_threads(2)
    k = _gelu_kernel(N)
    xs = [np.random.default_rng(i).standard_normal(N).astype(np.float32) for i in range(8)]
    set_num_threads(1)
    want = [k(x) for x in xs]
    set_num_threads(2)
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda x: k(x), xs * 4))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % len(xs)])


def test_kernel_libraries_do_not_load_an_openmp_runtime(cc):
    # The reason for the pool: an OpenMP runtime is process-wide state other libraries own.
    code = (
        "import numpy as np\n"
        "from ember import dtypes as dt\n"
        "from ember.codegen import InputSpec, Kernel, Load, OutSpec, call, compile\n"
        f"n = {N}\n"
        "k = compile(Kernel([InputSpec(dt.float32, (1,))], OutSpec(dt.float32, (n,)),"
        " call('exp', Load(0))))\n"
        "k(np.ones(n, np.float32))\n"
        "print(open('/proc/self/maps').read())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=os.environ.copy(), check=True, timeout=300).stdout
    assert "libgomp" not in out and "libomp" not in out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_runs_kernels(cc, threads):
    set_num_threads(2)
    k = _gelu_kernel(N)
    x = np.linspace(-3, 3, N, dtype=np.float32)
    want = k(x)                                   # the parent's pool threads exist now
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                  # child: must not wait on absent threads
        ok = np.array_equal(k(x), want)
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1"
