"""Every collective vs NumPy on every dtype, in real multi-process jobs.

One job per world size batches ~1000 checks (see jobs/collectives.py): 3 ranks under
plain ``mpiexec -n 3``, 2 ranks through the launcher (``ember run --nproc 2``) with the
cross-rank checks of ``EMBER_DISTRIBUTED_DEBUG=1`` on.
"""
from mpi_helper import ember_run, mpiexec


def _passed(res, n: int) -> None:
    assert res.rc == 0 and "ALL CHECKS PASSED" in res.out and f"on {n} ranks" in res.out, \
        str(res)
    count = int(res.out.split("ALL CHECKS PASSED: ")[1].split()[0])
    assert count > 300 * n, str(res)   # every rank ran the whole battery


def test_collectives_three_ranks_plain_mpiexec():
    _passed(mpiexec(3, "collectives.py", timeout=180), 3)


def test_collectives_two_ranks_ember_run_debug_mode():
    # EMBER_DISTRIBUTED_DEBUG=1: every collective is cross-checked first (no false alarms)
    _passed(ember_run(2, "collectives.py", timeout=180,
                      env={"EMBER_DISTRIBUTED_DEBUG": "1"}), 2)
