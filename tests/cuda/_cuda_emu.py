"""Run CUDA C kernels on the CPU: the kernel text compiled by g++ under a small shim.

Each CUDA thread is a fiber (``ucontext``: its own stack, switched cooperatively in the
calling OS thread); a block's threads run together — each runs until it waits at a
barrier (``__syncthreads`` is a barrier of the block; warp shuffles and ballots exchange
values through a per-warp buffer between two barriers of the warp), then the next one
runs — and blocks one after another, so ``__shared__`` arrays (function-local statics
here) belong to the running block. Fibers, not OS threads: a barrier costs a few context
switches in one thread, not a wake-up of every thread of the block by the kernel (CI has
two cores; the emulated kernels wait at barriers thousands of times). It runs
the very text NVRTC compiles — index arithmetic, masks, shuffles, barriers, shared-memory
staging — on NumPy arrays, where no GPU is. Tensor-core fragments (``mma.sync``,
``ldmatrix``: :mod:`ember.codegen.cuda_mma`) are computed from their documented layouts
(``EMBER_EMU`` is defined, so the kernel text's inline-PTX versions drop out). Slow (every thread of a block runs
in turn), so tests keep the sizes small. Needs g++ with C++20 and ``<ucontext.h>``;
:func:`available` says whether it works.

Compiled libraries are kept by content (a hash of the text, the compiler and its flags)
in one folder, and the shim's headers are compiled once into a precompiled header there:
a suite compiled ~300 libraries, a third of them twice, each paying ~0.4 s for the C++20
headers alone. The folder is ``EMBER_EMU_CACHE`` (``tests/conftest.py`` sets it to one
folder per test run, shared by the xdist workers), else the ``workdir`` a test passes.
Files appear by atomic rename, so a worker never loads another's half-written library.

Not modelled: memory coalescing, bank conflicts, timing; the float arithmetic is the
host's (``expf``/``logf`` of glibc, no fast-math), so results match the GPU's within
rounding, not bitwise.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

SHIM = r"""
#include <cstdint>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <ucontext.h>
#include <vector>
#include <memory>
#include <algorithm>
using std::min; using std::max;
struct dim3 { unsigned x = 1, y = 1, z = 1; };
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
struct uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
#define __shared__ static
/* fibers: the scheduler (emu_launch) resumes each unfinished thread of the block in turn;
   a thread waiting at a barrier whose phase has not ended hands back at once */
static thread_local ucontext_t emu_sched;
static thread_local ucontext_t *emu_self;
static inline void emu_yield() { swapcontext(emu_self, &emu_sched); }
struct EmuBarrier {
    int expected, count = 0;
    unsigned phase = 0;
    explicit EmuBarrier(int n) : expected(n) {}
    void arrive_and_wait() {
        const unsigned mine = phase;
        if (++count == expected) { count = 0; phase++; return; }
        while (phase == mine) emu_yield();
    }
    void arrive_and_drop() {   /* a finished thread leaves the barrier */
        if (--expected > 0 && count == expected) { count = 0; phase++; }
    }
};
struct EmuWarp { std::unique_ptr<EmuBarrier> bar; unsigned long long buf[32];
                 unsigned frag[32][6]; const uint16_t *rows[32]; };
static thread_local EmuWarp *emu_w;
static thread_local int emu_lane;
static EmuBarrier *emu_block;
static inline void __syncthreads() { emu_block->arrive_and_wait(); }
template <typename T> static T emu_xchg(T v, int src) {
    std::memcpy(&emu_w->buf[emu_lane], &v, sizeof(T));
    emu_w->bar->arrive_and_wait();
    T r; std::memcpy(&r, &emu_w->buf[src & 31], sizeof(T));
    emu_w->bar->arrive_and_wait();
    return r;
}
template <typename T> static T __shfl_sync(unsigned, T v, int src) { return emu_xchg(v, src); }
template <typename T> static T __shfl_xor_sync(unsigned, T v, int m) {
    return emu_xchg(v, emu_lane ^ m); }
template <typename T> static T __shfl_down_sync(unsigned, T v, unsigned d) {
    const int s = emu_lane + (int)d; return emu_xchg(v, s < 32 ? s : emu_lane); }
static unsigned __ballot_sync(unsigned, int p) {
    unsigned bits = 0;
    for (int l = 0; l < 32; l++) bits |= (emu_xchg((unsigned)(p != 0), l) ? 1u : 0u) << l;
    return bits;
}
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
/* round-to-nearest arithmetic intrinsics: the host's IEEE operations (x86-64 SSE, -O0) */
#define EMU_RN(p, T) \
    static inline T __##p##add_rn(T a, T b) { return a + b; } \
    static inline T __##p##sub_rn(T a, T b) { return a - b; } \
    static inline T __##p##mul_rn(T a, T b) { return a * b; } \
    static inline T __##p##div_rn(T a, T b) { return a / b; } \
    static inline T __##p##sqrt_rn(T a) { return std::sqrt(a); }
