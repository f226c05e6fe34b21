"""Graph-level passes. Each is ``Graph -> (Graph, {what: count})`` and never edits its input.

The pipeline is one readable list; :func:`run_pipeline` runs it, verifying the graph
after every pass when ``EMBER_DEBUG`` is set (and printing the IR after each pass at
``EMBER_DEBUG=3``), and returns a report of what each pass changed.
"""
from __future__ import annotations

import os
import time

__all__ = ["PASSES", "DEFAULT_PASSES", "EXACT_PASSES", "register", "run_pipeline", "freeze"]

from .cast_gemm import cast_gemm
from .ce_rows import ce_rows
from .conv_gemm import conv_gemm
from .count_true import count_true
from .conv_gemm_bwd import conv_bwd
from .conv_gemm_fwd import conv_fwd
from .cse import cse
from .dce import dce
from .feature_major import feature_major
from .fold import fold
from .freeze import freeze
from .fuse import fuse
from .fuse_cuda import fuse_cuda
from .gemm_epilogue import gemm_epilogue
from .hfuse import hfuse
from .layout import layout
from .matmul import small_bmm, sum_rows
from .matmul_t import matmul_t
from .multi_launch import multi_launch
from .pad_gemm import pad_gemm
from .philox import philox
from .pool import pool
from .recast import recast
from .rewrite import fold_conv_affine, fuse_linear_act, rewrite
from .scatter_select import scatter_select
from .scatter_stack import scatter_stack
from .sdpa_layout import sdpa_layout, sdpa_out_layout
from .simplify import simplify, simplify_fast
from .take_rows import take_rows

#: name -> pass. Passes register here so pipelines can name them.
PASSES = {
    "simplify": simplify,            # exact algebraic identities (x*1, permute chains...)
    "simplify_fast": simplify_fast,  # + identities exact only up to rounding (log(exp(x)))
    "fold": fold,                    # constant subexpressions, by the ops' own kernels
    "cse": cse,                      # identical pure nodes become one
    "linear_act": fuse_linear_act,   # act(x @ w + b) as one node, in place (bitwise exact)
    "conv_affine": fold_conv_affine,  # conv + per-channel affine (eval BatchNorm) -> conv
    "rewrite": rewrite,              # conv_affine then linear_act
    "scatter_stack": scatter_stack,  # sums of slot scatters (unbind's VJP) -> one stack
    "scatter_select": scatter_select,  # one-hot scatter -> where(idx == iota, g, 0)
    "take_rows": take_rows,          # one value per row (targets' logits) by one C loop
    "feature_major": feature_major,  # linear-layer chains computed transposed (W @ x.T)
    "count_true": count_true,        # sum of a whole boolean value -> count_nonzero
    "gemm_epilogue": gemm_epilogue,  # SGD's w - lr * g, bias + relu in GEMM tile stores
    "ce_rows": ce_rows,              # a small classifier's cross-entropy + backward: one C call
    "sdpa_layout": sdpa_layout,      # dq, dk, dv written straight into qkv's gradient
    "sdpa_out_layout": sdpa_out_layout,  # attention's output in its permuted layout
    "small_bmm": small_bmm,          # stacks of small matmuls (attention) -> one C loop
    "sum_rows": sum_rows,            # sums over all leading dims -> one column-sum kernel or GEMV
    "matmul_t": matmul_t,            # 2-D transposes read through BLAS flags (one node fewer)
    "hfuse": hfuse,                  # sibling matmuls on one x -> one GEMM + slices
    "layout": layout,                # NCHW or NHWC per conv, by a measurement
    "fuse": fuse,                    # elementwise/reduction groups -> generated C kernels
    "fuse_cuda": fuse_cuda,          # the same groups -> CUDA kernels (graphs on a GPU)
    "philox": philox,                # a GPU graph's random draws: Philox on the device
    "multi_launch": multi_launch,    # independent launches of one CUDA kernel -> one launch
    "pad_gemm": pad_gemm,            # a GPU value several padded GEMMs read: padded once
    "pool": pool,                    # max-pool fwd/bwd, unfold/fold as C loops
    "conv_gemm": conv_gemm,          # conv GEMMs over channel-first columns: one GEMM each
    "conv_bwd": conv_bwd,            # a separate backward graph's conv gradients, per image
    "conv_fwd": conv_fwd,            # a conv whose columns are saved: chunks of images
    "recast": recast,                # autocast weight copies cast again where read late
    "cast_gemm": cast_gemm,          # bf16 matmul of cast(w): w rounded while packed (AMX)
    "dce": dce,                      # values no output needs
}

