"""Forward-mode AD (ember.autograd.forward_ad): duals, levels, composition with reverse mode."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember.autograd import forward_ad as fwad


def f64(data, requires_grad=False):
    return em.tensor(data, dtype=em.float64, requires_grad=requires_grad)


def test_make_dual_needs_a_level():
    with pytest.raises(RuntimeError, match="dual_level"):
        fwad.make_dual(f64([1.0]), f64([1.0]))


def test_make_dual_and_unpack_dual():
    x, t = f64([1.0, 2.0]), f64([0.5, -1.0])
    with fwad.dual_level():
        d = fwad.make_dual(x, t)
        p, tt = fwad.unpack_dual(d)
        assert p.tolist() == [1.0, 2.0] and tt.tolist() == [0.5, -1.0]
        assert p._fw is None                  # the primal carries no tangent
        assert fwad.unpack_dual(x).tangent is None
        assert d.data_ptr() == x.data_ptr()   # the dual views the primal's data
    assert x._fw is None                      # the input itself is untouched


def test_unpacked_dual_is_a_namedtuple():
    with fwad.dual_level():
        u = fwad.unpack_dual(fwad.make_dual(f64(1.0), f64(2.0)))
    assert u.primal.item() == 1.0 and u.tangent.item() == 2.0
    assert u == (u.primal, u.tangent)


def test_make_dual_validates_shape_and_dtype():
    with fwad.dual_level():
        with pytest.raises(ValueError, match="shape"):
            fwad.make_dual(f64([1.0, 2.0]), f64([1.0]))
        with pytest.raises(TypeError, match="floating point"):
            fwad.make_dual(em.tensor([1, 2]), f64([1.0, 1.0]))


def test_tangent_cast_to_primal_dtype():
    with fwad.dual_level():
        d = fwad.make_dual(em.tensor([1.0], dtype=em.float32), f64([2.0]))
        assert fwad.unpack_dual(d).tangent.dtype == em.float32


def _composite(x, y):
    return (x * y).exp() / (1 + y * y) + x ** 3 - (x / y).log() * 0.5


def test_jvp_of_composite_matches_central_differences():
    x0, y0 = np.array([0.3, 0.8, 1.2]), np.array([1.5, 0.4, 2.0])
    tx, ty = np.array([1.0, -0.5, 0.25]), np.array([0.3, 1.0, -2.0])
    with fwad.dual_level():
        out = _composite(fwad.make_dual(f64(x0), f64(tx)), fwad.make_dual(f64(y0), f64(ty)))
        jvp = fwad.unpack_dual(out).tangent.tolist()
    eps = 1e-6
    fp = np.array(_composite(f64(x0 + eps * tx), f64(y0 + eps * ty)).tolist())
    fm = np.array(_composite(f64(x0 - eps * tx), f64(y0 - eps * ty)).tolist())
    np.testing.assert_allclose(jvp, (fp - fm) / (2 * eps), rtol=1e-7)


def test_ops_without_dual_inputs_have_no_tangent():
    with fwad.dual_level():
        d = fwad.make_dual(f64([1.0]), f64([1.0]))
        c = f64([2.0]) * 3
        assert fwad.unpack_dual(c).tangent is None
        s = (d * c).sum()
        assert fwad.unpack_dual(s).tangent.item() == 6.0


def test_broadcasting_and_reductions_carry_tangents():
    with fwad.dual_level():
        d = fwad.make_dual(f64([[1.0], [2.0]]), f64([[1.0], [0.0]]))
        y = (d * f64([1.0, 2.0, 3.0])).sum(dim=1)
        assert fwad.unpack_dual(y).tangent.tolist() == [6.0, 0.0]


def test_nested_levels_give_second_derivatives():
    # f(x) = x^2 e^x ; f'' = e^x (x^2 + 4x + 2)
    x = f64(0.7)
    with fwad.dual_level() as outer:
        xo = fwad.make_dual(x, f64(1.0), level=outer)
        with fwad.dual_level() as inner:
            xi = fwad.make_dual(xo, f64(1.0), level=inner)
            y = xi * xi * xi.exp()
            dy = fwad.unpack_dual(y, level=inner).tangent          # f'(x), carries outer
        d2 = fwad.unpack_dual(dy, level=outer).tangent
        d1_outer = fwad.unpack_dual(fwad.unpack_dual(y, level=inner).primal,
                                    level=outer).tangent
    e = math.exp(0.7)
    assert dy.tolist() == pytest.approx(e * (0.49 + 1.4))
    assert d1_outer.item() == pytest.approx(e * (0.49 + 1.4))
    assert d2.item() == pytest.approx(e * (0.49 + 2.8 + 2))


def test_nested_levels_are_independent():
    # Tangents of different levels must not mix (perturbation confusion).
    with fwad.dual_level() as l1:
        a = fwad.make_dual(f64(2.0), f64(1.0), level=l1)
        with fwad.dual_level() as l2:
            b = fwad.make_dual(f64(3.0), f64(1.0), level=l2)
            y = a * b
            assert fwad.unpack_dual(y, level=l1).tangent.item() == 3.0
            assert fwad.unpack_dual(y, level=l2).tangent.item() == 2.0


def test_forward_over_reverse_hessian_vector_product():
    # g(x) = grad of f = (x e^x).sum() ;  Hv = diag((2 + x) e^x) v
    xs = [0.5, -1.0, 2.0]
    v = [1.0, 2.0, -1.0]
    with fwad.dual_level():
        xr = fwad.make_dual(f64(xs), f64(v)).requires_grad_()   # a leaf carrying a tangent
        y = (xr * xr.exp()).sum()
        (g,) = em.autograd.grad(y, xr, create_graph=True)
        hv = fwad.unpack_dual(g).tangent
    assert g.tolist() == pytest.approx([(1 + a) * math.exp(a) for a in xs])
    assert hv.tolist() == pytest.approx([(2 + a) * math.exp(a) * b for a, b in zip(xs, v)])


def test_forward_over_reverse_through_grad_with_create_graph_on_dual_input():
    # the dual requires grad through make_dual of a leaf
    x = f64([0.3, 1.1], requires_grad=True)
    v = f64([1.0, 1.0])
    with fwad.dual_level():
        d = fwad.make_dual(x, v)
        y = (d ** 3).sum()
        (g,) = em.autograd.grad(y, x, create_graph=True)     # grad wrt the original leaf
        hv = fwad.unpack_dual(g).tangent
    assert g.tolist() == pytest.approx([3 * 0.09, 3 * 1.21])
    assert hv.tolist() == pytest.approx([6 * 0.3, 6 * 1.1])


def test_reverse_over_forward():
    # d/dx of the directional derivative <f'(x), v> for f = sum(x^3)
    x = f64([0.5, 2.0], requires_grad=True)
    with fwad.dual_level():
        d = fwad.make_dual(x, f64([1.0, 3.0]))
        t = fwad.unpack_dual((d ** 3).sum()).tangent          # sum 3 x^2 v
    t.backward()
    assert x.grad.tolist() == pytest.approx([6 * 0.5 * 1.0, 6 * 2.0 * 3.0])


def test_tangent_survives_saved_outputs_in_backward():
    # exp saves its output; forward-over-reverse must see the output's tangent
    with fwad.dual_level():
        xr = fwad.make_dual(f64([0.2]), f64([1.0])).requires_grad_()
        (g,) = em.autograd.grad(xr.exp().sum(), xr, create_graph=True)
        assert fwad.unpack_dual(g).tangent.item() == pytest.approx(math.exp(0.2))


def test_levels_closed_after_exit():
    from ember.autograd.grad_mode import state
    with fwad.dual_level():
        pass
    assert state.fw_levels == []