EMU_RN(f, float)
EMU_RN(d, double)
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };
static inline float __half2float(__half h) { _Float16 t; std::memcpy(&t, &h, 2); return (float)t; }
static inline __half __float2half_rn(float f) { _Float16 t = (_Float16)f; __half h;
    std::memcpy(&h, &t, 2); return h; }
static inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.x << 16;
    float f; std::memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { uint32_t u; std::memcpy(&u, &f, 4);
    __nv_bfloat16 b; if (std::isnan(f)) { b.x = 0x7fc0; return b; }
    u += 0x7fffu + ((u >> 16) & 1u); b.x = (uint16_t)(u >> 16); return b; }
/* tensor-core fragments (ember/codegen/cuda_mma.py's layouts): each lane deposits its
   registers in the warp's buffer, one warp barrier, each lane computes its own outputs */
#define EMBER_EMU 1
static inline float emu_h2f(uint16_t v) { __half h{v}; return __half2float(h); }
static inline float emu_b2f(uint16_t v) { __nv_bfloat16 h{v}; return __bfloat162float(h); }
static inline uint16_t emu_half(const unsigned *f, int reg, int hi) {
    return (uint16_t)(hi ? f[reg] >> 16 : f[reg] & 0xffffu); }
template <typename Cvt> static void emu_mma(float *c, const unsigned *a, const unsigned *b,
                                            Cvt cvt) {
    unsigned *mine = emu_w->frag[emu_lane];
    for (int i = 0; i < 4; i++) mine[i] = a[i];
    mine[4] = b[0]; mine[5] = b[1];
    emu_w->bar->arrive_and_wait();
    const int g = emu_lane >> 2, t = emu_lane & 3;
    float out[4];
    for (int i = 0; i < 4; i++) {
        const int r = g + 8 * (i >> 1), n = 2 * t + (i & 1);
        double s = c[i];
        for (int k = 0; k < 16; k++) {
            const float av = cvt(emu_half(emu_w->frag[(r & 7) * 4 + ((k & 7) >> 1)],
                                          (r >> 3) + 2 * (k >> 3), k & 1));
            const float bv = cvt(emu_half(emu_w->frag[n * 4 + ((k & 7) >> 1)],
                                          4 + (k >> 3), k & 1));
            s += (double)av * (double)bv;
        }
        out[i] = (float)s;
    }
    emu_w->bar->arrive_and_wait();
    for (int i = 0; i < 4; i++) c[i] = out[i];
}
static void ember_mma_f16(float *c, const unsigned *a, const unsigned *b) {
    emu_mma(c, a, b, emu_h2f); }
static void ember_mma_bf16(float *c, const unsigned *a, const unsigned *b) {
    emu_mma(c, a, b, emu_b2f); }
static void emu_ldsm(unsigned *r, const void *row, int nmat, bool trans) {
    emu_w->rows[emu_lane] = (const uint16_t *)row;
    emu_w->bar->arrive_and_wait();
    const int g = emu_lane >> 2, t = emu_lane & 3;
    for (int j = 0; j < nmat; j++) {
        uint16_t lo, hi;
        if (trans) { lo = emu_w->rows[8 * j + 2 * t][g]; hi = emu_w->rows[8 * j + 2 * t + 1][g]; }
        else { lo = emu_w->rows[8 * j + g][2 * t]; hi = emu_w->rows[8 * j + g][2 * t + 1]; }
        r[j] = lo | ((unsigned)hi << 16);
    }
    emu_w->bar->arrive_and_wait();
}
static void ember_ldsm_x4(unsigned *r, const void *p) { emu_ldsm(r, p, 4, false); }
static void ember_ldsm_x4_t(unsigned *r, const void *p) { emu_ldsm(r, p, 4, true); }
static void ember_ldsm_x2(unsigned *r, const void *p) { emu_ldsm(r, p, 2, false); }
static void ember_ldsm_x2_t(unsigned *r, const void *p) { emu_ldsm(r, p, 2, true); }
static unsigned ember_pack_f16(float lo, float hi) {
    return __float2half_rn(lo).x | ((unsigned)__float2half_rn(hi).x << 16); }
static unsigned ember_pack_bf16(float lo, float hi) {
    return __float2bfloat16_rn(lo).x | ((unsigned)__float2bfloat16_rn(hi).x << 16); }
