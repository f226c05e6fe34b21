"""The process ``ember run`` starts for each rank: it runs the rank and reports its end.

When a rank is killed (the OOM killer, ``kill -9``, a crash in C), MPICH's ``mpiexec``
kills every other rank within milliseconds and names only *some* process id. So the
launcher starts each rank's Python under this small parent (``python -c SCRIPT``, no
Ember import). The parent waits for its child: if the child ends by a signal or a
non-zero status, it writes ``EMBER_RUN_DIR/rank<N>.exit`` and ends the same way, so
``mpiexec`` still sees the failure. Ranks that ``mpiexec`` kills afterwards are killed
through their parent (the child dies with it: ``PR_SET_PDEATHSIG``), which then
cannot write anything: only the rank that really died is reported.
"""

SCRIPT = r"""
import ctypes, os, signal, subprocess, sys
run_dir, rank = os.environ.get("EMBER_RUN_DIR", ""), os.environ.get("RANK", "?")
libc = ctypes.CDLL(None, use_errno=True)
def die_with_parent():
    libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
fds = tuple(int(os.environ[k]) for k in ("PMI_FD",) if os.environ.get(k, "").isdigit())
child = subprocess.Popen(sys.argv[1:], preexec_fn=die_with_parent, pass_fds=fds)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, lambda n, f: child.send_signal(n))
rc = child.wait()
if rc != 0 and run_dir:
    try:
        with open(os.path.join(run_dir, f"rank{rank}.exit"), "w") as f:
            f.write(f"{child.pid} {rc}")
    except OSError:
        pass
if rc < 0:
    if -rc != signal.SIGKILL:
        signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
sys.exit(rc)
"""


def command(python: str, target: list) -> list:
    """argv that runs ``python target...`` under the reporting parent."""
    return [python, "-c", SCRIPT, python] + list(target)
