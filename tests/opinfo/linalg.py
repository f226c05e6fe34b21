"""OpInfos for linear algebra: matmul (every broadcasting case) and the products built on it,
and einsum (explicit/implicit output, ellipsis, diagonals, several operands)."""
import numpy as np

import ember as em
from ember.ops.linear import linear_p

from .core import OpInfo, Sample, rand

# (shape_a, shape_b, grad): every torch.matmul case
MATMUL_CASES = [
    ((3,), (3,), True),              # 1-D @ 1-D -> 0-d
    ((3,), (3, 2), True),            # 1-D @ 2-D
    ((2, 3), (3,), True),            # 2-D @ 1-D
    ((2, 3), (3, 2), True),          # 2-D @ 2-D
    ((2, 2, 3), (3,), True),         # batched @ 1-D
    ((3,), (2, 3, 2), True),         # 1-D @ batched
    ((2, 2, 3), (3, 2), True),       # batched @ 2-D
    ((2, 3), (2, 3, 2), True),       # 2-D @ batched
    ((2, 1, 2, 2), (3, 2, 1), True),  # batch dims broadcast (2, 1) x (3,) -> (2, 3)
    ((4, 5, 6), (4, 6, 3), False),
    ((2, 1, 3, 4), (5, 4, 2), False),
    ((0, 3), (3, 2), False),         # zero-size
    ((2, 0), (0, 3), False),         # empty contraction -> zeros
    ((3, 0, 4), (4,), False),
]


def _matmul_samples(rng, dtype):
    return [Sample((rand(rng, a, dtype), rand(rng, b, dtype)), grad=g, name=f"{a}@{b}")
            for a, b, g in MATMUL_CASES]


def _pairs(cases):
    def gen(rng, dtype):
        return [Sample((rand(rng, a, dtype), rand(rng, b, dtype)), grad=g, name=f"{a},{b}")
                for a, b, g in cases]
    return gen


def _addmm_samples(rng, dtype):
    r = lambda *s: rand(rng, s, dtype)  # noqa: E731
    return [Sample((r(2, 3), r(2, 2), r(2, 3))),
            Sample((r(3), r(2, 2), r(2, 3)), {"beta": 0.5, "alpha": 2.0}),
            Sample((r(2, 1), r(2, 2), r(2, 3)), {"beta": 0.0}),
            Sample((r(4, 6), r(4, 5), r(5, 6)), {"alpha": -1.5}, grad=False),
            Sample((r(0, 3), r(0, 2), r(2, 3)), grad=False)]


def _baddbmm_samples(rng, dtype):
    r = lambda *s: rand(rng, s, dtype)  # noqa: E731
    return [Sample((r(2, 2, 2), r(2, 2, 1), r(2, 1, 2)), {"beta": 2.0, "alpha": 0.5}),
            Sample((r(2,), r(2, 2, 3), r(2, 3, 2))),
            Sample((r(3, 4, 5), r(3, 4, 2), r(3, 2, 5)), grad=False)]


def _linear_samples(rng, dtype):
    """(x, w, b) of the ``linear`` primitive (eager F.linear with a bias); the last is
    big enough for Ember's GEMM with the bias in its stores (float32)."""
    r = lambda *s: rand(rng, s, dtype)  # noqa: E731
    return [Sample((r(3, 4), r(5, 4), r(5))), Sample((r(2, 3), r(4, 3), r(2, 1)), name="b col"),
            Sample((r(3, 2), r(2, 2), r()), name="b 0-d"),
            Sample((r(0, 3), r(4, 3), r(4)), grad=False, name="0 rows"),
            Sample((r(2, 0), r(3, 0), r(3)), grad=False, name="k=0"),
            Sample((r(2, 3, 4), r(5, 4), r(5)), name="3-D x"),
            Sample((r(2, 3, 4), r(5, 4), r(3, 1)), name="3-D x, 2-D b"),
            Sample((r(0, 2, 3), r(4, 3), r(4)), grad=False, name="0 rows 3-D"),
            Sample((r(64, 160), r(112, 160), r(112)), grad=False, name="sgemm"),
            Sample((r(8, 8, 160), r(112, 160), r(112)), grad=False, name="sgemm 3-D")]


def _addmm_ref(inp, a, b, beta=1, alpha=1):
    prod = alpha * np.matmul(a, b)
    return prod if beta == 0 else (beta * inp + prod).astype(a.dtype)


