"""Host-path details of GPU launches checked without a GPU (issue 21: host-bound steps).

``cuda_gemm._cublas`` imports cuBLAS's bindings once and passes alpha/beta as the host
addresses of module-lifetime float32 scalars, read once (``ndarray.ctypes`` per call was
~2-5 us, twice a GEMM). A fake ``cupy``/``cupy_backends`` records the calls.
"""
import ctypes
import sys
import types

from ember.codegen import cuda_gemm as cg


class _Arr:
    def __init__(self, ptr):
        self.data = types.SimpleNamespace(ptr=ptr)


def _fakes(calls):
    cublas = types.SimpleNamespace(
        gemmEx=lambda *a: calls.append(("gemmEx", a)),
        gemmStridedBatchedEx=lambda *a: calls.append(("batched", a)),
        setStream=lambda h, s: calls.append(("setStream", (h, s))))
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.cublas = cublas
    handles = iter(range(100, 200))
    cupy = types.ModuleType("cupy")
    streams = iter(range(7000, 7100))
    cupy.cuda = types.SimpleNamespace(device=types.SimpleNamespace(
        get_cublas_handle=lambda: next(handles)),
        get_current_stream=lambda: types.SimpleNamespace(ptr=next(streams)))
    return {"cupy": cupy, "cupy_backends": types.ModuleType("cupy_backends"),
            "cupy_backends.cuda": types.ModuleType("cupy_backends.cuda"),
            "cupy_backends.cuda.libs": libs}


def _plan(fn):
    return dict(fn=fn, transa=0, transb=1, m=4, n=5, k=6, A=_Arr(1000), B=_Arr(2000),
                C=_Arr(3000), type=2, lda=4, ldb=6, ldc=4, compute=68, strideA=24,
                strideB=30, strideC=20, batch=3)


def test_cublas_call_reads_alpha_beta_and_bindings_once(monkeypatch):
    calls = []
    for name, mod in _fakes(calls).items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(cg, "_CUBLAS", ())
    cg._cublas(_plan("gemmEx"))
    for name in ("cupy", "cupy_backends.cuda.libs"):    # no import on later calls
        monkeypatch.delitem(sys.modules, name)
    cg._cublas(_plan("gemmStridedBatchedEx"))
    # each GEMM on the current stream (a side stream's, a CUDA graph capture's)
    assert calls[0] == ("setStream", (100, 7000)) and calls[2] == ("setStream", (101, 7001))
    (f1, a1), (f2, a2) = calls[1], calls[3]
    assert f1 == "gemmEx" and f2 == "batched"
    assert a1[0] == 100 and a2[0] == 101            # the current device's handle each call
    assert a1[1:6] == (0, 1, 4, 5, 6)
    assert ctypes.c_float.from_address(a1[6]).value == 1.0
    assert a1[7:10] == (1000, 2, 4) and a1[10:13] == (2000, 2, 6)
    assert ctypes.c_float.from_address(a1[13]).value == 0.0
    assert a1[14:] == (3000, 2, 4, 68, cg.CUBLAS_GEMM_DEFAULT_TENSOR_OP)
    assert a2[6] == a1[6] and a2[7:11] == (1000, 2, 4, 24) and a2[11:15] == (2000, 2, 6, 30)
    assert a2[15] == a1[13] and a2[16:] == (3000, 2, 4, 20, 3, 68,
                                            cg.CUBLAS_GEMM_DEFAULT_TENSOR_OP)


def test_attention_backward_stride_arrays_are_made_once_per_layout(monkeypatch):
    # backward_plans' two device stride arrays were a host-to-device copy each call; they
    # are kept per layout: a second call of one layout passes the same arrays, another
    # layout gets its own, each holding that call's strides
    import numpy as np
    from ember.codegen import cuda_attention as ca
    monkeypatch.setattr(ca, "_stride_arrays", {})
    rng = np.random.default_rng(0)

    def plans(shape, perm=None):
        q, k, v, g, o = (rng.standard_normal(shape).astype(np.float16) for _ in range(5))
        if perm is not None:
            q = np.ascontiguousarray(q.transpose(perm)).transpose(np.argsort(perm))
        lse = np.zeros((2 * 3, shape[-2]), np.float32)
        launches, outs = ca.backward_plans(g, q, k, v, o, lse, 0.125, True, np)
        return launches[1][3][-1], launches[2][3][-1], q

    kv1, q1, _ = plans((2, 3, 16, 32))
    kv2, q2, _ = plans((2, 3, 16, 32))
    assert kv2 is kv1 and q2 is q1 and len(ca._stride_arrays) == 2
    kv3, q3, q = plans((2, 3, 16, 32), perm=(0, 2, 1, 3))     # q's heads interleaved
    assert kv3 is not kv1 and q3 is not q1 and len(ca._stride_arrays) == 4
    qs = [s // q.itemsize for s in q.strides[:3]]
    assert list(q3[:3]) == qs and list(kv3[:3]) == qs and list(kv1[:3]) == [3 * 512, 512, 32]
    assert kv1.dtype == np.int64 and len(kv1) == 18 and len(q1) == 15
