"""CUDA C text of the tensor-core flash-attention forward (FlashAttention-2's, on ``mma.sync``).

Used by :mod:`.cuda_attention` for float16/bfloat16 q, k, v with head dims in
:data:`HEAD_DIMS` (others keep the scalar kernel of :mod:`.cuda_attention_c`). Same
arguments, same outputs (``O`` and the float32 log-sum-exp per row, ``lse[p * Tq + i]``),
same masking, so either backward reads what it writes. This module holds the tile loop,
the staging pipelines, the kernel and its entry; the per-step device functions it calls
(scores, online softmax, ``P V``, tile loads, the final store) are
:mod:`.cuda_attention_mma_parts`.

A block is 4 warps and owns 64 query rows (16 per warp; :data:`ROWS` = 32: 128 rows, each
warp two 16-row m-tiles); heads are ``p = blockIdx.y``, row blocks go in reverse (a causal
grid starts with its longest blocks). The Q tile goes through shared memory (64 rows at a
time) into A fragments kept in registers (:mod:`.cuda_mma`'s ``ldmatrix``); keys go
by tiles of 64: K and V rows staged in shared memory by 16-byte loads (rows padded by 16
bytes: ``ldmatrix`` and the stores hit 8 different 16-byte bank groups), the next tile's
loads issued into registers before this tile's math (``pipeline="regs"``, head dims up to
:data:`PREFETCH_MAX_DIM`; or by ``cp.async`` into a second buffer: :data:`PIPELINES`). Per
tile a warp computes ``S = Q K^T`` (16 x 64, float32 C fragments; K rows by ``ldmatrix`` are
the "col" B operand), scales it by ``scale * log2(e)``, masks it, updates its two rows'
running max (the 4 lanes of a row combine by ``__shfl_xor_sync`` 1 and 2) and per-lane
partial sums, rescales the accumulator, packs ``P = exp2(S - m)`` (``ex2.approx.ftz``) into
A fragments (rounded to the storage type) and adds ``P V`` (V by ``ldmatrix.trans``). Only
the 16-key steps a warp can see are computed (causal: up to its last row; the last tile: up
to ``Tk``). At the end ``O = acc / l`` (rounded once) and ``lse = m ln 2 + log l``.

Whole tiles (FlashAttention-2's split of the key loop, :data:`FULL_TILES`): the key tiles
every row of the block sees whole — no ``Tk`` tail, wholly below the causal diagonal: all
but the last one or two of a causal block — run an unguarded copy of the tile code (one
block-uniform branch a tile): all four 16-key steps, no masks, no per-step ``nk`` tests,
no non-finite V test. Those tests split the unrolled steps into basic blocks, so NVCC
could not move the next step's ``ldmatrix`` loads above this step's ``mma``'s; the
remaining tiles run the general code unchanged. Same operations in the same order: the
results are bitwise the old kernel's (emulator tests). With 32 rows a warp each K and V
fragment read from shared memory feeds two m-tiles' ``mma``'s (with 16, an ``ldmatrix.x4``
feeds two ``mma``'s: shared-memory reads cost about as much as the tensor-core work); a
row's operations are the same sequence, so its O and lse are bitwise the 16-row kernel's.
Neither is measured yet (no GPU since; ``bench/cuda_attention.py --quick`` times the
old path, the default and the 128-row blocks: ``scripts/gpu_check.sh``).

Masking is the scalar kernel's: key ``j`` takes part in row ``i`` iff ``j < Tk`` and (not
causal or ``j <= i``); a masked key never enters a sum, not even as ``0 * NaN``. Keys past
``Tk`` are zero-filled, so their ``P = 0`` meets ``V = 0``; a masked score is ``-inf``
before the max and its ``P`` is 0. The one place a visible-key product could meet a
masked key's non-finite ``V`` is a causal warp's diagonal 16-key step: there, when any V
value of those 16 keys is Inf/NaN (a ballot over the warp), that step runs as scalar
FMAs over the visible keys only (``P`` broadcast by shuffles within the row's 4 lanes)
instead of the ``mma``. A NaN score poisons its row, as in the scalar kernel.

Loads take 16-byte vectors when every base address is 16-byte aligned and every stride a
multiple of 8 elements (checked in the kernel; the last stride is 1, as
:func:`.cuda_attention._heads` arranges), element loads otherwise.
"""
from __future__ import annotations