/* each fiber's stack (mapped lazily by malloc: only the pages a kernel touches are real) */
static const size_t EMU_STACK = 256 * 1024;
static thread_local void (*emu_body)(void *);
static thread_local void *emu_fn;
static thread_local bool *emu_done;
static void emu_entry() {
    emu_body(emu_fn);
    emu_w->bar->arrive_and_drop();
    emu_block->arrive_and_drop();
    *emu_done = true;          /* returning resumes emu_sched (uc_link) */
}
/* one runner for every kernel (a template per kernel would be compiled once per kernel) */
static void emu_run(dim3 g, dim3 b, void (*body)(void *), void *fn) {
    gridDim = g; blockDim = b;
    const int n = (int)(b.x * b.y * b.z);
    emu_fn = fn;
    emu_body = body;
    std::vector<ucontext_t> ctx(n);
    std::vector<char *> stacks(n);
    for (int t = 0; t < n; t++) stacks[t] = (char *)std::malloc(EMU_STACK);
    std::unique_ptr<bool[]> done(new bool[n]);
    for (unsigned bz = 0; bz < g.z; bz++) for (unsigned by = 0; by < g.y; by++)
    for (unsigned bx = 0; bx < g.x; bx++) {
        EmuBarrier block(n);
        emu_block = &block;
        std::vector<EmuWarp> warps((n + 31) / 32);
        for (size_t w = 0; w < warps.size(); w++)
            warps[w].bar = std::make_unique<EmuBarrier>(std::min(32, n - (int)w * 32));
        blockIdx = {bx, by, bz};
        for (int t = 0; t < n; t++) {
            getcontext(&ctx[t]);
            ctx[t].uc_stack.ss_sp = stacks[t];
            ctx[t].uc_stack.ss_size = EMU_STACK;
            ctx[t].uc_link = &emu_sched;
            makecontext(&ctx[t], emu_entry, 0);
            done[t] = false;
        }
        for (int live = n; live > 0;) {
            for (int t = 0; t < n; t++) {
                if (done[t]) continue;
                threadIdx = {(unsigned)t % b.x, ((unsigned)t / b.x) % b.y,
                             (unsigned)t / (b.x * b.y)};
                emu_w = &warps[t / 32]; emu_lane = t % 32;
                emu_self = &ctx[t]; emu_done = &done[t];
                swapcontext(&emu_sched, &ctx[t]);
                live -= done[t];
            }
        }
    }
    for (int t = 0; t < n; t++) std::free(stacks[t]);
}
template <typename F> static inline void emu_launch(dim3 g, dim3 b, F f) {
    emu_run(g, b, [](void *p) { (*(F *)p)(); }, &f);
}
"""

_CTYPES = {"int": ctypes.c_int, "unsigned": ctypes.c_uint, "float": ctypes.c_float,
           "double": ctypes.c_double, "long long": ctypes.c_longlong,
           "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64, "long": ctypes.c_long}
_SIG = re.compile(r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*'
                  r'\(([^)]*)\)')


def sample(d, n: int, rng):
    """``n`` test values of Ember dtype ``d`` (small integers, normal floats, booleans)."""
    if d.np == np.bool_:
        return rng.integers(0, 2, n).astype(bool)
    if d.is_floating_point:
        return rng.standard_normal(n).astype(d.np)
    return rng.integers(-9, 9, n).astype(d.np)


def available() -> bool:
    return _compiler() is not None


@functools.lru_cache(maxsize=1)
def _compiler():
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "t.cpp")
        with open(src, "w") as f:
            f.write("#include <ucontext.h>\nint main(){ucontext_t c; getcontext(&c);"
                    " _Float16 h = (_Float16)1.0f; return (int)(float)h - 1;}\n")
        r = subprocess.run([cxx, "-std=c++20", "-pthread", src, "-o", os.path.join(d, "t")],
                           capture_output=True, timeout=120)
    return cxx if r.returncode == 0 else None


#: g++ flags of every library and of the precompiled shim (a PCH needs the same ones).
_FLAGS = ("-std=c++20", "-O0", "-fPIC", "-pthread", "-w")


@functools.lru_cache(maxsize=1)
def _toolchain_key() -> str:
    """The compiler's path, version and flags: part of each library's key."""
    r = subprocess.run([_compiler(), "--version"], capture_output=True, text=True, timeout=60)
    return f"{_compiler()}\n{r.stdout.splitlines()[0] if r.stdout else ''}\n{_FLAGS}\n"


def _cache_dir():
    """The shared folder of compiled libraries (``EMBER_EMU_CACHE``), or None."""
    d = os.environ.get("EMBER_EMU_CACHE")
    return d if d and os.path.isdir(d) and os.access(d, os.W_OK) else None


@functools.lru_cache(maxsize=None)
def _shim_header(folder: str):
    """The path of the shim as a header with its precompiled ``.gch`` beside it (made
    once per content), or None (the shim is pasted into each text then)."""
    key = hashlib.sha256((_toolchain_key() + SHIM).encode()).hexdigest()[:20]
    h = os.path.join(folder, f"emu_shim_{key}.h")
    if not os.path.exists(h + ".gch"):
        tmp = f"{h}.{os.getpid()}"
        with open(tmp + ".h", "w") as f:
            f.write(SHIM)
        r = subprocess.run([_compiler(), *_FLAGS, "-x", "c++-header", tmp + ".h", "-o",
                            tmp + ".gch"], capture_output=True, timeout=300)
        if r.returncode:
            return None
        os.replace(tmp + ".h", h)
        os.replace(tmp + ".gch", h + ".gch")
    return h


def _params(decl: str) -> list:
    """``[(ctypes type, name)]`` of a C parameter list."""
    out = []
    for p in (x.strip() for x in decl.split(",")):
        name = re.findall(r"\w+", p)[-1]
        if "*" in p:
            out.append((ctypes.c_void_p, name))
        else:
            base = " ".join(t for t in re.findall(r"\w+", p)[:-1] if t != "const")
            out.append((_CTYPES[base], name))
    return out


def _wrappers(source: str) -> tuple:
    kernels, text = {}, []
    for name, decl in _SIG.findall(source):
        ps = _params(decl)
        kernels[name] = [t for t, _ in ps]
        args = ", ".join(n for _, n in ps)
        text.append(f'extern "C" void emu_{name}({decl}, unsigned gx, unsigned gy, '
                    f'unsigned gz, unsigned bx) {{\n    emu_launch({{gx, gy, gz}}, {{bx, 1, 1}},'
                    f' [=] {{ {name}({args}); }});\n}}\n')
    return kernels, "".join(text)


def _address(a) -> int:
    """A kernel argument's data address: a NumPy array's, or a device array's
    (``data.ptr``: the strict stand-in's, ``ember/device/cuda_strict.py``)."""
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0]
    return a.data.ptr


