"""``Optimizer``: the base class of every optimizer (PyTorch's ``torch.optim.Optimizer``)."""
from __future__ import annotations

import copy
import functools
from collections import defaultdict
from typing import Any, Callable, Iterable

from .. import dtypes as _dt
from ..autograd.grad_mode import enable_grad, no_grad, state as _grad_state
from ..tensor import Tensor
from ..autograd.engine import zero_grads
from ._state_check import check_groups, check_state
from . import _fused, _hooks
from ._hooks import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

__all__ = ["Optimizer", "required", "register_optimizer_step_pre_hook",
           "register_optimizer_step_post_hook"]


class _RequiredParameter:
    """Marks a hyper-parameter without a default (``torch.optim.optimizer.required``)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


def _scalar_dtype():
    """dtype of scalar state such as ``step``: float64 when that is the default, else float32."""
    return _dt.float64 if _dt.get_default_dtype() is _dt.float64 else _dt.float32


def _check(ok: bool, what: str, value) -> None:
    if not ok:
        raise ValueError(f"Invalid {what}: {value}")


def _check_impl_flags(name: str, group: dict) -> None:
    """PyTorch's implementation switches: ``foreach`` is accepted (the per-parameter loop
    already updates whole raw arrays, and ``ember.compile`` captures it as one graph);
    ``capturable=True`` keeps the step counts on the parameters' device (what a compiled
    GPU step with ``GradScaler`` needs to skip a step in the graph); ``fused=True`` runs SGD/Adam/AdamW's compiled update (``_fused.py``);
    ``differentiable=True`` is refused, as steps run under ``no_grad``."""
    if group.get("fused") and group.get("foreach"):
        raise RuntimeError(f"{name}: `fused` and `foreach` cannot be `True` together.")
    if group.get("differentiable"):
        raise RuntimeError(f"{name}: differentiable=True is not supported: Ember's optimizer "
                           "steps run under no_grad, so the update is not recorded by "
                           "autograd (use differentiable=False, the default)")


def _typename(x) -> str:
    return type(x).__module__ + "." + type(x).__qualname__


class Optimizer:
    """Base class for all optimizers.

    ``params`` is an iterable of tensors, of ``(name, tensor)`` pairs, or of dicts (parameter
    groups) that each hold ``"params"`` and may override any hyper-parameter in ``defaults``.
    ``state[p]`` holds a dict of per-parameter buffers, created lazily at the first step
    that sees a gradient for ``p``.

    Updates run under :func:`ember.no_grad` with in-place whole-tensor ops on each parameter.

    Gradient accumulation: ``backward()`` *adds* into ``.grad``, so calling it on several
    micro-batches without ``zero_grad()`` in between sums their gradients. With each
    micro-batch loss divided by the number of micro-batches ``k``, one ``step()`` after
    ``k`` backward passes equals a step on the whole batch::

        opt.zero_grad()
        for xb, yb in zip(x.chunk(k), y.chunk(k)):
            (loss_fn(model(xb), yb) / k).backward()   # grads accumulate
        opt.step()

    Step counters (``state[p]["step"]``) are 0-d float tensors, as in PyTorch (float32, or
    float64 when that is the default dtype). ``state_dict()`` returns references to the
    live state tensors (as PyTorch does); ``load_state_dict()`` copies what it loads.

    Example:
        >>> opt = ember.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        >>> opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    """

    #: whether ``fused=True`` steps may run the compiled update (``_fused.py``)
    _fused_capable = False
    #: update complex parameters as pairs of reals (PyTorch's ``_view_as_real``); optimizers
    #: that refuse complex parameters (Muon, Adafactor) set it False to see them as they are
    _complex_as_real = True

    def _fused_worth(self, group) -> bool:
        """Whether the compiled update pays for ``group`` (it does unless the loop is
        already one pass per parameter)."""
        return True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__:
            cls.step = _step_wrapper(cls.__dict__["step"])

    def __init__(self, params: Iterable, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            f"Tensors or dicts, but got {_typename(params)}")
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def __repr__(self) -> str:
        s = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += f"\nParameter Group {i}\n"
            for key in sorted(group.keys()):
                if key not in ("params", "param_names"):
                    s += f"    {key}: {group[key]}\n"
        return s + ")"

    # ------------------------------------------------------------------ groups
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group (e.g. layers unfrozen during fine-tuning).

        Example:
            >>> opt.add_param_group({"params": head.parameters(), "lr": 1e-3})
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        param_group = dict(param_group)
        params = param_group.get("params")
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        elif params is None:
            raise ValueError("param_group must have a 'params' entry")
        params = list(params)
        names = [p[0] for p in params if isinstance(p, tuple)]
        params = [p[1] if isinstance(p, tuple) else p for p in params]
        if names:
            if len(names) != len(params):
                raise ValueError("all optimizer params should be with/without names. Some "
                                 "param names are missing")
            param_group["param_names"] = names
        self._check_params(params)
        param_group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError("parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            param_group.setdefault(name, default)
        self._validate_group(param_group)
        self.param_groups.append(param_group)

    def _check_params(self, params: list) -> None:
        seen = set()
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + _typename(p))
            if not (p.is_leaf or p.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor (it has a grad_fn; use "
                                 "x.detach().requires_grad_() to make a leaf)")
            if id(p) in seen:
                raise ValueError("optimizer contains a parameter group with duplicate "
                                 f"parameters (shape {tuple(p.shape)}); pass each parameter once")
            seen.add(id(p))
        for group in self.param_groups:
            if any(id(q) in seen for q in group["params"]):
                raise ValueError("some parameters appear in more than one parameter group")

    def _validate_group(self, group: dict[str, Any]) -> None:
        """Range-check a group's hyper-parameters (subclasses extend)."""
        lr = group.get("lr", required)
        if isinstance(lr, Tensor):
            raise TypeError(f"{type(self).__name__}: lr must be a Python float, got a Tensor "
                            f"(use lr.item(), or change param_group['lr'] between steps)")
        if lr is not required:
            _check(lr >= 0.0, "learning rate", lr)
        _check_impl_flags(type(self).__name__, group)

    def _hyper(self, group, key: str):
        """``group[key]`` — or, while ``ember.compile`` traces a step, a 0-d float64 graph
        input read from ``group[key]`` at every run (so LR schedules never recompile)."""
        v = group[key]
        if _grad_state.modes and hasattr(_grad_state.modes[-1], "lift_scalar"):
            return _grad_state.modes[-1].lift_scalar(
                lambda: group[key], v, _dt.float64, None,
                f"{type(self).__name__}.param_groups"
                f"[{next(i for i, g in enumerate(self.param_groups) if g is group)}].{key}")
        return v

    # ------------------------------------------------------------------ stepping
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimized tensors (to ``None`` by default)."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    def step(self, closure: Callable[[], Any] | None = None):
        """Perform one optimization step; ``closure`` re-evaluates the model and returns the loss.

        Example:
            >>> opt.step()
        """
        self._opt_called = True
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        if self._fused_capable and _fused.wanted(self):
            _fused.step(self)        # fused=True: the compiled update (optim/_fused.py)
        else:
            with no_grad():
                for group in self.param_groups:
                    self._update_group(group)
        return loss

    def _update_group(self, group: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement step() or "
                                  "_update_group()")

    def _grads(self, group):
        """``(param, grad, state)`` for each parameter of ``group`` that has a gradient."""
        state = self.state
        for p in group["params"]:
            g = p.grad
            if g is not None:
                if p._dtype.is_complex and self._complex_as_real:
                    # NOTE: PyTorch's optimizers update view_as_real(p) with view_as_real(g)
                    # (Adam's second moment per real component, not g * g); the state stays
                    # complex, as in PyTorch's state_dict.
                    yield _real(p), _real(g), _RealViewState(state[p])
                else:
                    yield p, g, state[p]

    # ------------------------------------------------------------------ state dicts
    # --- hooks (PyTorch's names; handles from ember.nn's RemovableHandle) ---------------
    def register_step_pre_hook(self, hook) -> "_hooks.RemovableHandle":
        """``hook(optimizer, args, kwargs)`` before each :meth:`step`; it may return
        ``(new_args, new_kwargs)`` (``args`` includes the optimizer)."""
        return _hooks.RemovableHandle(_hooks.store(self, "_optimizer_step_pre_hooks"), hook)

    def register_step_post_hook(self, hook) -> "_hooks.RemovableHandle":
        """``hook(optimizer, args, kwargs)`` after each :meth:`step`."""
        return _hooks.RemovableHandle(_hooks.store(self, "_optimizer_step_post_hooks"), hook)

    def register_state_dict_pre_hook(self, hook, prepend: bool = False):
        """``hook(optimizer)`` before :meth:`state_dict` builds its result."""
        return _hooks.RemovableHandle(_hooks.store(self, "_state_dict_pre_hooks"), hook,
                                      prepend)

    def register_state_dict_post_hook(self, hook, prepend: bool = False):
        """``hook(optimizer, state_dict)`` after :meth:`state_dict`; a returned dict
        replaces the result."""
        return _hooks.RemovableHandle(_hooks.store(self, "_state_dict_post_hooks"), hook,
                                      prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend: bool = False):
        """``hook(optimizer, state_dict)`` before :meth:`load_state_dict`; a returned dict
        is loaded instead."""
        return _hooks.RemovableHandle(_hooks.store(self, "_load_state_dict_pre_hooks"), hook,
                                      prepend)

    def register_load_state_dict_post_hook(self, hook, prepend: bool = False):
        """``hook(optimizer)`` after :meth:`load_state_dict`."""
        return _hooks.RemovableHandle(_hooks.store(self, "_load_state_dict_post_hooks"),
                                      hook, prepend)

    def state_dict(self) -> dict[str, Any]:
        """The optimizer state in PyTorch's layout.

        ``{"state": {index: {name: value}}, "param_groups": [{..., "params": [index...]}]}``:
        parameters are replaced by their position across all groups, in order.

        Example:
            >>> sd = opt.state_dict(); sd["param_groups"][0]["lr"]
            0.1
        """
        for hook in self.__dict__.get("_state_dict_pre_hooks", {}).values():
            hook(self)
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {(index[id(k)] if isinstance(k, Tensor) else k): v
                 for k, v in self.state.items()}
        out = {"state": state, "param_groups": groups}
        for hook in self.__dict__.get("_state_dict_post_hooks", {}).values():
            res = hook(self, out)
            if res is not None:
                out = res
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state from :meth:`state_dict` (tensors are copied and cast to each param).

        The state is validated first: missing entries (Adam's ``exp_avg``...), buffers of
        the wrong shape or dtype, NaN/Inf values, a ``step`` that is not an integer >= 0 or
        out-of-range hyper-parameters raise a ``ValueError``/``TypeError`` naming the entry.

        Example:
            >>> opt2.load_state_dict(opt.state_dict())
        """
        for hook in self.__dict__.get("_load_state_dict_pre_hooks", {}).values():
            res = hook(self, state_dict)
            if res is not None:
                state_dict = res
        groups, saved = self.param_groups, state_dict["param_groups"]
        if len(groups) != len(saved):
            raise ValueError(f"loaded state dict has a different number of parameter groups "
                             f"({len(saved)}) than the optimizer ({len(groups)})")
        for i, (g, s) in enumerate(zip(groups, saved)):
            if len(g["params"]) != len(s["params"]):
                raise ValueError(f"loaded state dict contains a parameter group ({i}, "
                                 f"{len(s['params'])} params) that doesn't match the size of "
                                 f"optimizer's group ({len(g['params'])} params)")
        id_map = {k: p for g, s in zip(groups, saved) for k, p in zip(s["params"], g["params"])}
        new_groups = []
        for g, s in zip(groups, saved):
            ng = {k: _copy(v) for k, v in s.items() if k != "params"}
            ng["params"] = g["params"]
            if "param_names" in g and "param_names" not in s:
                ng["param_names"] = g["param_names"]
            new_groups.append(ng)
        check_groups(self, new_groups)
        group_of = {id(p): ng for ng in new_groups for p in ng["params"]}
        state: defaultdict = defaultdict(dict)
        for k, v in state_dict["state"].items():
            k = int(k) if isinstance(k, str) and k.isdigit() else k   # NOTE: JSON keys
            if k in id_map:
                p = id_map[k]
                v = dict(v)
                check_state(self, k, p, v, group_of[id(p)])
                cap = bool(group_of[id(p)].get("capturable"))
                state[p] = {name: _cast(p, val, name, cap) for name, val in v.items()}
            else:
                state[k] = _copy(v)
        self.state, self.param_groups = state, new_groups
        for hook in self.__dict__.get("_load_state_dict_post_hooks", {}).values():
            hook(self)

    def _state_keys(self, group: dict[str, Any]) -> tuple[str, ...]:
        """The per-parameter state entries a step needs once a parameter has state;
        ``load_state_dict`` checks that they are present, finite and of the parameter's
        shape (subclasses list theirs)."""
        return ()


def _step_wrapper(step):
    """``step`` marking that it was called (LR schedulers check) and running the step
    hooks when there are any."""
    @functools.wraps(step)
    def wrapper(self, *args, **kw):
        self._opt_called = True
        if _hooks.has_step_hooks(self):
            return _hooks.hooked_step(step, (self,) + args, kw)
        return step(self, *args, **kw)
    return wrapper


Optimizer.step = _step_wrapper(Optimizer.step)

_SCALAR_STATE = ("step", "mu_product", "eta", "mu")


def _cast(p: Tensor, value, key, capturable=False):
    """Copy a loaded state value; tensors take ``p``'s dtype and device.

    Scalar state (``step``, NAdam's ``mu_product``, ASGD's ``eta`` and ``mu``) keeps its
    dtype so that a resumed run is bit-identical (PyTorch exempts only ``step``); with
    ``capturable=True`` the step count goes to ``p``'s device, as PyTorch's does.
    """
    if isinstance(value, Tensor):
        v = value.detach()
        if key not in _SCALAR_STATE:
            v = v.to(device=p.device, dtype=p.dtype) if p.is_floating_point() else \
                v.to(device=p.device)
        elif key == "step" and capturable:
            v = v.to(device=p.device)
        return v.clone()
    if isinstance(value, dict):
        return {k: _cast(p, x, k, capturable) for k, x in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(p, x, key, capturable) for x in value)
    return copy.deepcopy(value)


def _copy(value):
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _copy(x) for k, x in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(x) for x in value)
    return copy.deepcopy(value)


def _real(t: Tensor) -> Tensor:
    from ..ops.complex import view_as_real
    return view_as_real(t)


class _RealViewState:
    """A complex parameter's state seen through ``view_as_real``: complex tensors read as
    their real views; real tensors of the viewed shape are stored as complex views of
    themselves (sharing memory), so an update through the real view updates the state."""

    __slots__ = ("_d",)

    def __init__(self, d: dict) -> None:
        self._d = d

    def __getitem__(self, key):
        v = self._d[key]
        return _real(v) if isinstance(v, Tensor) and v._dtype.is_complex else v

    def __setitem__(self, key, value) -> None:
        if isinstance(value, Tensor) and value.ndim and value.shape[-1] == 2 and \
                value._dtype in (_dt.float32, _dt.float64) and key != "step":
            from ..ops.complex import view_as_complex
            value = view_as_complex(value.contiguous())
        self._d[key] = value

    def __contains__(self, key) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def __bool__(self) -> bool:
        return bool(self._d)

    def get(self, key, default=None):
        return self[key] if key in self._d else default

    def setdefault(self, key, default=None):
        if key not in self._d:
            self[key] = default
        return self[key]
