"""Chrome trace event format (``chrome://tracing``, https://ui.perfetto.dev): one complete
(``"ph": "X"``) event per recorded interval, ``ts``/``dur`` in µs from the profile's start,
on the recording thread's ``tid`` — so nesting is by time containment, as the viewers expect.
"""
from __future__ import annotations

import json
import os


def trace_dict(rec, events) -> dict:
    """The trace of Recorder ``rec``'s ``events`` as a JSON-ready dict."""
    import socket
    base = rec.start_ns
    out = [{"ph": "M", "name": "process_name", "pid": rec.pid, "tid": 0,
            "args": {"name": "python"}},
           {"ph": "M", "name": "thread_name", "pid": rec.pid, "tid": rec.tid,
            "args": {"name": f"thread {rec.tid} (python)"}}]
    # NOTE: parents first at equal start (the viewers stack events in file order)
    for ev in sorted(events, key=lambda e: (e.start_ns, -e.end_ns, -e.id)):
        args = {}
        if ev.input_shapes is not None:
            args["Input Dims"] = ev.input_shapes
        if ev.stack:
            args["Call stack"] = ";".join(ev.stack)
        if rec.alloc is not None:
            args["Memory (bytes)"] = ev.mem
        out.append({"ph": "X", "cat": ev.cat, "name": ev.name, "pid": rec.pid,
                    "tid": ev.tid, "ts": (ev.start_ns - base) / 1e3,
                    "dur": (ev.end_ns - ev.start_ns) / 1e3, "args": args})
    return {"schemaVersion": 1, "displayTimeUnit": "ms", "host_name": socket.gethostname(),
            "baseTimeNanoseconds": base, "traceEvents": out}


def write(path, rec, events) -> str:
    """Write the trace to ``path`` (``.gz``: gzip-compressed), atomically; returns ``path``."""
    path = os.fspath(path)
    data = json.dumps(trace_dict(rec, events)).encode()
    tmp = f"{path}.tmp{os.getpid()}"
    if path.endswith(".gz"):
        import gzip
        data = gzip.compress(data)
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path