from .cuda_attention_mma_parts import FWD_PARTS as _FWD_PARTS

#: head dims (q/k and v, each) the tensor-core forward takes.
HEAD_DIMS = (32, 64, 128)
#: storage dtypes it takes -> the ``cuda_mma`` suffix.
TYPES = {"float16": "f16", "bfloat16": "bf16"}
#: the largest head dim whose kernel prefetches the next K/V tile (d=128: 240 registers
#: without, ptxas spills with "regs"; "cp.async"'s two buffers exceed 48 KiB).
PREFETCH_MAX_DIM = 64
#: how K/V tiles reach shared memory (the kernel's MODE): loaded at each tile's top; the next
#: tile loaded into registers during this tile's math; cp.async into a second buffer
#: (``bench/cuda_attention.py`` times each).
PIPELINES = ("none", "regs", "cp.async")
#: the pipeline of head dims up to :data:`PREFETCH_MAX_DIM` (larger: "none"). ptxas -v, sm_90,
#: float16, d=64, before the full-tile path: "regs" 184 registers (2 blocks a SM), "cp.async"
#: 155 (3 blocks, 36 KiB of shared memory each), "none" 153; no spills. Timed on an H100
#: (``bench/cuda_attention.py --quick``, the GPT's (8, 12, 1024, 64) causal float16 forward,
#: 2026-11-26): "cp.async" 0.161 ms, "none" 0.179, "regs" 0.220 (the scalar kernel 1.99,
#: torch's sdpa 0.055). With :data:`FULL_TILES` (2026-11-27, unmeasured): "cp.async" 163
#: registers (3 blocks a SM still), "none" 166, "regs" 210; no spills.
DEFAULT_PIPELINE = "cp.async"
#: tiles every row of a block sees whole (no ``Tk`` tail, wholly below the causal diagonal)
#: take an unguarded path (no masks, no per-step tests: FlashAttention-2's split of the key
#: loop); False: every tile the masked one (the old kernel, bitwise the same results; kept
#: for ``bench/cuda_attention.py``'s A/B, column ``mma-old``). The default untimed: made so
#: because it only drops work and keeps 3 blocks a SM (module docstring).
FULL_TILES = True
#: query rows a warp owns: 16 (64 a block) or 32 (two m-tiles, 128 a block: each K/V
#: fragment from shared memory feeds twice the mma's; head dims up to 64, else 16). 32 is
#: bounded to two blocks a SM (``__launch_bounds__(128, 2)``): ptxas -v, sm_90, d=64,
#: "cp.async": 255 registers (float16 and bfloat16), no spills; d=32: 194. Unmeasured
#: (``bench/cuda_attention.py``'s ``mma-r32``), so not the default.
ROWS = 16

