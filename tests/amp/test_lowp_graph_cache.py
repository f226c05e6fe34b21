"""A compiled graph holding a bfloat16 constant is keyed by the graph cache: its bytes are
read as uint8 (a memoryview refuses ml_dtypes' bfloat16: W3 under bf16 autocast raised
``ValueError: cannot include dtype 'E' in a buffer`` at its first compiled call)."""
import numpy as np

import ember as em
from ember.graph import graph_pickle as gp


def test_bfloat16_and_float16_arrays_have_a_value_spelling():
    for dt in (em.bfloat16, em.float16):
        a = np.arange(6, dtype=np.float32).reshape(2, 3).astype(dt.np)
        v = gp._value(a)
        assert v[0] == "ndarray" and v[2] == (2, 3)
        assert gp._value(a.T) != v                       # layout is part of the value
        b = a.copy()
        b[0, 0] = 7
        assert gp._value(b) != v
        assert gp._value(np.array(1.5, dt.np))[0] == "ndarray"   # 0-d


def test_compiled_step_with_a_bfloat16_constant_runs():
    def f(x):
        c = em.tensor([1.0, -2.0, 3.0], dtype=em.bfloat16)     # a constant of the graph
        return (x.to(em.bfloat16) * c).float().sum()

    x = em.tensor([0.5, 0.25, 2.0])
    cf = em.compile(f)
    assert float(cf(x)) == float(f(x)) == 6.0
    assert float(cf(x)) == 6.0
