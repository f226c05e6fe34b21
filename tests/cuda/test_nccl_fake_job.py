"""The NCCL backend's plumbing across two processes (``mpiexec -n 2``), on the fake
CUDA device with the fake NCCL module (``tests/distributed/jobs/nccl_fake.py``): every
collective on ``cuda`` tensors against NumPy, and each one reaching an NCCL call. The
stand-in is the strict one (CuPy's refusals: ``ember/device/cuda_strict.py``)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "distributed"))
from mpi_helper import mpiexec  # noqa: E402


def test_nccl_backend_two_ranks_on_the_fake_device():
    res = mpiexec(2, "nccl_fake.py", timeout=120,
                  env={"EMBER_FAKE_CUDA": "1", "EMBER_FAKE_CUDA_STRICT": "1"})
    assert res.rc == 0 and "ALL CHECKS PASSED" in res.out and "[strict]" in res.out, str(res)
