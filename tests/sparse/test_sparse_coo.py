"""Sparse COO tensors (issue 17 item 3): construction, printing, conversions, products with
gradients, Embedding(sparse=True) + SparseAdam/SGD; references are SciPy/NumPy and the
PyTorch oracle where installed."""
import numpy as np
import pytest
import scipy.sparse as sp

import ember

IDX = [[0, 1, 1, 2], [2, 0, 0, 1]]          # (1, 0) twice: duplicates sum
VALS = [1.0, 2.0, 3.0, 4.0]


def _s(values=VALS):
    return ember.sparse_coo_tensor(IDX, values, (3, 3))


def test_repr_matches_pytorch_layout():
    s = ember.sparse_coo_tensor([[0, 1], [1, 2]], [3.0, 4.0], (3, 3))
    assert repr(s) == ("tensor(indices=tensor([[0, 1],\n"
                       "                       [1, 2]]),\n"
                       "       values=tensor([3., 4.]),\n"
                       "       size=(3, 3), nnz=2, layout=ember.sparse_coo)")
    assert s.is_sparse and not ember.zeros(2).is_sparse and s.layout is ember.sparse_coo


def test_to_dense_and_coalesce_match_scipy():
    ref = sp.coo_matrix((VALS, IDX), shape=(3, 3))
    np.testing.assert_array_equal(_s().to_dense().numpy(), ref.toarray())
    c = _s().coalesce()
    ref.sum_duplicates()
    assert c.is_coalesced() and c._nnz() == ref.nnz == 3
    np.testing.assert_array_equal(c.indices().numpy(), np.stack([ref.row, ref.col]))
    np.testing.assert_array_equal(c.values().numpy(), ref.data)
    with pytest.raises(RuntimeError, match="coalesce"):
        _s().indices()


def test_hybrid_and_to_sparse_roundtrip():
    x = np.array([[0.0, 0.0], [1.5, 0.0], [0.0, -2.0]])
    s = ember.tensor(x).to_sparse()
    assert s.sparse_dim() == 2 and s._nnz() == 2
    np.testing.assert_array_equal(s.to_dense().numpy(), x)
    rows = ember.tensor(x).to_sparse(1)          # hybrid: sparse rows, dense columns
    assert rows.sparse_dim() == 1 and rows.dense_dim() == 1 and rows._nnz() == 2
    np.testing.assert_array_equal(rows.indices().numpy(), [[1, 2]])
    np.testing.assert_array_equal(rows.to_dense().numpy(), x)


def test_mm_and_gradients_match_numpy():
    rng = np.random.default_rng(0)
    d = rng.standard_normal((3, 4))
    v = ember.tensor(VALS, dtype=ember.float64, requires_grad=True)
    dt = ember.tensor(d, requires_grad=True)
    out = ember.sparse.mm(ember.sparse_coo_tensor(IDX, v, (3, 3)), dt)
    a = sp.coo_matrix((VALS, IDX), shape=(3, 3))
    np.testing.assert_allclose(out.detach().numpy(), a @ d, rtol=1e-12)
    w = rng.standard_normal((3, 4))
    (out * ember.tensor(w)).sum().backward()
    np.testing.assert_allclose(dt.grad.numpy(), a.T @ w, rtol=1e-12)
    rows, cols = np.array(IDX)
    np.testing.assert_allclose(v.grad.numpy(), (w[rows] * d[cols]).sum(1), rtol=1e-12)


def test_matmul_operator_addmm_and_sum():
    rng = np.random.default_rng(1)
    d, m = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    a = sp.coo_matrix((VALS, IDX), shape=(3, 3)).toarray()
    s = ember.sparse_coo_tensor(IDX, VALS, (3, 3), dtype=ember.float64)
    np.testing.assert_allclose((s @ ember.tensor(d)).numpy(), a @ d, rtol=1e-12)
    got = ember.sparse.addmm(ember.tensor(m), s, ember.tensor(d), beta=0.5, alpha=2.0)
    np.testing.assert_allclose(got.numpy(), 0.5 * m + 2.0 * a @ d, rtol=1e-12)
    assert ember.sparse.sum(s).item() == pytest.approx(10.0)
    np.testing.assert_allclose(ember.sparse.sum(s, (0, 1)).numpy(), 10.0)
    part = ember.sparse.sum(s, 0)
    assert part.is_sparse
    np.testing.assert_allclose(part.to_dense().numpy(), a.sum(0))


def test_dense_ops_on_sparse_raise_naming_the_op():
    s = _s()
    for call, name in ((lambda: s.exp(), "exp"), (lambda: ember.exp(s), "exp"),
                       (lambda: s.sum(0), "sum"), (lambda: s + ember.ones(2, 2), "add"),
                       (lambda: s[0], "getitem")):
        with pytest.raises(TypeError, match=rf"^{name}: .*\.to_dense\(\)"):
            call()


def test_sparse_plus_dense_is_dense_and_scalar_scaling_stays_sparse():
    d = np.arange(9.0).reshape(3, 3)
    dense = _s().to_dense().numpy()
    np.testing.assert_array_equal((_s() + ember.tensor(d, dtype=ember.float32)).numpy(),
                                  dense + d)
    half = _s() / 2
    assert half.is_sparse
    np.testing.assert_array_equal(half.to_dense().numpy(), dense / 2)


