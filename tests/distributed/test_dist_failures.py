"""Failures never hang: dead, raising, early-exiting and disagreeing ranks (real jobs).

Each job is one scenario of jobs/failures.py; the process-group timeout there is 3 s.
"""
import pathlib

from mpi_helper import JOBS, ember_run, mpiexec

LIMIT = 60   # seconds a failing job may take before the test calls it a hang


def _line(tag: str) -> str:
    """``failures.py:N`` of the line marked ``# tag`` in the job."""
    lines = pathlib.Path(JOBS / "failures.py").read_text().splitlines()
    return f"failures.py:{next(i + 1 for i, s in enumerate(lines) if s.endswith('# ' + tag))}"


def test_killed_rank_ends_job_and_launcher_names_it():
    res = ember_run(3, "failures.py", "kill", timeout=LIMIT)
    assert res.rc != 0 and res.seconds < LIMIT, str(res)
    assert "job failed: rank 1 (pid" in res.out and "was killed by SIGKILL" in res.out, str(res)
    assert "finished" not in res.out and "rank 0 (pid" not in res.out, str(res)


def test_launcher_restarts_a_failed_job():
    res = ember_run(2, "failures.py", "kill", max_restarts=1, timeout=LIMIT)
    assert res.rc == 0, str(res)
    assert "job failed: rank 1 (pid" in res.out and "restarting (1 of 1 restarts)" in res.out
    assert "rank 0 finished" in res.out and "rank 1 finished" in res.out, str(res)


def test_uncaught_exception_aborts_job_at_once_plain_mpiexec():
    res = mpiexec(2, "failures.py", "raise", timeout=LIMIT)
    assert res.rc != 0, str(res)
    assert "[rank 1] ValueError: rank 1 fails on purpose" in res.out, str(res)
    # the exception hook aborted the job: rank 0 did not have to wait for its timeout
    assert "timed out" not in res.out, str(res)


def test_timeout_names_absent_rank_and_where_others_wait():
    res = mpiexec(3, "failures.py", "exit_early", timeout=LIMIT)
    assert res.rc != 0 and res.seconds < LIMIT, str(res)
    assert "DistributedError" in res.out and "timed out after 3." in res.out, str(res)
    assert "rank(s) [2] did not reach any collective" in res.out, str(res)
    assert "is waiting in all_reduce(shape=[4], dtype=float32" in res.out, str(res)
    assert _line("WAIT-LINE") in res.out, str(res)


def test_debug_mode_reports_mismatched_shapes_with_lines():
    res = mpiexec(2, "failures.py", "mismatch", timeout=LIMIT,
                  env={"EMBER_DISTRIBUTED_DEBUG": "1"})
    assert res.rc != 0, str(res)
    assert "ranks called different collectives" in res.out, str(res)
    assert "rank 0: all_reduce(shape=[3]" in res.out and "rank 1: all_reduce(shape=[4]" \
        in res.out, str(res)
    assert _line("MISMATCH-LINE") in res.out and "timed out" not in res.out, str(res)


def test_debug_mode_reports_collectives_called_in_different_orders():
    res = mpiexec(2, "failures.py", "order", timeout=LIMIT,
                  env={"EMBER_DISTRIBUTED_DEBUG": "1"})
    assert res.rc != 0, str(res)
    assert "rank 0: broadcast(shape=[4]" in res.out and "rank 1: all_reduce(shape=[4]" \
        in res.out, str(res)
    assert _line("ORDER-LINE-A") in res.out and _line("ORDER-LINE-B") in res.out, str(res)


def test_rank_that_never_calls_init_process_group_is_a_timeout_not_a_hang():
    res = mpiexec(2, "failures.py", "no_init", timeout=LIMIT)
    assert res.rc != 0 and res.seconds < LIMIT, str(res)
    assert "[rank 0] init_process_group: MPI_Init waited 3.0 s" in res.out, str(res)


def test_debug_mode_timeout_names_the_rank_that_never_arrived():
    res = mpiexec(3, "failures.py", "exit_early", timeout=LIMIT,
                  env={"EMBER_DISTRIBUTED_DEBUG": "1"})
    assert res.rc != 0 and res.seconds < LIMIT, str(res)
    assert "rank(s) [2] of the group [0, 1, 2] never reached a collective #2" in res.out, \
        str(res)
    assert _line("WAIT-LINE") in res.out, str(res)
