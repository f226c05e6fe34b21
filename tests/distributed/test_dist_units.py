"""ember.distributed pieces that need no MPI job: Work, object encoding, the launcher's
command line and diagnosis, and the errors raised before a process group exists."""
import time

import pytest

import ember.distributed as dist
from ember.distributed import objects, run
from ember.distributed.backend import DistributedError, Request, Work


class _Never(Request):
    def test(self) -> bool:
        return False


class _After(Request):
    def __init__(self, n):
        self.n = n

    def test(self) -> bool:
        self.n -= 1
        return self.n <= 0


def test_work_wait_times_out_instead_of_hanging():
    calls = []
    w = Work([_Never()], timeout=0.05, poll=lambda: calls.append(1),
             on_timeout=lambda e: DistributedError(f"all_reduce waited {e:.2f} s"))
    start = time.monotonic()
    with pytest.raises(DistributedError, match="all_reduce waited"):
        w.wait()
    assert time.monotonic() - start < 2 and calls    # polled peers' probes while waiting
    assert not w.is_completed()
    with pytest.raises(RuntimeError):                # DistributedError is a RuntimeError
        w.wait(timeout=0.01)


def test_work_finishes_once_and_returns_result():
    done = []
    w = Work([_After(3)], timeout=5, finish=lambda: done.append(1), result=lambda: 7)
    assert w.wait() is True and w.is_completed() and w.wait() is True
    assert done == [1] and w.result() == 7


def test_work_spins_before_sleeping(monkeypatch):
    # MPI progresses a collective only while each rank calls Test(): a rank that sleeps
    # early makes every peer wait (a 1-float all_reduce took 440 us instead of ~20 us)
    from ember.distributed import backend
    slept = []
    monkeypatch.setattr(backend.time, "sleep", slept.append)
    monkeypatch.setattr(backend, "_yield", lambda: None)
    assert Work([_After(300)], timeout=5).wait() and slept == []


def test_objects_plain_data_is_json_others_pickled():
    plain = {"epoch": 3, "lr": 0.5, "names": ["a", None, True]}
    data = objects.encode(plain)
    assert data[:1] == b"J" and objects.decode(data) == plain
    data = objects.encode((1, "x"))
    assert data[:1] == b"P" and objects.decode(data) == (1, "x")
    with pytest.raises(TypeError, match="allow_pickle=False"):
        objects.encode((1, 2), allow_pickle=False)
    with pytest.raises(ValueError, match="refusing"):
        objects.decode(data, allow_pickle=False)


def test_launcher_gives_each_rank_its_environment(monkeypatch):
    monkeypatch.setattr(run, "find_mpiexec", lambda: "mpiexec")
    cmd = run.mpiexec_command(2, ["python", "train.py", "--x"])
    assert cmd[0] == "mpiexec" and cmd.count(":") == 1
    first, second = " ".join(cmd).split(" : ")
    assert "-env RANK 0" in first and "-env LOCAL_RANK 0" in first
    assert "-env RANK 1" in second and "-env WORLD_SIZE 2" in second
    assert second.endswith("python train.py --x")
    hosts = " ".join(run.mpiexec_command(2, ["python", "t.py"], hostfile="hosts.txt"))
    # on several hosts LOCAL_RANK is not the rank: init_process_group takes MPI's
    assert hosts.startswith("mpiexec -f hosts.txt ") and "LOCAL_RANK" not in hosts