def test_bad_shapes_are_value_errors():
    with pytest.raises(ValueError, match="nnz=2"):
        ember.sparse_coo_tensor([[0, 1]], [1.0, 2.0, 3.0], (3,))
    with pytest.raises(ValueError, match="out of range"):
        ember.sparse_coo_tensor([[0, 5]], [1.0, 2.0], (3,))
    with pytest.raises(RuntimeError, match="sparse.mm"):
        ember.sparse.mm(_s(), ember.ones(4, 2))


def _emb_pair(sparse, pad=None):
    ember.manual_seed(0)
    return ember.nn.Embedding(7, 3, padding_idx=pad, sparse=sparse)


def _sparse_emb_and_torch_twin(torch):
    """A sparse-gradient ``_emb_pair`` and a PyTorch sparse Embedding with its weight."""
    e = _emb_pair(True)
    te = torch.nn.Embedding(7, 3, sparse=True)
    with torch.no_grad():
        te.weight.copy_(torch.tensor(e.weight.detach().numpy()))
    return e, te


def test_embedding_sparse_grad_equals_dense_grad():
    idx = ember.tensor([[1, 4, 1], [0, 4, 6]])
    grads = []
    for sparse in (True, False):
        e = _emb_pair(sparse, pad=0)
        (e(idx) ** 2).sum().backward()
        grads.append(e.weight.grad)
    assert grads[0].is_sparse and not grads[1].is_sparse
    np.testing.assert_array_equal(grads[0]._indices.numpy(), [[1, 4, 1, 4, 6]])  # no pad
    np.testing.assert_allclose(grads[0].to_dense().numpy(), grads[1].numpy(), rtol=1e-6)


@pytest.mark.parametrize("kw", [{}, {"momentum": 0.9, "weight_decay": 0.01},
                                {"momentum": 0.5, "nesterov": True, "maximize": True}])
def test_sgd_with_sparse_grad_matches_dense(kw):
    idx = ember.tensor([2, 3, 2])
    ws = []
    for sparse in (True, False):
        e = _emb_pair(sparse)
        opt = ember.optim.SGD(e.parameters(), lr=0.1, **kw)
        for _ in range(3):
            opt.zero_grad()
            (e(idx) ** 2).sum().backward()
            opt.step()
        ws.append(e.weight.detach().numpy())
    np.testing.assert_allclose(ws[0], ws[1], rtol=1e-6)


def test_sgd_momentum_sparse_matches_pytorch():
    torch = pytest.importorskip("torch")
    e, te = _sparse_emb_and_torch_twin(torch)
    opt = ember.optim.SGD(e.parameters(), lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(te.parameters(), lr=0.1, momentum=0.9)
    for b in ([1, 2, 2], [4, 1], [6, 0, 0]):
        for mod, o, T in ((e, opt, ember), (te, topt, torch)):
            o.zero_grad()
            (mod(T.tensor(b)) ** 2).sum().backward()
            o.step()
    np.testing.assert_allclose(e.weight.detach().numpy(), te.weight.detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_sparse_adam_refuses_dense_grads():
    e = _emb_pair(False)
    e(ember.tensor([1])).sum().backward()
    with pytest.raises(RuntimeError, match="dense gradients"):
        ember.optim.SparseAdam(e.parameters()).step()


def test_sparse_adam_iterates_match_pytorch():
    torch = pytest.importorskip("torch")
    e, te = _sparse_emb_and_torch_twin(torch)
    opt = ember.optim.SparseAdam(e.parameters(), lr=0.05, betas=(0.8, 0.99))
    topt = torch.optim.SparseAdam(te.parameters(), lr=0.05, betas=(0.8, 0.99))
    batches = [[0, 2, 2], [5, 0, 3], [6, 6, 3], [2, 4, 0]]       # row 1 never touched
    w1 = e.weight.detach().numpy()[1].copy()
    for b in batches:
        for mod, o, T in ((e, opt, ember), (te, topt, torch)):
            o.zero_grad()
            (mod(T.tensor(b)) ** 3).sum().backward()
            o.step()
        np.testing.assert_allclose(e.weight.detach().numpy(), te.weight.detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(e.weight.detach().numpy()[1], w1)
    assert float(opt.state[e.weight]["exp_avg"][1].abs().sum()) == 0.0
    assert float(opt.state[e.weight]["exp_avg"][4].abs().sum()) > 0.0


def test_coalesce_and_mm_match_pytorch():
    torch = pytest.importorskip("torch")
    t = torch.sparse_coo_tensor(IDX, VALS, (3, 3)).coalesce()
    c = _s().coalesce()
    np.testing.assert_array_equal(c.indices().numpy(), t.indices().numpy())
    np.testing.assert_array_equal(c.values().numpy(), t.values().numpy())
    d = np.arange(6.0).reshape(3, 2).astype(np.float32)
    np.testing.assert_allclose(ember.sparse.mm(_s(), ember.tensor(d)).numpy(),
                               torch.sparse.mm(t, torch.tensor(d)).numpy(), rtol=1e-6)


def test_leaf_sparse_tensor_grad_matches_pytorch():
    torch = pytest.importorskip("torch")
    d = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    s = ember.sparse_coo_tensor(IDX, VALS, (3, 3), requires_grad=True)
    ember.sparse.mm(s, ember.tensor(d)).pow(2).sum().backward()
    ts = torch.sparse_coo_tensor(IDX, VALS, (3, 3), requires_grad=True)
    torch.sparse.mm(ts, torch.tensor(d)).pow(2).sum().backward()
    assert s.grad.is_sparse and s.is_leaf
    np.testing.assert_allclose(s.grad.to_dense().numpy(), ts.grad.to_dense().numpy(),
                               rtol=1e-6)
