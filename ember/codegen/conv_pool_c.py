"""C text of the max-pool loops of :mod:`.conv_kernels` (``maxpool`` with its optional
bias + relu prologue, ``maxpool_grad``): appended to :mod:`.conv_kernels_c`'s ``_BODY``
and instantiated with it per dtype (``T``/``U``/``A``/``LD``/``ST``/``PRO``/``LOWP``, the
suffix ``S``; the helpers ``ember_plane``, ``ember_cols``, ``ember_logical`` and the
launch are in its head).
"""

POOL_BODY = r"""/* NumPy's argmax: the first NaN, else the first maximum (padding reads as pad).
   One row of windows, exactly, with bounds checks: the path for rows holding a NaN. */
static void ember_maxpool_row_S(const A *xp, A *best, int64_t *bi, const int64_t *g,
                                int64_t oy, A pad) {
    const int64_t *st = g;
    GEOM;
    for (int64_t ox = 0; ox < OW; ox++) {
        A bv = pad;
        int64_t bk = -1;
        for (int64_t i = 0; i < KH; i++) {
            const int64_t iy = oy * SH - PT + i * DH;
            for (int64_t j = 0; j < KW; j++) {
                const int64_t ix = ox * SW - PL + j * DW;
                const A v = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? xp[iy * W + ix] : pad;
                if (bk < 0 || (bv == bv && (v > bv || v != v))) {
                    bv = v;
                    bk = i * KW + j;
                }
            }
        }
        best[ox] = bv;
        bi[ox] = bk;
    }
}

static const A *ember_relu_plane_S(A *tmp, const T *x, A b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const A v = PRO(LD(x[i]) + b);
        tmp[i] = EMBER_RELU(v);
    }
    return tmp;
}

static const A *ember_load_plane_S(A *tmp, const T *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) tmp[i] = LD(x[i]);
    return tmp;
}

/* NOTE: NaN-aware selects (take v if v > best or v is NaN, unless best is NaN) compile to
   unpredictable branches, 8x slower than a plain `v > best`. So each row runs with the
   plain compare (right whenever no NaN is involved) while OR-ing a "saw a NaN" flag, and
   a row that saw one is redone by the exact loop above. Taps are outermost and output
   columns innermost: each tap is one vectorisable pass comparing into the output row. */
static void ember_maxpool_S_run(char **ptrs, const int64_t *g, const int64_t *st,
                                int64_t lo, int64_t hi) {
    GEOM;
    const T *x = (const T *)ptrs[0];
    T *vals = (T *)ptrs[1];
    int64_t *arg = (int64_t *)ptrs[2];
    const A pad = (A)(*(const double *)ptrs[3]);
    const int64_t L = OH * OW;
    const int padnan = pad != pad;
    /* optional prologue relu(x + bias[channel]) (the conv block before the pool), computed
       with the same single rounding as the unfused add; the full-size result is never
       stored (a plane is, in `tmp`, only for the generic path and NaN rows) */
    const T *bias = (const T *)ptrs[4];
    const int64_t C = g[13];
    /* 16-bit: values compared in float as they are loaded (rows or planes into `tmp`),
       each row's maxima in `brow` rounded back as they are stored (exact: they are x's) */
    const int tiles2 = KH == 2 && KW == 2 && SH == 2 && SW == 2 && DH == 1 && DW == 1
        && PT == 0 && PL == 0 && 2 * OH <= H && 2 * OW <= W;
    A *tmp = bias || LOWP || tiles2 ? (A *)malloc((size_t)(H * W + OW) * sizeof(A)) : 0;
    if ((bias || LOWP || tiles2) && !tmp) return;
    A *brow = LOWP ? tmp + H * W : 0;
    /* with g[14] the input planes are channel-first (a conv's one-GEMM output), the
       outputs in (n, c) order all the same */
#define PLANE(p) (bias ? ember_relu_plane_S(tmp, x + ember_plane(p, g) * H * W, \
                                            LD(bias[(p) % C]), H * W) \
                 : LOWP ? ember_load_plane_S(tmp, x + ember_plane(p, g) * H * W, H * W) \
                 : (const A *)(x + ember_plane(p, g) * H * W))
    if (tiles2) {
        /* the common 2x2 / stride 2 pool, no padding, a plane at a time: its four taps
           (after the prologue, or converted) into four contiguous runs q0..q3 of `tmp`,
           then one compare loop over the plane's L outputs. NOTE: per output row the
           loop ran 16 (or 8) iterations with stride-2 loads and int64 selects: ~13
           cycles an output; a whole plane of unit-stride runs vectorises (3-4x) */
        A *q0 = tmp, *q1 = tmp + L, *q2 = tmp + 2 * L, *q3 = tmp + 3 * L;
        for (int64_t q = lo, p = ember_logical(lo, g); q < hi; q++, p = ember_logical(q, g)) {
            const T *xp = x + ember_plane(p, g) * H * W;
            const A bv = bias ? LD(bias[p % C]) : (A)0;
            for (int64_t oy = 0; oy < OH; oy++) {
                const T *x0 = xp + 2 * oy * W, *x1 = x0 + W;
                const int64_t o = oy * OW;
                if (bias) {
                    for (int64_t ox = 0; ox < OW; ox++) {
                        const A u0 = PRO(LD(x0[2 * ox]) + bv);
                        const A u1 = PRO(LD(x0[2 * ox + 1]) + bv);
                        const A u2 = PRO(LD(x1[2 * ox]) + bv);
                        const A u3 = PRO(LD(x1[2 * ox + 1]) + bv);
                        q0[o + ox] = EMBER_RELU(u0);
                        q1[o + ox] = EMBER_RELU(u1);
                        q2[o + ox] = EMBER_RELU(u2);
                        q3[o + ox] = EMBER_RELU(u3);
                    }
                } else {
                    for (int64_t ox = 0; ox < OW; ox++) {
                        q0[o + ox] = LD(x0[2 * ox]);
                        q1[o + ox] = LD(x0[2 * ox + 1]);
                        q2[o + ox] = LD(x1[2 * ox]);
                        q3[o + ox] = LD(x1[2 * ox + 1]);
                    }
                }
            }
            T *vp = vals + p * L;
            int64_t *ap = arg + p * L;
            int bad = 0;
            for (int64_t t = 0; t < L; t++) {
                const A c0 = q0[t], c1 = q1[t], c2 = q2[t], c3 = q3[t];
                A best = c0;
                int32_t bi = 0;
                int take = c1 > best;
                best = take ? c1 : best; bi = take ? 1 : bi;
                take = c2 > best;
                best = take ? c2 : best; bi = take ? 2 : bi;
                take = c3 > best;
                best = take ? c3 : best; bi = take ? 3 : bi;
                bad |= (c0 != c0) | (c1 != c1) | (c2 != c2) | (c3 != c3);
                vp[t] = ST(best);
                ap[t] = bi;
            }
            if (bad) {                  /* a NaN in the plane: its rows exactly */
                const A *pl = PLANE(p);
                for (int64_t oy = 0; oy < OH; oy++) {
                    A *br = LOWP ? brow : (A *)(vp + oy * OW);
                    ember_maxpool_row_S(pl, br, ap + oy * OW, g, oy, pad);
                    for (int64_t ox = 0; LOWP && ox < OW; ox++) vp[oy * OW + ox] = ST(br[ox]);
                }
            }
        }
        free(tmp);
        return;
    }
    for (int64_t q = lo; q < hi; q++) {
        const int64_t p = ember_logical(q, g);
        const A *xp = PLANE(p);
        for (int64_t oy = 0; oy < OH; oy++) {
            A *best = LOWP ? brow : (A *)(vals + p * L + oy * OW);
            int64_t *bi = arg + p * L + oy * OW;
            int bad = padnan;
            for (int64_t i = 0; i < KH; i++) {
                const int64_t iy = oy * SH - PT + i * DH;
                const int ry = iy >= 0 && iy < H;
                const A *xr = xp + (ry ? iy : 0) * W;
                for (int64_t j = 0; j < KW; j++) {
                    const int64_t k = i * KW + j, off = j * DW - PL;
                    int64_t a = 0, b = 0;
                    if (ry) ember_cols(W, SW, PL, j, DW, OW, &a, &b);
                    if (k == 0) {
                        for (int64_t ox = 0; ox < OW; ox++) {
                            best[ox] = (ox >= a && ox < b) ? xr[ox * SW + off] : pad;
                            bi[ox] = 0;
                        }
                        continue;
                    }
                    for (int64_t ox = 0; ox < a; ox++) {
                        const int take = pad > best[ox];
                        best[ox] = take ? pad : best[ox];
                        bi[ox] = take ? k : bi[ox];
                    }
                    for (int64_t ox = a; ox < b; ox++) {
                        const A v = xr[ox * SW + off], bv = best[ox];
                        const int take = v > bv;
                        bad |= v != v;
                        best[ox] = take ? v : bv;
                        bi[ox] = take ? k : bi[ox];
                    }
                    for (int64_t ox = b; ox < OW; ox++) {
                        const int take = pad > best[ox];
                        best[ox] = take ? pad : best[ox];
                        bi[ox] = take ? k : bi[ox];
                    }
                }
            }
            if (bad) ember_maxpool_row_S(xp, best, bi, g, oy, pad);
            for (int64_t ox = 0; LOWP && ox < OW; ox++)
                vals[p * L + oy * OW + ox] = ST(best[ox]);
        }
    }
    free(tmp);
#undef PLANE
}

void ember_maxpool_S(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_launch_planes(ember_maxpool_S_run, ptrs, g, nthreads);
}

static void ember_maxpool_grad_S_run(char **ptrs, const int64_t *g, const int64_t *st,
                                     int64_t lo, int64_t hi) {
    GEOM;
    const T *gr = (const T *)ptrs[0];
    const int64_t *arg = (const int64_t *)ptrs[1];
    T *out = (T *)ptrs[2];
    const int64_t L = OH * OW, K = KH * KW;
    /* with g[14] the output planes are written channel-first (for a conv's one-GEMM
       weight and input gradients), the inputs read in (n, c) order */
    if (SH == KH && SW == KW && DH == 1 && DW == 1 && PT == 0 && PL == 0
            && OH * KH <= H && OW * KW <= W) {
        /* windows tiling the image (a pool with stride == kernel): every pixel is written
           once, the gradient or 0 — one pass instead of zeroing and scattering */
        for (int64_t p = lo; p < hi; p++) {
            T *op = out + ember_plane(p, g) * H * W;
            const T *gp = gr + p * L;
            const int64_t *ap = arg + p * L;
            for (int64_t oy = 0; oy < OH && KH == 2 && KW == 2; oy++) {
                U *r0 = (U *)(op + 2 * oy * W), *r1 = r0 + W;
                const U *gu = (const U *)gp + oy * OW;
                const int64_t *ak = ap + oy * OW;
                for (int64_t ox = 0; ox < OW; ox++) {
                    const U gv = gu[ox];
                    const int32_t k = (int32_t)ak[ox];
                    r0[2 * ox] = gv & (U)(-(U)(k == 0));
                    r0[2 * ox + 1] = gv & (U)(-(U)(k == 1));
                    r1[2 * ox] = gv & (U)(-(U)(k == 2));
                    r1[2 * ox + 1] = gv & (U)(-(U)(k == 3));
                }
                for (int64_t x = OW * 2; x < W; x++) r0[x] = r1[x] = 0;
            }
            for (int64_t oy = 0; oy < OH && !(KH == 2 && KW == 2); oy++)
            for (int64_t i = 0; i < KH; i++) {
                T *row = op + (oy * KH + i) * W;
                /* NOTE: bit masks, not `k == tap ? g : 0` (unpredictable branches, 5x
                   slower) nor `g * (k == tap)` (inf * 0 would leave NaN, not 0) */
                const U *gu = (const U *)gp + oy * OW;
                U *ru = (U *)row;
                const int64_t *ak = ap + oy * OW;
                for (int64_t ox = 0; ox < OW; ox++)
                for (int64_t j = 0; j < KW; j++)
                    ru[ox * KW + j] = gu[ox] & (U)(-(int64_t)(ak[ox] == i * KW + j));
                for (int64_t x = OW * KW; x < W; x++) row[x] = 0;
            }
            memset(op + OH * KH * W, 0, (size_t)((H - OH * KH) * W) * sizeof(T));
        }
        return;
    }
    /* overlapping windows: sums, in float for 16-bit (one plane in `acc`, rounded once) */
    A *acc = LOWP ? (A *)malloc((size_t)(H * W) * sizeof(A)) : 0;
    if (LOWP && !acc) return;
    for (int64_t p = lo; p < hi; p++) {
        T *op = out + ember_plane(p, g) * H * W;
        A *ac = LOWP ? acc : (A *)op;
        const T *gp = gr + p * L;
        const int64_t *ap = arg + p * L;
        memset(ac, 0, (size_t)(H * W) * sizeof(A));
        for (int64_t oy = 0; oy < OH; oy++)
        for (int64_t ox = 0; ox < OW; ox++) {
            const int64_t k = ap[oy * OW + ox];
            if (k < 0 || k >= K) continue;
            const int64_t iy = oy * SH - PT + (k / KW) * DH;
            const int64_t ix = ox * SW - PL + (k % KW) * DW;
            if (iy >= 0 && iy < H && ix >= 0 && ix < W) ac[iy * W + ix] += LD(gp[oy * OW + ox]);
        }
        for (int64_t t = 0; LOWP && t < H * W; t++) op[t] = ST(ac[t]);
    }
    free(acc);
}

void ember_maxpool_grad_S(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_launch_planes(ember_maxpool_grad_S_run, ptrs, g, nthreads);
}
"""