def test_launcher_diagnosis_blames_the_earliest_evidence():
    banner = (b"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
              b"=   PID 4242 RUNNING AT vm\n=   EXIT CODE: 9\n")
    abort = b"Abort(1) on node 0 (rank 3 in comm 0): application called MPI_Abort"
    # a killed rank (seen by its own parent) beats mpiexec's banner naming a victim
    assert run.diagnose(9, banner, {4242: 0}, exits=[(5, 2, 77, -9)]).startswith(
        "rank 2 (pid 77) was killed by SIGKILL")
    errors = [(10, 1, "DistributedError: timed out"), (11, 0, "DistributedError: timed out")]
    assert run.diagnose(1, abort, {}, errors=errors) == \
        "rank 1 failed with DistributedError: timed out (then rank(s) [0] failed too)"
    # a rank that exited with status 3 before its peers timed out is the one to blame
    assert run.diagnose(1, b"", {}, errors=errors, exits=[(4, 2, 50, 3)]).startswith(
        "rank 2 (pid 50) exited with status 3; then rank 1 failed with DistributedError")
    assert run.diagnose(1, b"", {}, errors=errors, exits=[(12, 1, 50, 1)]).startswith(
        "rank 1 failed with")
    assert run.diagnose(1, abort, {}).startswith("rank 3 aborted the job")
    assert run.diagnose(9, banner, {4242: 2}).startswith("rank 2 (pid 4242) ended with status 9")
    assert run.diagnose(5, b"", {}) == "mpiexec exited with code 5"


def test_rank_wrapper_reports_a_killed_child(tmp_path):
    import os
    import subprocess
    import sys
    from ember.distributed import rankwrap
    env = dict(os.environ, EMBER_RUN_DIR=str(tmp_path), RANK="4")
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    proc = subprocess.run(rankwrap.command(sys.executable, ["-c", code]), env=env, timeout=60)
    assert proc.returncode == -9                       # ends the way its child ended
    pid, status = (tmp_path / "rank4.exit").read_text().split()
    assert int(status) == -9 and int(pid) != proc.returncode
    ok = subprocess.run(rankwrap.command(sys.executable, ["-c", "pass"]), env=dict(
        env, RANK="5"), timeout=60)
    assert ok.returncode == 0 and not (tmp_path / "rank5.exit").exists()


def test_launcher_without_mpiexec_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setattr(run.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"ember\[distributed\]"):
        run.find_mpiexec()


def test_errors_before_init_process_group():
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="init_process_group"):
        dist.get_rank()
    with pytest.raises(ValueError, match="'mpi', 'nccl'"):
        dist.init_process_group("gloo")   # NOTE: "nccl" without CuPy: tests/cuda/test_nccl*
    with pytest.raises(ValueError, match="env://"):
        dist.init_process_group("mpi", init_method="tcp://127.0.0.1:23456")
    assert not dist.is_initialized()


def test_missing_mpi4py_names_the_extra(monkeypatch):
    import builtins
    from ember.distributed import DistributedUnavailable, mpi
    real_import = builtins.__import__

    def no_mpi4py(name, *args, **kwargs):
        if name.startswith("mpi4py"):
            raise ImportError("No module named 'mpi4py'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_mpi4py)
    with pytest.raises(DistributedUnavailable, match=r"pip install 'ember\[distributed\]'"):
        mpi.load_mpi()
    assert issubclass(DistributedUnavailable, ImportError)


def test_ember_run_rejects_bad_options_with_usage(capsys):
    from ember.cli import main
    with pytest.raises(SystemExit) as e:
        main(["run", "--nproc", "0", "train.py"])
    assert e.value.code == 2 and "--nproc must be >= 1, got 0" in capsys.readouterr().err


def test_progress_thread_drives_in_flight_collectives_then_parks():
    # MPI moves a nonblocking collective only inside MPI calls: while one is in flight
    # the progress thread calls comm.progress() (never Test: one owner per request)
    from ember.distributed import progress

    class Comm:
        calls = 0

        def progress(self):
            Comm.calls += 1

    comm = Comm()
    progress.watch(comm)
    deadline = time.monotonic() + 5
    while Comm.calls < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Comm.calls >= 3
    progress.unwatch(comm)
    assert progress.in_flight() == 0
    time.sleep(0.05)
    parked = Comm.calls
    time.sleep(0.05)
    assert Comm.calls == parked
