"""Where a collective was called from, and the cross-rank checks of debug mode.

With ``EMBER_DISTRIBUTED_DEBUG=1`` (read at ``init_process_group``) every collective
first exchanges a small JSON *fingerprint* — op, shapes, dtypes, root, reduce op and
the user's ``file:line`` — with every other rank of the group over a separate
communicator (point-to-point, so a timeout knows exactly which ranks never arrived).
Ranks that disagree all raise the same :class:`DistributedError` listing every rank's
call instead of hanging or silently mixing data (PyTorch's
``TORCH_DISTRIBUTED_DEBUG=DETAIL``, plus the source line).
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from .backend import DistributedError

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # .../ember
_FP_BYTES = 2048
_TAG_SPACE = 32000   # NOTE: tags above are health's probes


def enabled() -> bool:
    """True when ``EMBER_DISTRIBUTED_DEBUG`` is set to a non-zero value."""
    return os.environ.get("EMBER_DISTRIBUTED_DEBUG", "0") not in ("", "0")


def caller_site() -> str:
    """``file:line`` of the innermost frame outside the ``ember`` package."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PKG):
        f = f.f_back
    if f is None:
        return "<ember>"
    return f"{f.f_code.co_filename}:{f.f_lineno}"


def describe_call(call: dict) -> str:
    """``all_reduce(shapes=[(4,)], dtypes=[float32], op=SUM) at train.py:12``."""
    keys = sorted(call, key=lambda k: (k not in ("shape", "dtype"), k != "shape", k))
    args = ", ".join(f"{k}={call[k]}" for k in keys
                     if k not in ("op", "where", "seq", "waiting"))
    return f"{call['op']}({args}) at {call['where']}"


def check_consistent(group, call: dict) -> None:
    """Exchange ``call`` with every rank of ``group``; raise if any differs or is missing.

    Args:
        group: the ProcessGroup (uses its control communicator ``ctrl``).
        call: the JSON-able fingerprint; ``where`` and ``seq`` are not compared.

    Raises:
        DistributedError: on every rank when the calls differ; on a rank whose peers
            did not arrive within the group's timeout, naming those peers.
    """
    comm = group.ctrl
    if comm.size == 1:
        return
    mine = json.dumps(call, sort_keys=True).encode()[:_FP_BYTES]
    out = np.zeros(_FP_BYTES, np.uint8)
    out[:len(mine)] = np.frombuffer(mine, np.uint8)
    tag = call["seq"] % _TAG_SPACE
    peers = [r for r in range(comm.size) if r != comm.rank]
    inbox = {r: np.zeros(_FP_BYTES, np.uint8) for r in peers}
    sends = [comm.send(out, r, tag) for r in peers]
    recvs = {r: comm.recv(inbox[r], r, tag) for r in peers}
    _wait_all(group, call, sends, recvs)
    calls = {comm.rank: call}
    for r in peers:
        calls[r] = json.loads(bytes(inbox[r]).rstrip(b"\0").decode())
    keys = [{k: v for k, v in c.items() if k not in ("where",)} for c in calls.values()]
    if any(k != keys[0] for k in keys):
        lines = [f"  rank {group.ranks[r]}: {describe_call(calls[r])} (call #{calls[r]['seq']})"
                 for r in sorted(calls)]
        raise DistributedError(
            f"[rank {group.ranks[comm.rank]}] ranks called different collectives (or with "
            f"different shapes/dtypes/arguments) on the group of ranks {group.ranks}:\n"
            + "\n".join(lines))


def _wait_all(group, call, sends, recvs) -> None:
    from . import health
    from .backend import Work
    start = time.monotonic()

    def error(elapsed):
        absent = [group.ranks[r] for r, q in recvs.items() if not q.test()]
        return DistributedError(
            f"[rank {group.ranks[group.ctrl.rank]}] {describe_call(call)} timed out after "
            f"{elapsed:.1f} s: rank(s) {absent} of the group {group.ranks} never reached a "
            f"collective #{call['seq']} (they died, are stuck, or called fewer collectives)")
    Work(list(recvs.values()) + list(sends), timeout=group.timeout, on_timeout=error,
         poll=lambda: health.serve(call, start)).wait()
