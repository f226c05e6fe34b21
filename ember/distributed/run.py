"""``ember run``: start a script on N processes with ``mpiexec`` (like ``torchrun``).

``ember run --nproc 2 train.py --epochs 3`` runs ``mpiexec`` with one program segment
per rank, so each rank sees ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE`` in its environment before any of its code runs. Each rank's
``init_process_group`` reports to the launcher (``EMBER_RUN_DIR``: its pid, its
uncaught error, and through a sentinel process when it died), so when a rank dies (MPICH's
``mpiexec`` then stops the whole job and names only some process id) the launcher
says which rank it was and how it ended. With ``--max-restarts K`` a failed
job is started again up to K times; ``EMBER_RESTART_COUNT`` tells the script which
attempt it is (it should resume from its last checkpoint).

Example:
    $ ember run --nproc 2 --max-restarts 1 examples/ddp_train.py --epochs 2
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from . import rankwrap
from .mpi import INSTALL_HINT

_BANNER_PID = re.compile(rb"PID (\d+) RUNNING AT (\S+)\s*=\s*EXIT CODE: (\d+)")
_ABORT = re.compile(rb"Abort\((\d+)\) on node \d+ \(rank (\d+) in comm")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``ember run`` options (shared by the CLI and ``python -m ember.distributed.run``)."""
    p.add_argument("--nproc", "--nproc-per-node", "--nproc_per_node", dest="nproc", type=int,
                   default=1, help="number of processes (ranks) to start")
    p.add_argument("--max-restarts", "--max_restarts", dest="max_restarts", type=int,
                   default=0, help="start a failed job again up to this many times")
    p.add_argument("--hostfile", help="MPI hostfile for a multi-host job (passed to mpiexec)")
    p.add_argument("-m", dest="module", action="store_true",
                   help="run the target as a module (python -m), not a script")
    p.add_argument("script", help="the training script (or module with -m)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")


def add_parser(sub) -> None:
    """Register ``ember run`` on the ``ember`` command's subparsers."""
    r = sub.add_parser("run", help="run a script on N processes (like torchrun; uses mpiexec)",
                       description="Run SCRIPT on --nproc ranks with mpiexec; each rank gets "
                       "RANK, WORLD_SIZE, LOCAL_RANK. A failed job is reported by rank and, "
                       "with --max-restarts, started again.")
    add_arguments(r)
    r.set_defaults(run_error=r.error)


def find_mpiexec() -> str:
    """``mpiexec`` next to this Python (the mpich wheel's) or on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = here if os.access(here, os.X_OK) else shutil.which("mpiexec")
    if found is None:
        raise RuntimeError(f"ember run: mpiexec not found next to {sys.executable} or on "
                           f"PATH; {INSTALL_HINT}")
    return found


def mpiexec_command(nproc: int, target: list[str], hostfile: str | None = None) -> list[str]:
    """The ``mpiexec`` command line: one segment per rank with its environment."""
    cmd = [find_mpiexec()]
    if hostfile:
        cmd += ["-f", hostfile]
    for r in range(nproc):
        if r:
            cmd.append(":")
        env = {"RANK": r, "WORLD_SIZE": nproc}
        if not hostfile:   # NOTE: with hosts, LOCAL_RANK comes from MPI at init
            env.update(LOCAL_RANK=r, LOCAL_WORLD_SIZE=nproc)
        cmd += ["-n", "1"]
        for k, v in env.items():
            cmd += ["-env", k, str(v)]
        cmd += target
    return cmd


class _Scan:
    """Forwards a child's output stream unchanged while keeping its tail for diagnosis."""

    def __init__(self, src, dst):
        self.tail = b""
        self.thread = threading.Thread(target=self._pump, args=(src, dst), daemon=True)
        self.thread.start()

    def _pump(self, src, dst) -> None:
        while True:
            chunk = os.read(src.fileno(), 65536)
            if not chunk:
                break
            dst.write(chunk)
            dst.flush()
            self.tail = (self.tail + chunk)[-65536:]


def _rank_files(run_dir: str, ext: str):
    """``(rank, path, text)`` of each ``rank<N>.<ext>`` file a rank left in ``run_dir``."""
    for name in os.listdir(run_dir):
        m = re.fullmatch(rf"rank(\d+)\.{ext}", name)
        if m:
            path = os.path.join(run_dir, name)
            with open(path) as f:
                yield int(m.group(1)), path, f.read()


def _pids(run_dir: str) -> dict[int, int]:
    """pid -> rank from the files ``init_process_group`` writes."""
    return {int(text.strip() or -1): rank for rank, _, text in _rank_files(run_dir, "pid")}


def _errors(run_dir: str) -> list[tuple[int, int, str]]:
    """(time, rank, ``"Kind: message"``) of ranks that died of an uncaught exception."""
    return sorted((os.stat(path).st_mtime_ns, rank, text.strip())
                  for rank, path, text in _rank_files(run_dir, "error"))


