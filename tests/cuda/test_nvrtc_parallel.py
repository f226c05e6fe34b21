"""Compile time of CUDA graphs: shared kernels, one NVRTC program each, compiled in parallel.

``fuse_cuda`` names a kernel by a hash of its text, so groups with the same text (the
layers of a transformer, the AdamW updates of its parameters) share one kernel and one
module whatever their shapes; :func:`ember.codegen.cuda_cache.images` compiles distinct
sources on a thread pool into cubins kept in the kernel cache (checked like the PTX
entries); :mod:`ember.codegen._nvrtc_cupy` lets CuPy's NVRTC wrapper do the compiling
where ``cuda-bindings`` is missing; :func:`ember.codegen.cuda_cache.load_modules` loads a
GPU module from its cubin first (a fake ``cupy`` here).
"""
import os
import sys
import types
from dataclasses import replace

import numpy as np
import pytest

import ember as em
from ember import dtypes as dt
from ember.codegen import cache, cache_fs, cuda_cache, nvrtc
from ember.codegen.ir import InputSpec, Kernel, Load, OutSpec, Reduce, ReduceKernel, call
from ember.graph.passes.fuse_cuda import content_name
from test_cuda_fusion import gpu_like  # noqa: F401 - the GPU-like stand-in fixture

NVRTC = nvrtc.available() and bool(nvrtc.include_dirs())
needs_nvrtc = pytest.mark.skipif(not NVRTC, reason="NVRTC or the CUDA headers are not "
                                 "installed (pip install 'ember[nvrtc]')")
SRC = 'extern "C" __global__ void k_{n}(float *x) {{ x[threadIdx.x] *= {n}.f; }}\n'


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setattr(cuda_cache, "_memo", {})
    cache.forget_loaded()
    yield tmp_path / "kernels"
    cache.forget_loaded()


def _ew(shape, fn="exp"):
    nd = len(shape)
    return Kernel([InputSpec(dt.float32, (1,) * nd)], OutSpec(dt.float32, shape),
                  call(fn, Load(0)) * 2.0)


def test_a_kernel_is_named_by_its_text_not_its_shape():
    a, b = _ew((64, 33)), _ew((7,))
    assert content_name(a) == content_name(b)
    assert content_name(a) != content_name(_ew((64, 33), "log"))
    assert content_name(a).startswith("ember_fused_")
    r = ReduceKernel([InputSpec(dt.float32, (1, 1))], (8, 16), 1, [Reduce("sum", Load(0))],
                     None, OutSpec(dt.float32, (8,)))
    assert content_name(r) != content_name(replace(r, shape=(300, 16),
                                                                       out=OutSpec(
                                                                           dt.float32,
                                                                           (300,))))
    # NOTE: 300 rows of 16 get a thread each (strategy "thread"): other text, other name


def test_groups_with_one_text_share_a_module_and_run_with_their_own_shapes(
        gpu_like, monkeypatch):  # noqa: F811
    # NOTE: multi_launch would make the two launches one (tests/cuda/test_multi_launch.py)
    monkeypatch.setenv("EMBER_MULTI_LAUNCH", "0")
    sources, launches = gpu_like

    def f(x, y):
        return em.exp(x) * 2.0 + 1.0, em.exp(y) * 2.0 + 1.0
    x, y = em.randn(64, 33), em.randn(5, 7, 3)
    want = [v.numpy() for v in f(x, y)]
    cf = em.compile(f)
    xc, yc = x.to("cuda"), y.to("cuda")
    cf(xc, yc)                                   # traced (eager)
    got = [v.cpu().numpy() for v in cf(xc, yc)]
    report = str(cf.explain())
    assert "kernels 2" in report and "modules 1" in report, report
    ops = [n.op for g in cf.graphs() for n in g.nodes if type(n.op).__name__ == "CudaFusedOp"]
    assert len(ops) == 2 and ops[0].kernel.name == ops[1].kernel.name
    assert ops[0].module is ops[1].module                        # one source, one program
    assert {op.kernel.out.shape for op in ops} == {(64, 33), (5, 7, 3)}
    assert sum(ops[0].kernel.name in s for s in sources) == 1
    assert len(launches) == 2
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@needs_nvrtc
def test_images_compile_in_parallel_into_checked_cubin_entries(store):
    items = [(SRC.format(n=n), f"k{n}") for n in range(2, 6)]
    serial = [nvrtc.compile_cubin(s, n) for s, n in items]
    before = dict(cuda_cache.stats)
    got = cuda_cache.images(items + items[:1], "sm_90", "cubin", nthreads=3)
    assert got == serial + serial[:1]                 # same machine code as one by one
    assert cuda_cache.stats["compiled"] == before["compiled"] + 4
    names = sorted(p for p in os.listdir(store) if p.endswith(".cubin"))
    assert len(names) == 4
    assert all(os.stat(store / p).st_mode & 0o777 == 0o600 for p in names)
    cuda_cache._memo.clear()                          # a new process: read back, checked
    assert cuda_cache.images(items, "sm_90", "cubin", nthreads=3) == serial
    assert cuda_cache.stats["loaded"] == before["loaded"] + 4
    assert cuda_cache.stats["compiled"] == before["compiled"] + 4
    with open(store / names[0], "wb") as f:           # corrupt one: rebuilt
        f.write(b"garbage")
    cuda_cache._memo.clear()
    assert cuda_cache.images(items, "sm_90", "cubin") == serial
    assert cuda_cache.stats["compiled"] == before["compiled"] + 5