FWD_MMA = _FWD_PARTS + r"""
/* K/V tile j0 into shared memory by MODE (below); buf: the buffer it is read from */
template <int DQ, int DV, int MODE>
__device__ __forceinline__ void ember_fwd_stage(unsigned short *ksh, unsigned short *vsh,
        uint4 (&rk)[DQ / 16], uint4 (&rv)[DV / 16], const unsigned short *ku,
        const unsigned short *vu, const long long *base, const long long *st, int j0,
        int kend, int Tk, int buf, int vec) {
    constexpr int LQ = DQ + 8, LV = DV + 8, CQ = DQ / 8, CV = DV / 8, KB = 64 * LQ;
    constexpr int VB = 64 * LV, NQ = DQ / 16, NV = DV / 16;
    if (MODE == 2) {
        if (j0 + 64 < kend) {    /* the other buffer: read by the last tile, synced since */
            ember_tile_async<CQ, LQ, NQ>(ksh + (buf ^ 1) * KB, ku, base[1], st[5], j0 + 64,
                                         Tk, vec);
            ember_tile_async<CV, LV, NV>(vsh + (buf ^ 1) * VB, vu, base[2], st[8], j0 + 64,
                                         Tk, vec);
            ember_cp_commit();
            ember_cp_wait<1>();
        } else {
            ember_cp_wait<0>();
        }
        __syncthreads();
        return;
    }
    if (MODE == 0) {
        ember_tile_ld<CQ, NQ>(rk, ku, base[1], st[5], j0, Tk, vec);
        ember_tile_ld<CV, NV>(rv, vu, base[2], st[8], j0, Tk, vec);
    }
    __syncthreads();
    ember_tile_st<CQ, LQ, NQ>(ksh, rk);
    ember_tile_st<CV, LV, NV>(vsh, rv);
    __syncthreads();
    if (MODE == 1 && j0 + 64 < kend) {
        ember_tile_ld<CQ, NQ>(rk, ku, base[1], st[5], j0 + 64, Tk, vec);
        ember_tile_ld<CV, NV>(rv, vu, base[2], st[8], j0 + 64, Tk, vec);
    }
}

/* one 64-key tile for a warp's MT m-tiles of 16 rows (r0: its first row): S, the online
   softmax, acc rescaled, acc += P V. WHOLE: every key of the tile visible to every row (no
   Tk tail, wholly below the causal diagonal): all 4 steps of each m-tile, no masks, no
   non-finite V test — the same operations as the general path on such a tile, unguarded
   (straight-line code: ldmatrix loads free to move across the steps' mma's). Otherwise: an
   m-tile's steps past its last visible key are skipped (one that sees none skips the tile),
   the masked softmax where some key is masked, and a causal diagonal step whose V holds an
   Inf/NaN takes the exact path (module docstring). */
template <typename T, int DQ, int DV, int MT, bool WHOLE>
__device__ __forceinline__ void ember_fwd_tile(float (&acc)[MT][DV / 8][4],
        float (&m)[MT][2], float (&l)[MT][2], const unsigned (&qf)[MT][DQ / 16][4],
        const unsigned short *kt, const unsigned short *vt, int j0, int r0, int kend,
        int Tk, int causal, float sl2, int lane) {
    constexpr int BN = 64;
    int nk[MT];                    /* 16-key steps m-tile mt sees (warp-uniform) */
    bool live[MT], full[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int rm = r0 + 16 * mt;
        nk[mt] = WHOLE ? 4 : min(4, (kend - j0 + 15) >> 4);
        if (!WHOLE && causal) nk[mt] = min(nk[mt], (rm + 16 - j0 + 15) >> 4);
        live[mt] = WHOLE || nk[mt] > 0;
        full[mt] = WHOLE || (j0 + BN <= Tk && (!causal || j0 + BN - 1 <= rm));
    }
    float s[MT][8][4], a[MT][2];
    ember_fwd_scores<T, DQ, MT, WHOLE>(s, qf, kt, nk, lane);
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        if (!live[mt]) continue;
        const int ia = r0 + 16 * mt + (lane >> 2);
        if (full[mt]) ember_fwd_softmax<false>(s[mt], m[mt], l[mt], a[mt], sl2, j0, ia,
                                               lane & 3, Tk, causal);
        else ember_fwd_softmax<true>(s[mt], m[mt], l[mt], a[mt], sl2, j0, ia, lane & 3, Tk,
                                     causal);
#pragma unroll
        for (int n = 0; n < DV / 8; n++) {
            acc[mt][n][0] *= a[mt][0]; acc[mt][n][1] *= a[mt][0];
            acc[mt][n][2] *= a[mt][1]; acc[mt][n][3] *= a[mt][1];
        }
    }
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        bool on[MT];
        if (WHOLE) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++) on[mt] = true;
            ember_fwd_pv<T, DV, MT>(acc, s, vt, kk, lane, on);
            continue;
        }
        /* an m-tile's diagonal step (some key past some row) with a non-finite V: the
           exact path (module docstring); the V test once for the m-tiles that need it */
        bool diag[MT], need = false, any = false;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            diag[mt] = kk < nk[mt] && causal && j0 + kk * 16 + 15 > r0 + 16 * mt;
            need |= diag[mt];
        }
        const bool bad = need && ember_fwd_v_nonfinite<T, DV>(vt, kk, lane);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int ia = r0 + 16 * mt + (lane >> 2);
            if (diag[mt] && bad) ember_fwd_pv_exact<T, DV>(acc[mt], s[mt], vt, kk, j0, ia,
                                                           lane, Tk);
            on[mt] = kk < nk[mt] && !(diag[mt] && bad);
            any |= on[mt];
        }
        if (any) ember_fwd_pv<T, DV, MT>(acc, s, vt, kk, lane, on);
    }
}

/* MODE: how K/V tiles reach shared memory. 0: loaded at the top of each tile; 1: the next
   tile's loads issued into registers before this tile's math; 2: cp.async into the other
   of two buffers during this tile's math. 64 keys a tile, 128 threads: DQ/16 and DV/16
   16-byte chunks a thread. MT: 16-row m-tiles a warp owns (1: 64 rows a block; 2: 128,
   each K/V fragment feeding two m-tiles' mma's). FT: the tiles every row of the block
   sees whole take the unguarded path (ember_fwd_tile's WHOLE); false: every tile the
   general one (the old kernel: benchmarks). */
template <typename T, int DQ, int DV, int MODE, int MT, bool FT>
__device__ void ember_flash_fwd_mma(const T *q, const T *k, const T *v, T *o, float *lse,
        int b1, int Tq, int Tk, int causal, float scale, const long long *st) {
    /* st: q, k, v, o strides (s0, s1, s2 each), in elements */
    constexpr int BM = 64 * MT, BN = 64, LQ = DQ + 8, LV = DV + 8, NQ = DQ / 16;
    constexpr int NV = DV / 16, NBUF = MODE == 2 ? 2 : 1, KB = BN * LQ, VB = BN * LV;
    __shared__ __align__(16) unsigned short ksh[NBUF * KB];   /* the Q tile: last buffer */
    __shared__ __align__(16) unsigned short vsh[NBUF * VB];
    const int p = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * BM;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    long long base[4];
#pragma unroll
    for (int a = 0; a < 4; a++) base[a] = ember_head(p, b1, st[3 * a], st[3 * a + 1]);
    int vec = (((unsigned long long)q | (unsigned long long)k | (unsigned long long)v |
                (unsigned long long)o) & 15) == 0;
#pragma unroll
    for (int a = 0; a < 12; a++) vec &= (st[a] & 7) == 0;
    const unsigned short *ku = (const unsigned short *)k, *vu = (const unsigned short *)v;
    const int r0 = i0 + warp * 16 * MT;                     /* this warp's first row */
    unsigned qf[MT][DQ / 16][4];
#pragma unroll
    for (int h = 0; h < MT; h++) {      /* 64 rows at a time: rows r0 .. r0 + 16 MT - 1 */
        uint4 rq[NQ];
        ember_tile_ld<DQ / 8, NQ>(rq, (const unsigned short *)q, base[0], st[2], i0 + 64 * h,
                                  Tq, vec);
        ember_tile_st<DQ / 8, LQ, NQ>(ksh + (NBUF - 1) * KB, rq);
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int rl = warp * 16 * MT + 16 * mt - 64 * h;   /* row in this staging */
            if (rl >= 0 && rl < 64) {
#pragma unroll
                for (int kk = 0; kk < DQ / 16; kk++)
                    ember_ldsm_x4(qf[mt][kk], &ksh[(NBUF - 1) * KB + EMBER_ROW16(rl, kk * 16, LQ)]);
            }
        }
        if (MODE == 2 || h + 1 < MT) __syncthreads();   /* Q read before tile 1 lands there */
    }
    const float sl2 = scale * 1.4426950408889634f;
    float m[MT][2], l[MT][2], acc[MT][DV / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.f;
#pragma unroll
        for (int n = 0; n < DV / 8; n++)
            acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
    }
    const int kend = causal ? min(Tk, i0 + BM) : Tk;
    /* the tiles [0, kfull) every row of the block sees whole: no Tk tail, below i0 */
    const int kfull = FT ? min(Tk / BN * BN, causal ? i0 : Tk) : 0;
    uint4 rk[NQ], rv[NV];
    if (MODE == 1 && kend > 0) {
        ember_tile_ld<DQ / 8, NQ>(rk, ku, base[1], st[5], 0, Tk, vec);
        ember_tile_ld<DV / 8, NV>(rv, vu, base[2], st[8], 0, Tk, vec);
    }
    if (MODE == 2 && kend > 0) {
        ember_tile_async<DQ / 8, LQ, NQ>(ksh, ku, base[1], st[5], 0, Tk, vec);
        ember_tile_async<DV / 8, LV, NV>(vsh, vu, base[2], st[8], 0, Tk, vec);
        ember_cp_commit();
    }
    int buf = 0;
    for (int j0 = 0; j0 < kend; j0 += BN) {
        ember_fwd_stage<DQ, DV, MODE>(ksh, vsh, rk, rv, ku, vu, base, st, j0, kend, Tk, buf,
                                      vec);
        const unsigned short *kt = ksh + buf * KB, *vt = vsh + buf * VB;
        if (j0 < kfull)             /* block-uniform: one branch a tile, none inside */
            ember_fwd_tile<T, DQ, DV, MT, true>(acc, m, l, qf, kt, vt, j0, r0, kend, Tk,
                                                causal, sl2, lane);
        else
            ember_fwd_tile<T, DQ, DV, MT, false>(acc, m, l, qf, kt, vt, j0, r0, kend, Tk,
                                                 causal, sl2, lane);
        if (MODE == 2) {            /* this buffer is read: the next tile's loads may go */
            __syncthreads();
            buf ^= 1;
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        ember_fwd_store<T, DV>(acc[mt], m[mt], l[mt], o, lse, base[3], st[11], p,
                               r0 + 16 * mt + (lane >> 2), Tq, lane, vec);
}
"""

