"""ember._contention: BLAS threads adapt to other processes' CPU use (the rule, the sampler,
a real busy process), get_num_threads() keeps what was asked, and the policy can be off."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import ember
from ember import _contention, _threads


def test_target_rule_and_hysteresis():
    t = _contention.target
    assert t(2, 0.0, 2, 2) == 2
    assert t(2, 0.6, 2, 2) == 1            # others take > half a CPU: give one thread up
    assert t(2, 0.4, 2, 1) == 1            # ... and keep it given up until they go quiet
    assert t(2, 0.2, 2, 1) == 2
    assert t(2, 5.0, 2, 2) == 1            # never below one thread
    assert t(16, 1.0, 16, 16) == 15        # one busy process costs one thread
    assert t(16, 0.0, 4, 4) == 4           # never above what was asked


def test_sampler_reads_the_machine():
    s = _contention._Sampler(os.cpu_count())
    assert s.others(time.monotonic()) is None       # first reading: nothing to compare yet
    end = time.monotonic() + 0.3
    while time.monotonic() < end:                   # this process busy: not "others"
        pass
    others = s.others(time.monotonic())
    assert others is not None and 0.0 <= others <= os.cpu_count()


@pytest.mark.skipif((os.cpu_count() or 1) < 2 or not _contention.enabled(),
                    reason="needs 2+ CPUs and /proc/stat (the policy's preconditions)")
def test_busy_processes_take_blas_threads_until_deterministic_mode():
    asked = ember.get_num_threads()
    was_running = _contention.running()
    _contention.stop()                  # this test drives the policy by hand, tick by tick
    ember.set_num_threads(os.cpu_count())
    try:
        time.sleep(_contention.HOLD)    # an explicit set_num_threads is honoured that long
        s = _contention._Sampler(os.cpu_count())
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count())]
        try:
            s.others(time.monotonic())
            time.sleep(0.5)
            n = _contention.tick(s, time.monotonic())
        finally:
            for p in busy:
                p.kill()
                p.wait()
        assert n is not None and n < os.cpu_count()
        assert set(_threads.blas_threading().values()) == {n}
        assert ember.get_num_threads() == os.cpu_count()     # what was asked, as PyTorch
        ember.use_deterministic_algorithms(True)
        try:                                                 # deterministic: the asked count
            time.sleep(0.3)
            assert _contention.tick(s, time.monotonic()) == os.cpu_count()
            assert set(_threads.blas_threading().values()) == {os.cpu_count()}
        finally:
            ember.use_deterministic_algorithms(False)
    finally:
        ember.set_num_threads(asked)
        if was_running:
            assert _contention.start()


def test_off_by_environment():
    code = ("import ember, threading; from ember import _contention as c; "
            "print(c.running(), c.status(), "
            "'ember-contention' in [t.name for t in threading.enumerate()])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "EMBER_ADAPTIVE_THREADS": "0"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "False" and "EMBER_ADAPTIVE_THREADS=0" in out.stdout
    assert out.stdout.split()[-1] == "False"


def test_set_num_threads_sets_blas_at_once_while_the_policy_runs():
    asked = ember.get_num_threads()
    try:
        for n in (1, 3):
            ember.set_num_threads(n)
            assert set(_threads.blas_threading().values()) == {n}
            assert ember.get_num_threads() == n
    finally:
        ember.set_num_threads(asked)


def test_a_blas_loaded_later_gets_the_thread_count_in_use():
    code = ("import ember, sys; from ember import _contention as c, _threads as t; "
            "ember.set_num_threads(1); assert 'scipy.linalg' not in sys.modules; "
            "import scipy.linalg; c._new_libraries(); v = t.blas_threading(); "
            "print(len(v), sorted(set(v.values())))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    nlibs, counts = out.stdout.split(maxsplit=1)
    assert int(nlibs) >= 2 and counts.strip() == "[1]"      # NumPy's and SciPy's OpenBLAS
