"""A sentinel process that keeps MPI_Init from hanging forever.

MPI_Init waits for every process of the job; one that exited before starting MPI
makes it block inside C, holding the GIL, where no Python timer can act. So
``init_process_group`` first starts a tiny sentinel process (``python -c``, no Ember
import) holding the read end of a pipe; if MPI is not up within the process group's
timeout, the sentinel prints why and kills the rank, so the job ends instead of hanging.
"""
from __future__ import annotations

import os
import subprocess
import sys

_SCRIPT = """
import os, select, signal, sys
fd, limit, pid, rank = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if not select.select([fd], [], [], limit)[0]:
    sys.stderr.write(f"[rank {rank}] init_process_group: MPI_Init waited {limit:.1f} s for "
                     f"the other processes of the job; at least one never started MPI (it "
                     f"exited or crashed before init_process_group). Ending this rank.\\n")
    sys.stderr.flush()
    os.kill(pid, signal.SIGKILL)
"""


class Sentinel:
    """Start the sentinel; call :meth:`stop` once MPI is up (or failed to start)."""

    def __init__(self, limit: float):
        r, self.w = os.pipe()
        rank = os.environ.get("PMI_RANK", os.environ.get("RANK", "?"))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, str(r), str(limit), str(os.getpid()), rank],
            pass_fds=(r,), stdin=subprocess.DEVNULL)
        os.close(r)

    def stop(self) -> None:
        """Stand the sentinel down."""
        if self.w is not None:
            os.write(self.w, b"1")
            os.close(self.w)
            self.w = None
            self.proc.wait()