def _exits(run_dir: str) -> list[tuple[int, int, int, int]]:
    """(time, rank, pid, status) of ranks whose process failed on its own (see rankwrap)."""
    found = []
    for rank, path, text in _rank_files(run_dir, "exit"):
        pid, status = text.split()
        found.append((os.stat(path).st_mtime_ns, rank, int(pid), int(status)))
    return sorted(found)


def diagnose(rc: int, output: bytes, pids: dict[int, int], errors=(), exits=()) -> str:
    """One line saying which rank ended the job and how.

    The earliest evidence wins: a rank's uncaught exception (a collective's timeout
    included: it wrote its error), or a rank's process ending by a signal or a non-zero
    status (its parent, ``rankwrap``, saw it; ranks that ``mpiexec`` killed afterwards
    report nothing). Without either: a rank that called MPI_Abort, then the process id
    in ``mpiexec``'s banner (mapped to a rank through the pid files).

    Args:
        errors: ``(time, rank, text)`` as from the run folder's ``rank<N>.error``.
        exits: ``(time, rank, pid, status)``, status < 0 for a signal.
    """
    later = sorted({r for _, r, _ in errors[1:]})
    then = f" (then rank(s) {later} failed too)" if later else ""
    if exits and (not errors or exits[0][0] < errors[0][0]):
        _, r, pid, st = exits[0]
        how = f"was killed by {_signal_name(-st)}" if st < 0 else f"exited with status {st}"
        rest = f"; then rank {errors[0][1]} failed with {errors[0][2]}" if errors else ""
        return f"rank {r} (pid {pid}) {how}{rest}; mpiexec stopped the other ranks"
    if errors:
        return f"rank {errors[0][1]} failed with {errors[0][2]}{then}"
    m = _ABORT.search(output)
    if m:
        return (f"rank {int(m.group(2))} aborted the job (MPI_Abort code {int(m.group(1))}); "
                f"its error is printed above")
    m = _BANNER_PID.search(output)
    if m:
        pid, code = int(m.group(1)), int(m.group(3))
        who = f"rank {pids[pid]}" if pid in pids else "a process"
        return f"{who} (pid {pid}) ended with status {code}; mpiexec stopped the other ranks"
    return f"mpiexec exited with code {rc}"


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def launch(nproc: int, target: list[str], *, max_restarts: int = 0,
           hostfile: str | None = None, env=None) -> int:
    """Run ``target`` (argv after ``python``) on ``nproc`` ranks; returns the exit status.

    Args:
        nproc: number of ranks.
        target: e.g. ``["train.py", "--epochs", "2"]`` or ``["-m", "pkg.mod"]``.
        max_restarts: how many times to restart a failed job.
        hostfile: MPI hostfile for multi-host jobs.
        env: base environment (default ``os.environ``).
    """
    if nproc < 1:
        raise ValueError(f"ember run: --nproc must be >= 1, got {nproc}")
    if max_restarts < 0:
        raise ValueError(f"ember run: --max-restarts must be >= 0, got {max_restarts}")
    cmd = mpiexec_command(nproc, rankwrap.command(sys.executable, ["-u"] + list(target)),
                          hostfile)
    rc = 0
    for attempt in range(max_restarts + 1):
        with tempfile.TemporaryDirectory(prefix="ember-run-") as run_dir:
            run_env = dict(os.environ if env is None else env, EMBER_RUN_DIR=run_dir,
                           EMBER_RESTART_COUNT=str(attempt),
                           TORCHELASTIC_RESTART_COUNT=str(attempt))
            rc, why = _run_once(cmd, run_env, run_dir)
        if rc == 0:
            return 0
        sys.stderr.write(f"ember run: job failed: {why}\n")
        if attempt < max_restarts:
            sys.stderr.write(f"ember run: restarting ({attempt + 1} of {max_restarts} "
                             f"restarts)\n")
        sys.stderr.flush()
    return rc


def _run_once(cmd, env, run_dir) -> tuple[int, str]:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    scans = [_Scan(proc.stdout, sys.stdout.buffer), _Scan(proc.stderr, sys.stderr.buffer)]
    try:
        rc = proc.wait()
    except KeyboardInterrupt:   # NOTE: mpiexec got the Ctrl-C too and passes it on
        rc = proc.wait()
    for s in scans:
        s.thread.join(timeout=5)
    if rc == 0:
        return 0, ""
    return rc, diagnose(rc, scans[0].tail + scans[1].tail, _pids(run_dir),
                        _errors(run_dir), _exits(run_dir))


def main(argv=None) -> int:
    """``python -m ember.distributed.run --nproc N script.py ...``."""
    p = argparse.ArgumentParser(prog="ember run", description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(run_error=p.error)
    return run_from_args(p.parse_args(argv))


def run_from_args(args) -> int:
    """Launch from parsed ``ember run`` arguments."""
    target = (["-m", args.script] if args.module else [args.script]) + list(args.script_args)
    try:
        return launch(args.nproc, target, max_restarts=args.max_restarts,
                      hostfile=args.hostfile)
    except ValueError as e:     # NOTE: bad options: argparse's usage line and status 2
        args.run_error(str(e).removeprefix("ember run: "))
    except RuntimeError as e:   # no mpiexec
        print(f"ember run: error: {str(e).removeprefix('ember run: ')}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