#: the entry point of one variant ({S}: suffix, {T}: storage type); the scalar forward's
#: arguments (``D``/``Dv`` are the variant's), strides gathered for the template. {LB}: the
#: 128-row kernel's register bound (two blocks a SM: 255 registers a thread).
ENTRY = r"""
extern "C" __global__ void {LB}ember_flash_fwd_mma_{S}(const {T} *q,
        const {T} *k, const {T} *v, {T} *o, float *lse, int b1, int Tq, int Tk, int D,
        int Dv, int causal, float scale, long long qs0, long long qs1, long long qs2,
        long long ks0, long long ks1, long long ks2, long long vs0, long long vs1,
        long long vs2, long long os0, long long os1, long long os2) {
    const long long st[12] = {qs0, qs1, qs2, ks0, ks1, ks2, vs0, vs1, vs2, os0, os1, os2};
    ember_flash_fwd_mma<{T}, {DQ}, {DV}, {MODE}, {MT}, {FT}>(q, k, v, o, lse, b1, Tq, Tk,
                                                           causal, scale, st);
}
"""


def warp_rows(d: int, dv: int, rows: int | None = None) -> int:
    """Query rows a warp owns for these head dims: ``rows`` (default :data:`ROWS`), 16 where
    32 does not fit (head dims over 64)."""
    rows = ROWS if rows is None else rows
    if rows not in (16, 32):
        raise ValueError(f"flash forward (mma): rows {rows} a warp; valid: 16, 32")
    return 16 if max(d, dv) > 64 else rows


