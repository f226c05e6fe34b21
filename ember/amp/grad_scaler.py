"""``GradScaler``: dynamic loss scaling for float16 training (``torch.amp.GradScaler``).

float16 gradients underflow to zero below ~6e-8; multiplying the loss by a large scale
before ``backward()`` keeps them representable, and dividing the gradients by it
(``unscale_``) before the optimizer step undoes it. When a scaled gradient overflowed
(inf/NaN), the step is skipped — parameters and optimizer state untouched — and the scale
is multiplied by ``backoff_factor``; after ``growth_interval`` clean steps in a row it is
multiplied by ``growth_factor``. The numbers are PyTorch's (``_amp_update_scale_``): the
scale is a float32 value, ``init_scale=2**16``, ``growth_factor=2``, ``backoff_factor=0.5``,
``growth_interval=2000``.

Under ``ember.compile`` the whole iteration is one graph (PyTorch's ``torch.compile`` breaks
the graph at ``step``, which reads ``found_inf`` into Python): the inf check, the unscale,
the skip and the scale update are graph ops. The step runs and ``where(found_inf, before,
after)`` keeps each parameter and optimizer state tensor as it was when a gradient
overflowed — the same values as eager's skipped step; the scale and ``_growth_tracker``
(a 0-d tensor, as PyTorch's) are updated in place by the graph. A skip inside a compiled
step makes no :class:`SkipReport` (that needs Python at every run).

What Ember adds: a skipped step leaves a :class:`SkipReport` (``last_skip_report()``,
also logged on the ``"ember.amp"`` logger at INFO level) naming each parameter whose
gradient was inf/NaN and, when anomaly mode is on (``ember.autograd.set_detect_anomaly``),
the op and the user's source line that first produced the inf. Between ``scale()`` and
``update()`` anomaly mode *records* that first inf instead of raising, since overflows are
what the scaler expects and handles.

Example:
    >>> scaler = ember.amp.GradScaler("cpu")
    >>> for x, y in loader:
    ...     opt.zero_grad()
    ...     with ember.autocast("cpu", dtype=ember.float16):
    ...         loss = loss_fn(model(x), y)
    ...     scaler.scale(loss).backward()
    ...     scaler.unscale_(opt)                      # optional: clip the true gradients
    ...     ember.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    ...     scaler.step(opt)                          # skipped if a gradient is inf/NaN
    ...     scaler.update()
"""
from __future__ import annotations

import logging
import threading
import warnings
import weakref
from collections.abc import Iterable
from enum import Enum
from typing import Any

import numpy as np

from ..autograd import anomaly as _anomaly
from ..autograd.grad_mode import no_grad, state
from ..compiler import is_compiling
from ..device.base import _backends, cuda_backend
from ..tensor import Tensor
from ._unscale_kernels import unscale_group, unscale_group_gpu
from .skip_report import OverflowedParam, SkipReport

__all__ = ["GradScaler", "OptState"]

_log = logging.getLogger("ember.amp")
_tls = threading.local()


def _armed_scalers() -> list:
    """This thread's scalers inside an iteration (weak references), behind one recorder."""
    armed = getattr(_tls, "armed", None)
    if armed is None:
        armed = _tls.armed = []
        prev = _anomaly.set_recorder(None)

        def record(event) -> bool:
            live = [s for s in (r() for r in armed) if s is not None]
            for s in live:
                if s._event is None:
                    s._event = event
            # NOTE: with no scaler alive inside an iteration, anomaly mode raises as usual
            return bool(live) or (prev is not None and prev(event))
        _anomaly.set_recorder(record)
    return armed


class OptState(Enum):
    """Where an optimizer is in the current iteration (PyTorch's ``OptState``)."""
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _fresh_state() -> dict:
    return {"stage": OptState.READY, "found_inf_per_device": {}}


