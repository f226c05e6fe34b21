"""L-BFGS (``torch.optim.LBFGS``): PyTorch's algorithm step for step, with its optional
strong-Wolfe line search (both after minFunc).

The flat gradient, direction and history live in 1-D tensors of the parameters' dtype;
scalars (``gtd``, ``ro``, ``H_diag``, step lengths) are Python floats, which in float64
round exactly like PyTorch's 0-d float64 tensors, so float64 iterates match PyTorch's
(in float32 those scalars stay float64 here, where PyTorch rounds them to float32, so
float32 runs agree only to float32 accuracy). The state (``d``, ``t``, history lists,
``func_evals``, ``n_iter``) lives on the first parameter, as in PyTorch.
"""
from __future__ import annotations

import math
from typing import Callable

from ..autograd.grad_mode import enable_grad, no_grad
from ..ops.factories import zeros
from .optimizer import Optimizer, _check

__all__ = ["LBFGS"]


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """Minimiser of the cubic through ``(x1, f1, g1)``, ``(x2, f2, g2)``, clipped to bounds."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = math.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _dot(a, b) -> float:
    return float(a.dot(b).item())


class _Bracket:
    """The interval of the zoom phase: step lengths, losses, gradients and slopes."""

    def __init__(self, t, f, g, gtd):
        self.t, self.f, self.g, self.gtd = t, f, g, gtd


def _bracket_phase(obj_func, x, t, d, f, g, gtd, c1, c2, max_ls):
    """First phase of the strong-Wolfe search: grow ``t`` until a bracket is found."""
    f_new, g_new = obj_func(x, t, d)
    evals, gtd_new = 1, _dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            return _Bracket([t_prev, t], [f_prev, f_new], [g_prev, g_new.clone()],
                            [gtd_prev, gtd_new]), False, ls_iter, evals
        if abs(gtd_new) <= -c2 * gtd:
            return _Bracket([t], [f_new], [g_new], None), True, ls_iter, evals
        if gtd_new >= 0:
            return _Bracket([t_prev, t], [f_prev, f_new], [g_prev, g_new.clone()],
                            [gtd_prev, gtd_new]), False, ls_iter, evals
        min_step, max_step = t + 0.01 * (t - t_prev), t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.clone(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
    # NOTE: PyTorch keeps bracket_gtd from the last iteration here (unbound if none ran)
    gtds = [gtd_prev, gtd_new]
    return _Bracket([0, t], [f, f_new], [g, g_new], gtds), False, ls_iter, evals


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                  max_ls=25):
    """Line search satisfying the strong Wolfe conditions (PyTorch's ``_strong_wolfe``).

    Returns:
        ``(f_new, g_new, t, func_evals)``.
    """
    d_norm = float(d.abs().max().item())
    g = g.clone()
    br, done, ls_iter, evals = _bracket_phase(obj_func, x, t, d, f, g, gtd, c1, c2, max_ls)
    b, bf, bg, bgtd = br.t, br.f, br.g, br.gtd
    insuf_progress = False
    low, high = (0, 1) if bf[0] <= bf[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(b[1] - b[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(b[0], bf[0], bgtd[0], b[1], bf[1], bgtd[1])
        eps = 0.1 * (max(b) - min(b))
        if min(max(b) - t, t - min(b)) < eps:
            if insuf_progress or t >= max(b) or t <= min(b):
                t = max(b) - eps if abs(t - max(b)) < abs(t - min(b)) else min(b) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bf[low]:
            b[high], bf[high], bg[high], bgtd[high] = t, f_new, g_new.clone(), gtd_new
            low, high = (0, 1) if bf[0] <= bf[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (b[high] - b[low]) >= 0:
                b[high], bf[high], bg[high], bgtd[high] = b[low], bf[low], bg[low], bgtd[low]
            b[low], bf[low], bg[low], bgtd[low] = t, f_new, g_new.clone(), gtd_new
    return bf[low], bg[low], b[low], evals


class LBFGS(Optimizer):
    """L-BFGS (``torch.optim.LBFGS``), after minFunc.

    ``step(closure)`` runs up to ``max_iter`` iterations (at most ``max_eval`` closure
    calls); the closure must clear the gradients, compute the loss, call ``backward()``
    and return the loss. All parameters form one group.

    Args:
        params: parameters to optimize (one group; no per-parameter options).
        lr: learning rate (default 1).
        max_iter: iterations per ``step`` (default 20).
        max_eval: closure evaluations per ``step`` (default ``max_iter * 5 // 4``).
        tolerance_grad: stop when ``max |grad| <= tolerance_grad`` (default 1e-7).
        tolerance_change: stop when the step or loss change falls below it (default 1e-9).
        history_size: number of curvature pairs kept (default 100).
        line_search_fn: ``"strong_wolfe"`` or ``None`` (fixed step ``lr``).

    Example:
        >>> opt = ember.optim.LBFGS([x], line_search_fn="strong_wolfe")
        >>> def closure():
        ...     opt.zero_grad(); loss = f(x); loss.backward(); return loss
        >>> opt.step(closure)
    """

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9,
                 history_size: int = 100, line_search_fn: str | None = None) -> None:
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _validate_group(self, group) -> None:
        super()._validate_group(group)
        for key in ("max_iter", "max_eval"):
            _check(isinstance(group[key], (int, float)) and group[key] >= 1,
                   f"{key} value (a number >= 1)", group[key])
        _check(isinstance(group["history_size"], int) and group["history_size"] >= 1,
               "history_size value (an int >= 1)", group["history_size"])
        _check(group["tolerance_grad"] >= 0.0, "tolerance_grad value", group["tolerance_grad"])
        _check(group["tolerance_change"] >= 0.0, "tolerance_change value",
               group["tolerance_change"])
        _check(group["line_search_fn"] in (None, "strong_wolfe"),
               "line_search_fn (only 'strong_wolfe' or None are supported)",
               group["line_search_fn"])

    # ------------------------------------------------------------------ flat views
    def _gather_flat_grad(self):
        from ..ops.join import cat
        views = [zeros(p.numel(), dtype=p.dtype, device=p.device) if p.grad is None
                 else p.grad.reshape(-1) for p in self._params]
        return cat(views, 0)

    def _add_grad(self, step_size: float, update) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(update[offset:offset + n].view_as(p), alpha=step_size)
            offset += n

    def _directional_evaluate(self, closure, x, t, d):
        self._add_grad(t, d)
        loss = float(closure())
        flat_grad = self._gather_flat_grad()
        for p, xp in zip(self._params, x):
            p.copy_(xp)
        return loss, flat_grad

    # ------------------------------------------------------------------ step
    def step(self, closure: Callable):  # type: ignore[override]
        """Run up to ``max_iter`` L-BFGS iterations; returns the closure's first loss.

        Args:
            closure: re-evaluates the model (zero grads, loss, backward) and returns the loss.
        """
        if closure is None:
            raise TypeError("LBFGS.step requires a closure that re-evaluates the model and "
                            "returns the loss")
        with no_grad():
            return self._step(closure)

    def _closure(self, closure):
        with enable_grad():
            return closure()

    def _step(self, closure):
        group = self.param_groups[0]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        orig_loss = self._closure(closure)
        loss = float(orig_loss)
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if float(flat_grad.abs().max().item()) <= group["tolerance_grad"]:
            return orig_loss
        run = _Run(self, group, state, closure, loss, flat_grad)
        run.iterate()
        run.save()
        return orig_loss


class _Run:
    """One ``LBFGS.step``: the iteration loop with its state unpacked into attributes."""

    def __init__(self, opt, group, state, closure, loss, flat_grad):
        self.opt, self.group, self.state, self.closure = opt, group, state, closure
        self.loss, self.flat_grad, self.current_evals = loss, flat_grad, 1
        for key in ("d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad",
                    "prev_loss"):
            setattr(self, key, state.get(key))

    def save(self) -> None:
        for key in ("d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad",
                    "prev_loss"):
            self.state[key] = getattr(self, key)

    def _direction(self) -> None:
        """The two-loop recursion: ``d = -H g`` from the stored curvature pairs."""
        state, hist = self.state, self.group["history_size"]
        if state["n_iter"] == 1:
            self.d = self.flat_grad.neg()
            self.old_dirs, self.old_stps, self.ro, self.H_diag = [], [], [], 1
            return
        y = self.flat_grad.sub(self.prev_flat_grad)
        s = self.d.mul(self.t)
        ys = _dot(y, s)
        if ys > 1e-10:
            if len(self.old_dirs) == hist:
                self.old_dirs.pop(0), self.old_stps.pop(0), self.ro.pop(0)
            self.old_dirs.append(y)
            self.old_stps.append(s)
            self.ro.append(1.0 / ys)
            self.H_diag = ys / _dot(y, y)
        num_old = len(self.old_dirs)
        al = [None] * hist
        q = self.flat_grad.neg()
        for i in range(num_old - 1, -1, -1):
            al[i] = _dot(self.old_stps[i], q) * self.ro[i]
            q.add_(self.old_dirs[i], alpha=-al[i])
        r = q.mul(self.H_diag)
        for i in range(num_old):
            be_i = _dot(self.old_dirs[i], r) * self.ro[i]
            r.add_(self.old_stps[i], alpha=al[i] - be_i)
        self.d = r

    def iterate(self) -> None:
        group, state = self.group, self.state
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            self._direction()
            if self.prev_flat_grad is None:
                self.prev_flat_grad = self.flat_grad.clone()
            else:
                self.prev_flat_grad.copy_(self.flat_grad)
            self.prev_loss = self.loss
            if state["n_iter"] == 1:
                self.t = min(1.0, 1.0 / float(self.flat_grad.abs().sum().item())) * lr
            else:
                self.t = lr
            gtd = _dot(self.flat_grad, self.d)
            if gtd > -tol_change:
                break
            opt_cond, ls_evals = self._move(gtd, n_iter != max_iter, max_eval)
            self.current_evals += ls_evals
            state["func_evals"] += ls_evals
            if n_iter == max_iter or self.current_evals >= max_eval or opt_cond:
                break
            if float(self.d.mul(self.t).abs().max().item()) <= tol_change:
                break
            if abs(self.loss - self.prev_loss) < tol_change:
                break

    def _move(self, gtd: float, evaluate: bool, max_eval: int):
        """Take the step along ``d`` (line search or fixed ``t``); returns
        ``(optimality reached, closure evaluations)``."""
        opt, tol_grad = self.opt, self.group["tolerance_grad"]
        if self.group["line_search_fn"] is not None:
            x_init = [p.clone() for p in opt._params]

            def obj_func(x, t, d):
                return opt._directional_evaluate(lambda: opt._closure(self.closure), x, t, d)
            self.loss, self.flat_grad, self.t, evals = _strong_wolfe(
                obj_func, x_init, self.t, self.d, self.loss, self.flat_grad, gtd,
                max_ls=max_eval - self.current_evals)
            opt._add_grad(self.t, self.d)
            return float(self.flat_grad.abs().max().item()) <= tol_grad, evals
        opt._add_grad(self.t, self.d)
        if not evaluate:
            return False, 0
        self.loss = float(opt._closure(self.closure))
        self.flat_grad = opt._gather_flat_grad()
        return float(self.flat_grad.abs().max().item()) <= tol_grad, 1