def _tensordot_samples(rng, dtype):
    r = lambda *s: rand(rng, s, dtype)  # noqa: E731
    return [Sample((r(2, 3, 2), r(3, 2, 2)), {"dims": 2}),
            Sample((r(2, 3), r(3, 2)), {"dims": 1}),
            Sample((r(2, 2), r(3,)), {"dims": 0}),
            Sample((r(3, 2, 2), r(2, 3)), {"dims": ([0, 2], [1, 0])}),
            Sample((r(3, 4, 5), r(5, 4, 2)), {"dims": ([1, 2], [1, 0])}, grad=False)]


def _tensordot_ref(a, b, dims=2):
    return np.tensordot(a, b, axes=dims)


EINSUM = [  # (equation, shapes, grad)
    ("ij,jk->ik", ((2, 3), (3, 2)), True),
    ("ij,jk", ((2, 3), (3, 2)), True),                  # implicit output
    ("ba,ca", ((2, 3), (2, 3)), True),                  # implicit output, sorted labels
    ("ii->i", ((3, 3),), True),                         # diagonal
    ("ii", ((3, 3),), True),                            # trace (implicit)
    ("iij->ji", ((2, 2, 3),), True),                    # diagonal with another label
    ("ij->", ((2, 3),), True),
    ("ij->j", ((3, 2),), True),                         # a label only one operand has
    ("i,j->ij", ((3,), (2,)), True),
    ("i,i->", ((4,), (4,)), True),
    ("bij,bjk->bik", ((2, 2, 2), (2, 2, 2)), True),
    ("...ij,...jk->...ik", ((2, 1, 2, 2), (3, 2, 1)), True),   # ellipsis broadcast
    ("i...,i->...", ((2, 3), (2,)), True),
    ("ij,jk,kl->il", ((2, 2), (2, 3), (3, 2)), True),          # three operands
    ("ij,ij->ij", ((2, 1), (2, 3)), True),                      # size-1 broadcast
    ("ij->ji", ((4, 5),), False),
    ("ab,bc,cd,de->ae", ((3, 4), (4, 5), (5, 2), (2, 3)), False),
    ("i,j", ((0,), (3,)), False),
]


def _einsum_samples(rng, dtype):
    return [Sample((eq,) + tuple(rand(rng, s, dtype) for s in shapes), grad=g, name=eq)
            for eq, shapes, g in EINSUM]


def _outer_ref(a, b):
    return a[:, None] * b[None, :]


OPINFOS = [
    OpInfo("matmul", em.matmul, np.matmul, _matmul_samples, ("matmul",)),
    OpInfo("matmul_operator", lambda a, b: a @ b, lambda a, b: a @ b, _matmul_samples,
           ("matmul",)),
    OpInfo("mm", em.mm, np.matmul, _pairs([((2, 3), (3, 2), True), ((4, 5), (5, 6), False),
                                           ((0, 2), (2, 3), False)]), ("matmul",)),
    OpInfo("bmm", em.bmm, np.matmul, _pairs([((2, 2, 3), (2, 3, 2), True),
                                             ((3, 4, 5), (3, 5, 2), False)]), ("matmul",)),
    OpInfo("mv", em.mv, np.matmul, _pairs([((2, 3), (3,), True), ((5, 4), (4,), False)]),
           ("matmul",)),
    OpInfo("dot", em.dot, np.dot, _pairs([((3,), (3,), True), ((0,), (0,), False)]),
           ("matmul",)),
    OpInfo("vdot", em.vdot, np.vdot, _pairs([((4,), (4,), True)]), ("matmul",)),
    OpInfo("inner", em.inner, np.inner, _pairs([((3,), (3,), True), ((2, 3), (2, 3), True),
                                                ((2, 2, 2), (3, 2), True),
                                                ((4, 5), (3, 2, 5), False)]),
           ("matmul", "permute", "reshape")),
    OpInfo("outer", em.outer, _outer_ref, _pairs([((3,), (2,), True), ((0,), (4,), False)]),
           ("mul",)),
    OpInfo("ger", em.ger, np.outer, _pairs([((2,), (3,), True)]), ("mul",)),
    OpInfo("tensordot", em.tensordot, _tensordot_ref, _tensordot_samples,
           ("matmul", "permute", "reshape")),
    OpInfo("addmm", em.addmm, _addmm_ref, _addmm_samples, ("matmul", "add", "mul")),
    OpInfo("baddbmm", em.baddbmm, _addmm_ref, _baddbmm_samples, ("matmul", "add", "mul")),
    OpInfo("linear_primitive", linear_p, lambda x, w, b: (x @ w.T + b).astype(x.dtype),
           _linear_samples, ("linear",)),
    OpInfo("einsum", em.einsum, lambda eq, *ops: np.einsum(eq, *ops), _einsum_samples,
           ("einsum", "expand")),
]
