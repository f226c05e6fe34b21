"""Ember sets OpenBLAS's idle-thread spin before NumPy loads it, never over the user's value."""
import os
import subprocess
import sys

import pytest

from ember._blas_env import SPIN_LOG2_CYCLES


def _run(code, **env):
    e = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                         check=True, timeout=300)
    return out.stdout.strip().splitlines()


REPORT = ("import os, ember; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT')); "
          "print(ember.config.blas_info()['OPENBLAS_THREAD_TIMEOUT'])")


def test_set_when_ember_comes_first():
    value, status = _run(REPORT)
    assert value == str(SPIN_LOG2_CYCLES) and "set by Ember" in status


@pytest.mark.parametrize("given", ["28", "4"])
def test_the_users_value_is_kept(given):
    value, status = _run(REPORT, OPENBLAS_THREAD_TIMEOUT=given)
    assert value == given and status.startswith(given) and "environment" in status


def test_too_late_after_numpy_is_reported_not_set():
    value, status = _run("import numpy; " + REPORT)
    assert value == "None" and "imported before Ember" in status