def variant(dtype_name: str, d: int, dv: int, rows: int | None = None,
            full_tiles: bool | None = None):
    """The kernel suffix (``f16_d64_v64``) for these q/k and v head dims, or None when the
    tensor-core forward does not take them; ``_r32`` when a warp owns 32 rows, ``_m`` when
    every tile runs the masked path (``rows``/``full_tiles``: default :data:`ROWS`,
    :data:`FULL_TILES`)."""
    if dtype_name not in TYPES or d not in HEAD_DIMS or dv not in HEAD_DIMS:
        return None
    full_tiles = FULL_TILES if full_tiles is None else full_tiles
    return (f"{TYPES[dtype_name]}_d{d}_v{dv}" + ("_r32" if warp_rows(d, dv, rows) == 32
                                                  else "") + ("" if full_tiles else "_m"))


def render(head: str, mma: str, dtype_name: str, d: int, dv: int,
           pipeline: str | None = None, rows: int | None = None,
           full_tiles: bool | None = None) -> str:
    """The CUDA source of one variant: ``head`` (the attention HEAD), ``mma``
    (:data:`.cuda_mma.MMA`), the kernel and its ``extern "C"`` entry (:func:`entry`)."""
    return head + mma + FWD_MMA + entry(dtype_name, d, dv, pipeline, rows, full_tiles)