#: The exact pipeline: every pass here is exact, so a compiled training step gives
#: bitwise eager's results. simplify first (composing permute/reshape chains exposes
#: duplicates), fold, cse, then fusion on the deduplicated graph, then dce.
EXACT_PASSES = ["simplify", "fold", "cse", "scatter_stack", "sdpa_layout", "linear_act",
                "dce"]

#: The default pipeline of ``ember.compile``: the exact passes, with ``fuse`` (generated
#: C kernels) in place of ``linear_act``, and ``pool`` (C loops for im2col/col2im and
#: max pooling; before fuse, which would hide the relu masks it moves), then ``conv_gemm``
#: (each conv GEMM as one 2-D GEMM over channel-first columns; before it ``conv_fwd`` and
#: ``conv_bwd``, for the forward and backward graphs of one call, which pass the columns).
#: Fused float arithmetic rounds differently from
#: the unfused ops (fewer roundings, FMA, double accumulators): results match eager
#: within the dtype's tolerance, not bitwise. Opt-in (they may change float rounding):
#: conv_affine, rewrite, hfuse, layout, simplify_fast, small_bmm. Opt-in though exact:
#: sdpa_out_layout (slower than the copy it removes on the reference machine).
#: ``philox`` changes GPU graphs only (their draws generated on the device).
DEFAULT_PASSES = ["simplify", "fold", "cse", "scatter_stack", "sdpa_layout", "sum_rows",
                  "pool", "conv_fwd", "conv_bwd", "conv_gemm", "scatter_select", "take_rows",
                  "count_true", "feature_major", "gemm_epilogue", "ce_rows", "philox", "fuse",
                  "recast",
                  "cast_gemm", "matmul_t", "multi_launch", "pad_gemm", "dce"]


#: passes whose output runs generated C or host loops on the arrays: skipped for graphs on
#: a device without the ``host_kernels`` capability (CuPy arrays on a GPU).
HOST_PASSES = frozenset({"sdpa_out_layout", "small_bmm", "sum_rows", "layout",
                         "fuse", "pool", "conv_gemm", "conv_fwd", "conv_bwd", "take_rows",
                         "cast_gemm", "feature_major", "count_true", "gemm_epilogue",
                         "ce_rows"})
#: on a device with the ``cuda_kernels`` capability (a GPU), these host passes run as
#: their CUDA counterparts instead of being skipped.
DEVICE_PASSES = {"cuda_kernels": {"fuse": "fuse_cuda"}}


def _host_kernels(graph) -> bool:
    return all(b.has("host_kernels") for b in _graph_backends(graph))


def _graph_backends(graph) -> list:
    from ...device.base import get_backend
    devs = {v.device for v in graph.inputs if v.device is not None}
    return [get_backend(d) for d in devs]


def _device_passes(graph) -> dict:
    """``{host pass: its replacement}`` for the graph's devices: a device has the
    capability, every other has it or host kernels (a CPU scalar beside GPU tensors)."""
    bes = _graph_backends(graph)
    out: dict = {}
    for cap, table in DEVICE_PASSES.items():
        if any(b.has(cap) for b in bes) and all(b.has(cap) or b.has("host_kernels")
                                                 for b in bes):
            out.update(table)
    return out


def register(name: str, fn, default_position: int | None = None) -> None:
    """Make ``fn`` available to pipelines as ``name``; optionally add it to the default."""
    PASSES[name] = fn
    if default_position is not None and name not in DEFAULT_PASSES:
        DEFAULT_PASSES.insert(default_position, name)


def debug_level() -> int:
    v = os.environ.get("EMBER_DEBUG", "0")
    try:
        return int(v)
    except ValueError:
        return 1


def run_pipeline(graph, passes, verify: bool | None = None):
    """Run ``passes`` (names or callables) in order; returns ``(graph, report)``."""
    level = debug_level()
    verify = level > 0 if verify is None else verify
    if verify:
        graph.verify()
    report = []
    host = _host_kernels(graph)
    swap = {} if host else _device_passes(graph)
    for p in passes:
        p = swap.get(p, p) if isinstance(p, str) else p
        fn = PASSES[p] if isinstance(p, str) else p
        name = p if isinstance(p, str) else getattr(fn, "__name__", "pass")
        if not host and name in HOST_PASSES:
            report.append({"pass": name, "changed": {"skipped (no host kernels on the "
                                                     "device)": 1}, "nodes": len(graph.nodes),
                           "ms": 0.0})
            continue
        t0 = time.perf_counter()
        graph, changed = fn(graph)
        ms = (time.perf_counter() - t0) * 1e3
        if verify:
            graph.verify()
        report.append({"pass": name, "changed": dict(changed), "nodes": len(graph.nodes),
                       "ms": ms})
        if level >= 3:
            print(f"# after {name}: {changed}\n{graph}")
    return graph, report