class EmuModule:
    """``cupy.cuda.function.Module``'s interface over the g++-compiled kernels."""

    def __init__(self, source: str, workdir: str, max_blocks: int | None = None):
        src = re.sub(r"#include <cuda_(fp16|bf16)\.h>\n", "", source)
        self.kernels, wrap = _wrappers(src)
        folder = _cache_dir() or workdir
        key = hashlib.sha256((_toolchain_key() + SHIM + src + wrap).encode()).hexdigest()[:20]
        so = os.path.join(folder, f"emu_{key}.so")
        if not os.path.exists(so):
            shim = _shim_header(folder)
            text = (f'#include "{shim}"\n' if shim else SHIM) + src + wrap
            tmp = f"{so[:-3]}.{os.getpid()}"
            with open(tmp + ".cpp", "w") as f:
                f.write(text)
            r = subprocess.run([_compiler(), *_FLAGS, "-shared", tmp + ".cpp", "-o",
                                tmp + ".so"], capture_output=True, text=True, timeout=300)
            if r.returncode:
                raise RuntimeError(f"g++ rejected the kernel text:\n{r.stderr[:4000]}")
            os.replace(tmp + ".so", so)
            os.remove(tmp + ".cpp")
        self.lib = ctypes.CDLL(so)
        self.launches = []
        # NOTE: grid-stride kernels are right for any grid; fewer blocks = fewer threads
        self.max_blocks = max_blocks

    def get_function(self, name):
        fn = getattr(self.lib, f"emu_{name}")
        types = self.kernels[name]
        fn.argtypes = types + [ctypes.c_uint] * 4
        fn.restype = None

        def launch(grid, block, args, shared_mem=0):
            grid = tuple(grid) + (1,) * (3 - len(grid))
            # NOTE: a multi-launch entry's blocks map to its records: never capped
            if self.max_blocks is not None and not name.endswith("_m"):
                grid = (min(grid[0], self.max_blocks),) + grid[1:]
            assert len(args) == len(types), (name, len(args), len(types))
            conv = [_address(a) if hasattr(a, "__cuda_array_interface__") or
                    isinstance(a, np.ndarray) else t(a.item() if hasattr(a, "item") else a)
                    for a, t in zip(args, types)]
            self.launches.append(name)
            fn(*conv, *grid, block[0])
        return launch
