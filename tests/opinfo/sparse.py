"""OpInfo for ``sparse_mm`` (ember/ops/sparse.py) through ``ember.sparse.mm``.

The reference builds the dense matrix with ``np.add.at`` (duplicate indices sum) and
multiplies with NumPy: independent of SciPy's kernel. Gradients to the values and to the
dense operand are checked against central differences.
"""
import numpy as np

import ember

from .core import OpInfo, Sample, rand


def _mm(indices, values, dense, m):
    return ember.sparse.mm(ember.sparse_coo_tensor(indices, values, (m, dense.shape[0])),
                           dense)


def _ref(indices, values, dense, m):
    a = np.zeros((m, dense.shape[0]), dtype=np.result_type(values, dense))
    np.add.at(a, (indices[0], indices[1]), values)
    return a @ dense


def _samples(rng, dt):
    def idx(m, k, nnz):
        return np.stack([rng.integers(0, m, nnz), rng.integers(0, k, nnz)]).astype(np.int64)
    return [Sample((idx(5, 4, 7), rand(rng, (7,), dt), rand(rng, (4, 3), dt), 5), grad=False,
                   name="5x4 @ 4x3"),
            Sample((np.array([[0, 0, 2], [1, 1, 0]], np.int64), rand(rng, (3,), dt),
                    rand(rng, (2, 2), dt), 3), name="duplicates sum"),
            Sample((idx(3, 3, 4), rand(rng, (4,), dt), rand(rng, (3, 2), dt), 3), name="grad"),
            Sample((np.zeros((2, 0), np.int64), rand(rng, (0,), dt), rand(rng, (3, 2), dt), 4),
                   grad=False, name="nnz 0"),
            Sample((idx(2, 3, 2), rand(rng, (2,), dt), rand(rng, (3, 0), dt), 2), grad=False,
                   name="zero columns")]


OPINFOS = [OpInfo("sparse.mm", _mm, _ref, _samples, ("sparse_mm",))]