@needs_nvrtc
def test_a_failing_source_raises_after_the_others_compiled(store):
    items = [(SRC.format(n=7), "k7"), ("this is not CUDA", "bad"), (SRC.format(n=8), "k8")]
    with pytest.raises(nvrtc.NVRTCError, match="bad"):
        cuda_cache.images(items, "sm_90", "cubin", nthreads=3)
    assert (SRC.format(n=8), "sm_90", (), "cubin") in cuda_cache._memo


@needs_nvrtc
def test_cubin_entries_are_counted_and_removed_with_the_cache(store):
    cuda_cache.cubin(SRC.format(n=9), "k9")
    fd = cache_fs.open_dir(str(store), create=False)
    try:
        entries, _ = cache_fs.scan(fd)
        (key,) = entries
        assert entries[key][0] > 0 and entries[key][1] > 0      # size, LRU time
        cache_fs.remove_entry(fd, key)
    finally:
        os.close(fd)
    assert not [p for p in os.listdir(store) if not p.startswith(".")]


class _CupyNVRTCOverBindings:
    """``cupy_backends.cuda.libs.nvrtc``'s API (values, exceptions) over cuda-bindings."""

    class NVRTCError(RuntimeError):
        def __init__(self, status):
            super().__init__(f"NVRTC error {status}")
            self.status = status

    def __init__(self, ptx_type=bytes):
        from cuda.bindings import nvrtc as nv
        self.nv, self.ptx_type = nv, ptx_type      # getPTX: str in older CuPy, bytes now

    def _ok(self, res):
        err = res[0] if isinstance(res, tuple) else res
        if int(err):
            raise self.NVRTCError(int(err))
        return res[1] if isinstance(res, tuple) and len(res) > 1 else None

    def getVersion(self):
        _, major, minor = self.nv.nvrtcVersion()
        return major, minor

    def createProgram(self, src, name, headers, include_names):
        return self._ok(self.nv.nvrtcCreateProgram(src.encode(), name.encode(), 0, [], []))

    def compileProgram(self, prog, options):
        enc = [o.encode() for o in options]
        self._ok(self.nv.nvrtcCompileProgram(prog, len(enc), enc))

    def _get(self, prog, what):
        n = self._ok(getattr(self.nv, f"nvrtcGet{what}Size")(prog))
        buf = b" " * max(n, 2)
        self._ok(getattr(self.nv, f"nvrtcGet{what}")(prog, buf))
        return buf[:n]

    def getPTX(self, prog):
        ptx = self._get(prog, "PTX").rstrip(b"\0")
        return ptx if self.ptx_type is bytes else ptx.decode()

    def getCUBIN(self, prog):
        return self._get(prog, "CUBIN")

    def getProgramLog(self, prog):
        return self._get(prog, "ProgramLog").rstrip(b"\0").decode()

    def destroyProgram(self, prog):
        self._ok(self.nv.nvrtcDestroyProgram(prog))


@needs_nvrtc
@pytest.mark.parametrize("ptx_type", [bytes, str])
def test_cupys_nvrtc_wrapper_compiles_the_same_code(monkeypatch, ptx_type):
    pytest.importorskip("cuda.bindings")
    from ember.codegen._nvrtc_cupy import CupyNVRTC
    want_ptx, want_cubin = nvrtc.compile_ptx(SRC.format(n=3), "k3"), \
        nvrtc.compile_cubin(SRC.format(n=3), "k3")
    wrapped = CupyNVRTC(_CupyNVRTCOverBindings(ptx_type))
    monkeypatch.setattr(nvrtc, "_bindings", lambda: (wrapped, wrapped.nvrtcVersion()[1:]))
    assert nvrtc.binding() == "cupy_backends.cuda.libs.nvrtc"
    assert nvrtc.compile_ptx(SRC.format(n=3), "k3") == want_ptx
    assert nvrtc.compile_cubin(SRC.format(n=3), "k3") == want_cubin
    with pytest.raises(nvrtc.NVRTCError, match="(?s)broken.*error"):
        nvrtc.compile_ptx('extern "C" __global__ void k() { undeclared(); }', "broken")


