"""Run real multi-process jobs from the tests: ``mpiexec -n N`` or ``ember run``.

Every job runs with a hard wall-clock limit in its own session; on timeout the whole
process group is killed and the test fails showing what the ranks printed. Tests skip
(with the reason) only where mpi4py or mpiexec is not installed.
"""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
JOBS = pathlib.Path(__file__).resolve().parent / "jobs"


def mpiexec_or_skip() -> str:
    """The ``mpiexec`` path, or skip the test saying what is missing."""
    import ember.distributed as dist
    from ember.distributed.run import find_mpiexec
    if not dist.is_available():
        pytest.skip("mpi4py is not installed (pip install 'ember[distributed]')")
    try:
        return find_mpiexec()
    except RuntimeError as e:
        pytest.skip(str(e))


def _env(extra=None) -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "EMBER_RUN_DIR", "EMBER_DISTRIBUTED_DEBUG"):
        env.pop(k, None)
    # NOTE: an Open MPI mpiexec (a GPU image's) refuses root without these; MPICH ignores them
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(extra or {})
    return env


class Result:
    def __init__(self, rc: int, out: str, seconds: float, cmd):
        self.rc, self.out, self.seconds, self.cmd = rc, out, seconds, cmd

    def __str__(self) -> str:
        return (f"command: {' '.join(map(str, self.cmd))}\nexit status: {self.rc} after "
                f"{self.seconds:.1f} s\n--- output of all ranks ---\n{self.out}")


def run(cmd, *, timeout: float, env=None) -> Result:
    """Run ``cmd`` (a job) and return its exit status and combined output."""
    start = time.monotonic()
    proc = subprocess.Popen([str(c) for c in cmd], cwd=ROOT, env=_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        res = Result(-9, out.decode(errors="replace"), time.monotonic() - start, cmd)
        pytest.fail(f"the job hung: killed after {timeout} s\n{res}")
    return Result(proc.returncode, out.decode(errors="replace"), time.monotonic() - start, cmd)


def mpiexec(n: int, job: str, *args, timeout: float = 120, env=None) -> Result:
    """``mpiexec -n n python tests/distributed/jobs/<job> args...``."""
    exe = mpiexec_or_skip()
    return run([exe, "-n", n, sys.executable, JOBS / job, *args], timeout=timeout, env=env)


def ember_run(n: int, job: str, *args, max_restarts: int = 0, timeout: float = 120,
              env=None) -> Result:
    """``ember run --nproc n [--max-restarts k] tests/distributed/jobs/<job> args...``."""
    mpiexec_or_skip()
    cmd = [sys.executable, "-m", "ember", "run", "--nproc", n, "--max-restarts", max_restarts,
           JOBS / job, *args]
    return run(cmd, timeout=timeout, env=env)
