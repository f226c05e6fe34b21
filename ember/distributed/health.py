"""Who is where when a collective times out: a probe among the ranks of a group.

A rank whose collective timed out sends a small *query* to every other rank of the
group (over the group's control communicator, never mixed with data). Every rank
waiting in a collective answers from its polling loop with what it is waiting in (op,
call number, ``file:line``). Ranks that do not answer within a short grace period are
not in any collective: dead, exited, or stuck in their own code. The timeout error
names both kinds, so a hang always ends with the ranks and the calls involved.
"""
from __future__ import annotations

import json
import time

import numpy as np

QUERY_TAG, REPLY_TAG = 32766, 32767
_REPLY_BYTES = 2048
_sending: list = []    # replies in flight (buffers must outlive their requests)


def serve(call: dict, started: float) -> None:
    """Answer pending queries of any group with ``call`` (what this rank waits in)."""
    from .groups import _State
    _sending[:] = [s for s in _sending if not s[0].test()]
    for g in _State.groups:
        ctrl = g.ctrl
        if ctrl is None:
            continue
        src = ctrl.poll(np.zeros(8, np.uint8), QUERY_TAG)
        while src is not None:
            state = dict(call, waiting=round(time.monotonic() - started, 1))
            buf = _pack(state)
            _sending.append((ctrl.send(buf, src, REPLY_TAG), buf))
            src = ctrl.poll(np.zeros(8, np.uint8), QUERY_TAG)


def _pack(obj) -> np.ndarray:
    data = json.dumps(obj).encode()[:_REPLY_BYTES]
    buf = np.zeros(_REPLY_BYTES, np.uint8)
    buf[:len(data)] = np.frombuffer(data, np.uint8)
    return buf


def probe(grp, call: dict, started: float, grace: float) -> dict:
    """Ask every other rank of ``grp`` what it is doing.

    Returns:
        ``{global rank: state dict, or None when it did not answer within grace}``.
    """
    ctrl = grp.ctrl
    peers = [r for r in range(ctrl.size) if r != ctrl.rank]
    query = np.zeros(8, np.uint8)
    sends = [ctrl.send(query, p, QUERY_TAG) for p in peers]
    inbox = {p: np.zeros(_REPLY_BYTES, np.uint8) for p in peers}
    recvs = {p: ctrl.recv(inbox[p], p, REPLY_TAG) for p in peers}
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not all(q.test() for q in recvs.values()):
        serve(call, started)
        time.sleep(1e-3)
    _sending.extend((s, query) for s in sends)
    return {grp.ranks[p]: (json.loads(bytes(inbox[p]).rstrip(b"\0").decode())
                           if recvs[p].test() else None) for p in peers}


def explain(grp, call: dict, states: dict) -> str:
    """Lines naming the ranks that never arrived and what the others wait in."""
    from .debug import describe_call
    absent = [r for r, s in states.items() if s is None]
    lines = []
    if absent:
        lines.append(f"rank(s) {absent} did not reach any collective (dead, exited, or "
                     f"still busy in their own code)")
    for r, s in sorted(states.items()):
        if s is None:
            continue
        same = s["op"] == call["op"] and s["seq"] == call["seq"]
        lines.append(f"rank {r} is waiting in {describe_call(s)} (collective #{s['seq']})"
                     + ("" if same else " -- a different call: the ranks are out of step"))
    return "\n  ".join(lines)