def entry(dtype_name: str, d: int, dv: int, pipeline: str | None = None,
          rows: int | None = None, full_tiles: bool | None = None) -> str:
    """The ``extern "C"`` entry of one variant (after :data:`FWD_MMA`; entries of several
    variants may share one source). ``pipeline``: how K/V tiles reach shared memory, one of
    :data:`PIPELINES` (default: :data:`DEFAULT_PIPELINE` for head dims up to
    :data:`PREFETCH_MAX_DIM`, else ``"none"``; ``"cp.async"`` needs two buffers of each, head
    dims up to 64 in 48 KiB). ``rows``: query rows a warp owns (16 or 32, head dims up to 64;
    default :data:`ROWS`); ``full_tiles``: the unguarded path for whole tiles (default
    :data:`FULL_TILES`)."""
    s = variant(dtype_name, d, dv, rows, full_tiles)
    if s is None:
        raise ValueError(f"flash forward (mma): no variant for dtype {dtype_name}, head dims "
                         f"q/k {d}, v {dv}; it takes float16/bfloat16 with dims in "
                         f"{HEAD_DIMS}")
    if pipeline is None:
        pipeline = DEFAULT_PIPELINE if max(d, dv) <= PREFETCH_MAX_DIM else "none"
    if pipeline not in PIPELINES or (pipeline == "cp.async" and max(d, dv) > 64):
        raise ValueError(f"flash forward (mma): pipeline {pipeline!r} for head dims {d}/{dv};"
                         f" valid: {PIPELINES} (\"cp.async\": dims <= 64)")
    if rows == 32 and max(d, dv) > 64:
        raise ValueError(f"flash forward (mma): 32 rows a warp for head dims {d}/{dv}; "
                         "valid up to 64")
    ctype = "__half" if dtype_name == "float16" else "__nv_bfloat16"
    mt = warp_rows(d, dv, rows) // 16
    full_tiles = FULL_TILES if full_tiles is None else full_tiles
    return (ENTRY.replace("{S}", s).replace("{T}", ctype).replace("{DQ}", str(d))
            .replace("{DV}", str(dv)).replace("{MODE}", str(PIPELINES.index(pipeline)))
            .replace("{MT}", str(mt)).replace("{FT}", "true" if full_tiles else "false")
            .replace("{LB}", "__launch_bounds__(128, 2) " if mt == 2 else ""))
