"""The C source of the attention backward (``sdpa_grad``), one copy per dtype: written with
the same ``T``, ``EXP``, ``{S}`` and :data:`.attention_kernels_c.BODY` helpers as the
forward, instantiated by :func:`.attention_kernels.source`; a library of its own, so it
builds while the forward runs.
"""
from __future__ import annotations

BWD = r"""
/* The backward, a whole head at a time: P and dS for all query rows (a block of 4 rows:
   S = q kT and dP = dO vT in registers, then row by row P and dS = P (dP - rowsum(P dP)))
   and dQ = dS k for those rows; then, by blocks of 4 keys, dK = dST q and dV = PT dO
   (key j summed over the query rows that see it: i >= j when causal). */
static void ember_sdpa_grad_{S}_run(char **ptrs, const int64_t *g, const int64_t *st,
                                    int64_t lo, int64_t hi) {
    GEOM;
    const T *DO = (const T *)ptrs[0], *Q = (const T *)ptrs[1], *K = (const T *)ptrs[2],
        *V = (const T *)ptrs[3];
    T *dQ = (T *)ptrs[4], *dK = (T *)ptrs[5], *dV = (T *)ptrs[6];
    const T scale = (T)(*(const double *)ptrs[7]);
    const int64_t *qs = g + 7, *ks = g + 11, *vs = g + 15, *gs = g + 19;
    const int64_t *dqs = g + 23, *dks = g + 27, *dvs = g + 31;
    /* x + z is x (z = -0.0), or x with -0.0 made +0.0 (z = +0.0: the gradient of an unbind
       adds zeros, see ember/graph/passes/sdpa_layout.py) */
    const T z = g[35] ? (T)0 : -(T)0;
    const int64_t TKp = ember_pad_{S}(TK), Dp = ember_pad_{S}(D), DVp = ember_pad_{S}(DV);
    const int64_t TQ4 = (TQ + 3) / 4 * 4;
    T *buf = ember_scratch_{S}(D * TKp + TK * Dp + DV * TKp + TQ4 * Dp + TQ4 * DVp
                               + 2 * TQ4 * TKp + 4 * (Dp + DVp));
    if (!buf) { *(volatile int *)ptrs[8] = 1; return; }
    T *kt = buf, *kc = kt + D * TKp, *vt = kc + TK * Dp, *qc = vt + DV * TKp,
        *gc = qc + TQ4 * Dp, *s = gc + TQ4 * DVp, *dp = s + TQ4 * TKp, *ob = dp + TQ4 * TKp,
        *ob2 = ob + 4 * Dp;
    const int64_t zero[4] = {0, 0, 0, 0}, dd[4] = {D, D, D, D}, dv4[4] = {DV, DV, DV, DV};
    const T sc4[4] = {scale, scale, scale, scale};
    const int64_t ldk = Dp, ldq = Dp, ldg = DVp;
    for (int64_t p = lo; p < hi; p++) {
        const int64_t b0 = p / B1, b1 = p % B1;
        const T *kh = K + b0 * ks[0] + b1 * ks[1];
        ember_tr_{S}(kh, ks, TK, D, kt, TKp);
        ember_tr_{S}(V + b0 * vs[0] + b1 * vs[1], vs, TK, DV, vt, TKp);
        /* k, q, dO: in place when C-ordered heads (a copy was ~5%) */
        const T *kb = ember_rows_{S}(kh, ks, TK, D, kc, Dp);
        const T *qb = ember_rows_{S}(Q + b0 * qs[0] + b1 * qs[1], qs, TQ, D, qc, Dp);
        const T *gb = ember_rows_{S}(DO + b0 * gs[0] + b1 * gs[1], gs, TQ, DV, gc, DVp);
        T *dqo = dQ + b0 * dqs[0] + b1 * dqs[1], *nq = ember_next_{S}(dQ, dqs, D, p, hi, B1);
        for (int64_t i0 = 0; i0 < TQ; i0 += 4) {
            const int64_t nr = TQ - i0 < 4 ? TQ - i0 : 4;
            int64_t n[4];
            for (int64_t r = 0; r < nr; r++) n[r] = ember_seen_{S}(i0 + r, TK, CAUSAL);
            const int64_t w = (n[nr - 1] + VL - 1) / VL * VL;
            ember_pfw_{S}(nq, dqs[2], i0, nr, D);
            T *sb = s + i0 * TKp, *db = dp + i0 * TKp;
            /* S = q kT (scaled), then dP = dO vT: one inlined product in a loop, not two
               (NOTE: each inlined copy of ember_blk is ~0.1 s of the compiler's time) */
#pragma GCC unroll 1
            for (int t = 0; t < 2; t++)
                ember_blk_{S}(t ? gb + i0 * ldg : qb + i0 * ldq, t ? ldg : ldq, 1, nr, zero,
                              t ? dv4 : dd, t ? vt : kt, TKp, w, t ? db : sb, TKp,
                              t ? 0 : sc4, -(T)0);
            for (int64_t r = 0; r < nr; r++)
                ember_grad_row_{S}(sb + r * TKp, db + r * TKp, n[r]);
            if (nr == 4 && D == Dp) {          /* dQ = dS k, straight into the output */
                ember_blk_{S}(db, TKp, 1, nr, zero, n, kb, ldk, Dp, dqo + i0 * dqs[2],
                              dqs[2], sc4, z);
                continue;
            }
            ember_blkx_{S}(db, TKp, 1, nr, zero, n, kb, ldk, Dp, ob, Dp, 0, -(T)0);
            for (int64_t r = 0; r < nr; r++) {
                T *restrict dqr = dqo + (i0 + r) * dqs[2];
                const T *restrict o = ob + r * Dp;
#pragma omp simd
                for (int64_t d = 0; d < D; d++) dqr[d] = o[d] * scale + z;
            }
        }
        T *dko = dK + b0 * dks[0] + b1 * dks[1], *dvo = dV + b0 * dvs[0] + b1 * dvs[1];
        T *nk = ember_next_{S}(dK, dks, D, p, hi, B1);
        T *nv = ember_next_{S}(dV, dvs, DV, p, hi, B1);
        for (int64_t j0 = 0; j0 < TK; j0 += 4) {
            const int64_t nr = TK - j0 < 4 ? TK - j0 : 4;
            int64_t f[4], e[4];                  /* key j0 + r: query rows [f, e) see it */
            for (int64_t r = 0; r < nr; r++) {
                f[r] = CAUSAL ? (j0 + r < TQ ? j0 + r : TQ) : 0;
                e[r] = TQ;
            }
            ember_pfw_{S}(nk, dks[2], j0, nr, D);
            ember_pfw_{S}(nv, dvs[2], j0, nr, DV);
            ember_pfr_{S}(K, ks, D, p, hi, B1, j0, 4, TK);
            ember_pfr_{S}(V, vs, DV, p, hi, B1, j0, 4, TK);
            const int64_t q0 = j0 * TQ / TK, q1 = (j0 + 4) * TQ / TK;
            ember_pfr_{S}(Q, qs, D, p, hi, B1, q0, q1 - q0, TQ);
            ember_pfr_{S}(DO, gs, DV, p, hi, B1, q0, q1 - q0, TQ);
            if (nr == 4 && D == Dp && DV == DVp) {   /* straight into the outputs */
#pragma GCC unroll 1
                for (int t = 0; t < 2; t++)      /* dK = dST q, then dV = PT dO */
                    ember_blk_{S}((t ? s : dp) + j0, 1, TKp, nr, f, e, t ? gb : qb,
                                  t ? ldg : ldq, t ? DVp : Dp,
                                  t ? dvo + j0 * dvs[2] : dko + j0 * dks[2],
                                  t ? dvs[2] : dks[2], t ? 0 : sc4, z);
                continue;
            }
            ember_blkx_{S}(dp + j0, 1, TKp, nr, f, e, qb, ldq, Dp, ob, Dp, 0, -(T)0);
            ember_blkx_{S}(s + j0, 1, TKp, nr, f, e, gb, ldg, DVp, ob2, DVp, 0, -(T)0);
            for (int64_t r = 0; r < nr; r++) {
                T *restrict kr = dko + (j0 + r) * dks[2];
                T *restrict vr = dvo + (j0 + r) * dvs[2];
                const T *restrict o = ob + r * Dp, *restrict o2 = ob2 + r * DVp;
#pragma omp simd
                for (int64_t d = 0; d < D; d++) kr[d] = o[d] * scale + z;
#pragma omp simd
                for (int64_t c = 0; c < DV; c++) vr[c] = o2[c] + z;
            }
        }
    }
    free(buf);
}

void ember_sdpa_grad_{S}(char **ptrs, const int64_t *g, int64_t nthreads) {
    ember_sdpa_launch(ember_sdpa_grad_{S}_run, ptrs, g, nthreads);
}
/* ptrs = dO q k v dQ dK dV scale err g */
void ember_sdpa_grad_{S}_fast(char **ptrs, const int64_t *shape, const int64_t *st,
                              int64_t nthreads) {
    (void)shape; (void)st;
    ember_sdpa_launch(ember_sdpa_grad_{S}_run, ptrs, (const int64_t *)ptrs[9], nthreads);
}
"""