class GradScaler:
    """Dynamic loss scaling (``torch.amp.GradScaler``, same arguments and defaults).

    Args:
        device: ``"cuda"`` (PyTorch's default) or ``"cpu"``. As in PyTorch, a ``"cuda"``
            scaler without a CUDA device warns and disables itself.
        init_scale: the first scale factor.
        growth_factor: the scale is multiplied by this after ``growth_interval`` clean steps.
        backoff_factor: the scale is multiplied by this after a step with inf/NaN gradients.
        growth_interval: clean steps in a row before the scale grows.
        enabled: ``False`` makes every method a pass-through (``scale`` returns its input,
            ``step`` calls ``optimizer.step``), so one script serves both modes.

    Example:
        >>> scaler = ember.amp.GradScaler("cpu", init_scale=2.0**10)
        >>> scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        if not isinstance(device, str) or device.split(":")[0] not in ("cpu", "cuda"):
            raise ValueError(f"GradScaler: device must be 'cpu' or 'cuda', got {device!r}")
        self._device = device.split(":")[0]
        self._enabled = bool(enabled)
        if self._device == "cuda" and self._enabled and cuda_backend()[0] is None:
            warnings.warn("ember.amp.GradScaler is enabled, but CUDA is not available.  "
                          "Disabling.", stacklevel=2)
            self._enabled = False
        self._last_report: SkipReport | None = None
        self._event = None          # the first anomaly recorded since scale()
        self._armed_in: list | None = None
        if not self._enabled:
            return
        if not growth_factor > 1.0:
            raise ValueError(f"GradScaler: the growth factor must be > 1.0, got {growth_factor}")
        if not backoff_factor < 1.0:
            raise ValueError(f"GradScaler: the backoff factor must be < 1.0, got "
                             f"{backoff_factor}")
        self._init_scale = init_scale
        self._scale: Tensor | None = None         # 0-d float32, created by the first scale()
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._rule_t: tuple | None = None   # the update rule as tensors (see _rule)
        self._init_growth_tracker = 0
        self._growth_tracker: Tensor | None = None   # 0-d int32, made with the scale
        self._per_optimizer_states: dict[int, dict] = {}
        self._iteration = 0

    # ------------------------------------------------------------------ scaling
    def _check_scale_growth_tracker(self, funcname: str) -> Tensor:
        if self._scale is None:
            raise RuntimeError(f"GradScaler: attempted {funcname} but the scale was never "
                               "set.  This may indicate your script did not use "
                               "scaler.scale(loss or outputs) earlier in the iteration.")
        return self._scale

    def _lazy_init(self, dev) -> None:
        self._scale = _lifted(self._init_scale, "float32", dev)
        self._growth_tracker = _lifted(self._init_growth_tracker, "int32", dev)

    def scale(self, outputs):
        """Multiply ``outputs`` (a tensor, or nested lists/tuples/iterables of them) by the scale.

        Returns ``outputs`` unchanged when the scaler is disabled.

        Example:
            >>> scaler.scale(loss).backward()
        """
        if not self._enabled:
            return outputs
        self._arm()

        def apply(val):
            if isinstance(val, Tensor):
                if self._scale is None:
                    self._lazy_init(val.device)
                return val * self._scale.to(val.device)
            if isinstance(val, (str, bytes)) or not isinstance(val, Iterable):
                raise ValueError(f"GradScaler.scale: outputs must be a Tensor or an iterable "
                                 f"of Tensors, got {type(val).__name__}")
            it = map(apply, val)
            return type(val)(it) if isinstance(val, (list, tuple)) else it
        return apply(outputs)

    # ------------------------------------------------------------------ unscaling
    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale, in place, once per iteration.

        Call it before clipping or inspecting gradients; ``step`` then does not unscale
        again. Raises ``RuntimeError`` when called twice before ``update()`` or after
        ``step()``.

        Example:
            >>> scaler.scale(loss).backward()
            >>> scaler.unscale_(opt)
            >>> ember.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        """
        if not self._enabled:
            return
        scale = self._check_scale_growth_tracker("unscale_")
        st = self._per_optimizer_states.setdefault(id(optimizer), _fresh_state())
        if st["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if st["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # NOTE: PyTorch's rounding: the reciprocal in float64, then float32 (a graph op
        # under ember.compile: the scale changes between runs)
        if is_compiling():
            from ..dtypes import float32, float64
            with no_grad():
                inv = scale.to(float64).reciprocal().to(float32)
        else:
            inv = np.float32(1.0 / float(scale._data))
        st["found_inf_per_device"] = _unscale_grads(optimizer, inv, allow_fp16=False)
        st["stage"] = OptState.UNSCALED

    # ------------------------------------------------------------------ stepping
    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless ``unscale_`` ran) and call ``optimizer.step(*args, **kwargs)``.

        The step is skipped when any gradient is inf/NaN; then ``last_skip_report()`` says
        which. Returns what ``optimizer.step`` returned, or None when skipped.

        Example:
            >>> scaler.step(opt); scaler.update()
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        self._check_scale_growth_tracker("step")
        st = self._per_optimizer_states.setdefault(id(optimizer), _fresh_state())
        if st["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if st["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if not st["found_inf_per_device"]:
            raise RuntimeError("GradScaler.step: no inf checks were recorded for this "
                               "optimizer (none of its parameters has a gradient)")
        retval = None
        found = list(st["found_inf_per_device"].values())
        if any(isinstance(f, Tensor) for f in found):
            flag = _any(found)
            why = _why_not_in_graph(optimizer, flag)
            if why is None:
                retval = _step_unless(flag, optimizer, args, kwargs)
                st["stage"] = OptState.STEPPED
                return retval
            from ..compiler import _tracer
            _tracer().unsupported(why)
        if any(found):
            self._skipped(optimizer)
        else:
            retval = optimizer.step(*args, **kwargs)
        st["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Update the scale for the next iteration (PyTorch's rule), or set it to ``new_scale``.

        Any inf/NaN seen by this iteration's ``unscale_``/``step`` multiplies the scale by
        ``backoff_factor`` and restarts the count of clean steps; ``growth_interval`` clean
        steps in a row multiply it by ``growth_factor`` (unless that overflows float32).

        Example:
            >>> scaler.update()          # or scaler.update(1024.0)
        """
        if not self._enabled:
            return
        scale = self._check_scale_growth_tracker("update")
        traced = is_compiling()
        if new_scale is not None:
            value = self._new_scale_value(new_scale)
            if traced:
                with no_grad():
                    scale.fill_(float(value))
            else:
                scale._data[...] = value
        else:
            found = [f for s in self._per_optimizer_states.values()
                     for f in s["found_inf_per_device"].values()]
            if not found:
                raise RuntimeError("GradScaler.update: no inf checks were recorded prior to "
                                   "update(); call scaler.step(optimizer) (or unscale_) first")
            if any(isinstance(f, Tensor) for f in found):
                self._update_scale_traced(scale, _any(found))
            else:
                self._update_scale(scale, any(found))
        if not traced:
            scale._storage.version += 1     # NOTE: graph ops count their own writes
        self._per_optimizer_states = {}
        self._iteration += 1
        self._disarm()

    def _new_scale_value(self, new_scale) -> np.float32:
        if isinstance(new_scale, (float, int)) and not isinstance(new_scale, bool):
            return np.float32(new_scale)
        reason = ("GradScaler.update: new_scale should be a float or a 1-element float "
                  f"Tensor with requires_grad=False on {self._device!r}, got ")
        if not isinstance(new_scale, Tensor):
            raise TypeError(reason + type(new_scale).__name__)
        if new_scale.device.type != self._device or new_scale.numel() != 1 or \
                new_scale.requires_grad:
            raise ValueError(reason + f"shape {tuple(new_scale.shape)} on "
                             f"{new_scale.device} (requires_grad={new_scale.requires_grad})")
        return np.float32(float(new_scale.detach().reshape(())))

    def _update_scale(self, scale: Tensor, found_inf: bool) -> None:
        """``torch._amp_update_scale_`` with the scale held in float32."""
        cur = np.float32(float(scale._data))  # NOTE: a GPU's 0-d array: float() reads it
        tracker = self._growth_tracker
        tracker._storage.version += 1
        if found_inf:
            scale._data[...] = cur * np.float32(self._backoff_factor)
            tracker._data[...] = 0
            return
        successful = int(tracker._data) + 1
        if successful == self._growth_interval:
            with np.errstate(over="ignore"):
                grown = cur * np.float32(self._growth_factor)
            if np.isfinite(grown):
                scale._data[...] = grown
            successful = 0
        tracker._data[...] = successful

    def _update_scale_traced(self, scale: Tensor, found_inf: Tensor) -> None:
        """:meth:`_update_scale` as graph ops on the 0-d ``found_inf`` (ember.compile)."""
        from ..ops.select import where
        tracker = self._growth_tracker
        growth, backoff, interval = self._rule()
        with no_grad():
            successful = tracker + 1
            grow = successful == interval
            grown = scale * growth
            grown = where(grown.isfinite(), grown, scale)
            new = where(found_inf, scale * backoff, where(grow, grown, scale))
            scale.copy_(new)
            tracker.copy_(where(found_inf | grow, 0, successful))

    def _rule(self) -> tuple:
        """The growth and backoff factors (0-d float32) and the growth interval (0-d int32)
        as tensors made without an op: a compiled update reads them at every run, so
        ``set_growth_factor`` & co. reach a graph captured before (they write them)."""
        if self._rule_t is None:
            dev = self._scale._device
            self._rule_t = (_lifted(self._growth_factor, "float32", dev),
                            _lifted(self._backoff_factor, "float32", dev),
                            _lifted(self._growth_interval, "int32", dev))
        return self._rule_t

    def _sync_rule(self) -> None:
        rule = getattr(self, "_rule_t", None)
        if rule is None:
            return
        for t, v in zip(rule, (np.float32(self._growth_factor),
                               np.float32(self._backoff_factor), self._growth_interval)):
            t._data[...] = v
            t._storage.version += 1

    # ------------------------------------------------------------------ skip reports
    def _arm(self) -> None:
        """Record (not raise) anomaly mode's first inf on this thread until ``update()``."""
        if self._armed_in is not None or not state.anomaly:
            return
        self._armed_in = _armed_scalers()
        self._armed_in.append(weakref.ref(self))

    def _disarm(self) -> None:
        if self._armed_in is not None:
            self._armed_in[:] = [r for r in self._armed_in if r() not in (self, None)]
            self._armed_in = None
        self._event = None

    def _skipped(self, optimizer) -> None:
        params = []
        for gi, group in enumerate(optimizer.param_groups):
            names = group.get("param_names")
            for pi, p in enumerate(group["params"]):
                g = p.grad
                if g is None or not g.dtype.is_floating_point:
                    continue
                bad = OverflowedParam.check(p, g, gi, pi, names[pi] if names else None)
                if bad is not None:
                    params.append(bad)
        ev = self._event
        self._last_report = SkipReport(
            iteration=self._iteration, scale=self.get_scale(), params=params,
            op=ev.op if ev else None, where=ev.where if ev else None,
            phase=ev.phase if ev else None, anomaly_mode=state.anomaly)
        _log.info("%s", self._last_report)

    def last_skip_report(self, names=None) -> SkipReport | None:
        """The report of the last skipped step (None if no step was skipped yet).

        Args:
            names: optional ``model.named_parameters()`` (or a module, or a
                ``{name: param}`` dict) to name the parameters; without it the names are
                the optimizer's own (when built from ``named_parameters()``) or
                ``param_groups[g][i]``.

        Example:
            >>> scaler.step(opt)
            >>> if (r := scaler.last_skip_report(model)) is not None and r.iteration == i:
            ...     print(r)   # which gradient overflowed, and where (anomaly mode)
        """
        r = self._last_report
        return r if r is None or names is None else r.named(names)

    # ------------------------------------------------------------------ accessors
    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale._data)

    def get_growth_factor(self) -> float:
        """The scale growth factor."""
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        """Set the scale growth factor."""
        self._growth_factor = new_factor
        self._sync_rule()

    def get_backoff_factor(self) -> float:
        """The scale backoff factor."""
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        """Set the scale backoff factor."""
        self._backoff_factor = new_factor
        self._sync_rule()

    def get_growth_interval(self) -> int:
        """The number of clean steps in a row before the scale grows."""
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        """Set the growth interval."""
        self._growth_interval = new_interval
        self._sync_rule()

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None \
            else int(self._growth_tracker._data)

    def is_enabled(self) -> bool:
        """Whether this scaler scales (False: every method is a pass-through)."""
        return self._enabled

    def state_dict(self) -> dict[str, Any]:
        """``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval`` and
        ``_growth_tracker`` (PyTorch's keys); ``{}`` when disabled. Call it after ``update()``.
        """
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what ``state_dict()`` returned (a no-op when this scaler is disabled)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        missing = {"scale", "growth_factor", "backoff_factor", "growth_interval",
                   "_growth_tracker"} - set(state_dict)
        if missing:
            raise KeyError(f"GradScaler.load_state_dict: missing keys {sorted(missing)}")
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._scale._data[...] = np.float32(self._init_scale)
            self._scale._storage.version += 1
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._sync_rule()
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._growth_tracker is not None:
            self._growth_tracker._data[...] = self._init_growth_tracker
            self._growth_tracker._storage.version += 1


def _lifted(value, dtype: str, dev) -> Tensor:
    """A 0-d ``dtype`` tensor holding ``value`` on ``dev``, made without an op: inside an
    ``ember.compile`` trace it becomes a graph input read at every run (not a factory's
    constant folded into the graph), so writes between runs reach the graph."""
    from .. import dtypes
    from ..tensor import _wrap
    xp = _backends[dev.type].xp
    return _wrap(xp.full((), value, dtype=getattr(xp, dtype)), getattr(dtypes, dtype), dev)


def _why_not_in_graph(optimizer, found_inf: Tensor) -> str | None:
    """Why a traced ``step`` can't skip in the graph, or None: every parameter with a
    gradient has its optimizer state (a first step creates it; ``where`` can't undo
    that) on ``found_inf``'s device (a GPU optimizer's CPU step counts would need a host
    read of the flag)."""
    from ..graph.first_call import creates_state
    st, dev = optimizer.state, found_inf._device
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is None:
                continue
            if (p not in st or not len(st[p])) and creates_state(optimizer):
                return ("GradScaler.step before the optimizer has state (its first step "
                        "creates it; where() can't undo that)")
            for k, v in st[p].items() if p in st else ():
                if isinstance(v, Tensor) and v._device != dev:
                    return (f"GradScaler.step of an optimizer whose state[{k!r}] is on "
                            f"{v._device}, its flag on {dev} (construct the optimizer with "
                            f"capturable=True to keep step counts on the device)")
    return None


def _any(found: list):
    """The flags of ``found`` (bools and 0-d bool tensors) or-ed."""
    out = False
    for f in found:
        out = f | out if isinstance(f, Tensor) else (out | f if isinstance(out, Tensor)
                                                      else out or f)
    return out


def _step_unless(found_inf: Tensor, optimizer, args, kwargs):
    """``optimizer.step()`` as graph ops that leave every parameter and state tensor as
    it was where the 0-d ``found_inf`` is true (a skipped step, without reading it)."""
    from ..ops.select import where
    kept = []
    with no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                kept.append((p, p.detach().clone()))
                kept += [(v, v.clone()) for v in optimizer.state[p].values()
                         if isinstance(v, Tensor)]
    retval = optimizer.step(*args, **kwargs)
    with no_grad():
        for t, before in kept:
            t.copy_(where(found_inf, before, t))
    return retval


def _unscale_grads(optimizer, inv, allow_fp16: bool) -> dict:
    """Unscale every gradient in place; ``{device: found_inf}``, one fused call per dtype
    group (``inv`` a 0-d tensor under ember.compile: the flags are 0-d bool tensors)."""
    groups: dict = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if not allow_fp16 and g.dtype.name == "float16":
                raise ValueError(f"GradScaler.unscale_: attempting to unscale FP16 gradients "
                                 f"(parameter of shape {tuple(p.shape)}); keep the parameters "
                                 "in float32 and let autocast run the ops in float16")
            groups.setdefault(g.device, {}).setdefault(g.dtype, []).append(g)
    found = {}
    with no_grad():
        for dev, per_dtype in groups.items():
            found[dev] = _any([_unscale_group(grads, inv) for grads in per_dtype.values()])
    return found


def _unscale_group(grads: list, inv) -> bool:
    """Multiply ``grads`` (one device and dtype) by ``inv`` in place; True if any held
    inf/NaN before (PyTorch checks the scaled values). One C call for the whole group."""
    if isinstance(inv, Tensor):         # ember.compile: graph ops, a 0-d bool flag
        bad = None
        for g in grads:
            b = g.isfinite().all().logical_not()
            bad = b if bad is None else bad | b
            g.mul_(inv)
        return bad
    if state.modes or state.fw_levels:   # NOTE: a tracer records the update as ops
        bad = not all(bool(g.isfinite().all()) for g in grads)
        for g in grads:
            g.mul_(float(inv))
        return bad
    arrays = [g._data for g in grads]
    be = _backends[grads[0]._device.type]
    kernels = "cuda_kernels" in be.capabilities
    if kernels or arrays[0].__class__ is not np.ndarray:
        # NOTE: a GPU's arrays (or the emulator's, whose device runs generated kernels)
        bad = unscale_group_gpu(be.xp, arrays, inv, kernels)
    else:
        bad = unscale_group(arrays, inv)
    for g in grads:
        g._storage.version += 1
    return bad