class _FakeCupy(types.ModuleType):
    """``cupy`` as far as :func:`cuda_cache._cupy_module` reaches: a device, ``Module``
    (records what it loads; refuses ``refuse``) and ``RawModule``."""

    def __init__(self, refuse=()):
        super().__init__("cupy")
        loaded, self.raw = [], []

        class Module:
            def load(self, data):
                if any(data.startswith(p) for p in refuse):
                    raise RuntimeError("CUDA_ERROR_INVALID_IMAGE")
                loaded.append(data)

        class Device:
            id, compute_capability = 0, "90"

            def __init__(self, index=0):
                pass
        self.loaded = loaded
        self.cuda = types.SimpleNamespace(Device=Device,
                                          function=types.SimpleNamespace(Module=Module))
        self.RawModule = lambda code, options: self.raw.append(code) or "raw"


@needs_nvrtc
@pytest.mark.parametrize("refuse, kind", [((), "cubin"), ((b"\x7fELF",), "ptx")])
def test_gpu_modules_load_cubins_compiled_in_parallel(store, monkeypatch, refuse, kind):
    fake = _FakeCupy(refuse)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    cuda_cache.arch.cache_clear()
    cuda_cache.sm.cache_clear()
    try:
        items = [(SRC.format(n=n), f"k{n}") for n in (11, 12, 13)]
        before = dict(cuda_cache.stats)
        mods = cuda_cache.load_modules(items)
        assert len(mods) == 3 and not fake.raw
        assert cuda_cache.stats[f"{kind}_modules"] == before[f"{kind}_modules"] + 3
        if kind == "cubin":           # machine code straight from NVRTC: no driver JIT
            assert fake.loaded == [nvrtc.compile_cubin(s, n) for s, n in items]
        else:                         # a driver refusing the cubin gets the PTX
            assert all(b".entry k_1" in d for d in fake.loaded)
    finally:
        cuda_cache.arch.cache_clear()
        cuda_cache.sm.cache_clear()


def test_adamw_scalars_of_a_gpu_graph_run_in_generated_kernels(gpu_like):  # noqa: F811
    """AdamW's per-parameter bias corrections (0-d CPU values) fuse into one group per
    parameter, not ~8 ops each; the groups run on the host (``HostFusedOp``: NumPy, where
    the executor keeps a GPU graph's CPU values), not as 0-d CUDA kernels each needing a
    copy of the step count to the GPU and of the new one back."""
    def losses(dev):
        em.manual_seed(0)
        m = em.nn.Sequential(em.nn.Linear(16, 32), em.nn.GELU(), em.nn.Linear(32, 4)).to(dev)
        opt = em.optim.AdamW(m.parameters(), lr=1e-2)
        x, y = em.randn(8, 16).to(dev), em.randint(0, 4, (8,)).to(dev)

        def step(x, y):
            loss = em.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
        f = em.compile(step)
        out = [float(f(x, y)) for _ in range(4)]
        return out, f, opt
    want, _, _ = losses("cpu")
    got, f, opt = losses("cuda")
    np.testing.assert_allclose(got, want, rtol=1e-5)
    graph = f.graphs()[-1]
    host = [n.op for n in graph.nodes if n.outs and n.outs[0].ndim == 0 and
            n.outs[0].device.type == "cpu"]
    # NOTE: a lone op left per parameter (-step_size, read after the group closed) is a
    # host step too; multi_launch makes the 4 chains one (HostBatchOp: one NumPy pass)
    assert {type(op).__name__ for op in host if op.name != "neg"} <= {"HostFusedOp",
                                                                      "HostBatchOp"}
    assert sum(op.name == "neg" for op in host) <= 4
    scalar = [op for op in host if type(op).__name__ in ("HostFusedOp", "HostBatchOp") and
              "pow" in op.ops]
    assert sum(len(op.sizes) if hasattr(op, "sizes") else 1 for op in scalar) == 4
    assert not [n for n in graph.nodes if type(n.op).__name__ == "CudaFusedOp" and
                any(o.device.type == "cpu" for o in n.outs)]
    for st in opt.state.values():                # the step counts went back to the host
        assert st["step"].device.type == "cpu" and float(st["step"]) == 4.0
