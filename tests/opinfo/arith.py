"""OpInfos for the arithmetic primitives (add, sub, mul, div, neg, pow, cast)."""
import numpy as np

import ember as em

from .core import OpInfo, Sample, binary_samples, unary_samples, rand


def _pow_samples(rng, dtype):
    return [Sample((rand(rng, (2, 3), dtype, 0.5, 2), rand(rng, (2, 3), dtype, -2, 2))),
            Sample((rand(rng, (3, 1), dtype, 0.5, 2), 3)),
            Sample((rand(rng, (4,), dtype, 0.5, 2), 0.5)),
            Sample((rand(rng, (0, 2), dtype, 0.5, 2), 2.0), grad=False)]


def _cast_samples(rng, dtype):
    other = em.float32 if dtype == np.float64 else em.float64   # a real conversion
    return [Sample((rand(rng, (2, 3), dtype),), {"dtype": other}),
            Sample((rand(rng, (4,), dtype),), {"dtype": other}),
            Sample((rand(rng, (3,), dtype),), {"dtype": em.int32}, grad=False),
            Sample((rand(rng, (0, 2), dtype),), {"dtype": em.float16}, grad=False)]


OPINFOS = [
    OpInfo("add", em.add, np.add, binary_samples(), ("add",)),
    OpInfo("add_alpha", lambda a, b: em.add(a, b, alpha=2.0), lambda a, b: a + 2.0 * b,
           binary_samples(), ("add", "mul")),
    OpInfo("sub", em.sub, np.subtract, binary_samples(), ("sub",)),
    OpInfo("mul", em.mul, np.multiply, binary_samples(), ("mul",)),
    OpInfo("div", em.div, np.true_divide, binary_samples(lo2=0.5, hi2=2.0), ("div",)),
    OpInfo("neg", em.neg, np.negative, unary_samples(), ("neg",)),
    OpInfo("pow", em.pow, np.power, _pow_samples, ("pow",)),
    OpInfo("cast", lambda x, dtype: x.to(dtype), lambda x, dtype: x.astype(dtype.np),
           _cast_samples, ("cast",), exact_dtype=False, grad=False),
    # NOTE: cast's gradient cannot be checked by float64 central differences (a float64 ->
    # float64 cast is no conversion); tests/test_dispatch.py checks it directly.
]
