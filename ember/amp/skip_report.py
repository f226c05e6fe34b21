"""What ``GradScaler`` says about a skipped step: which gradients overflowed, and where.

A :class:`SkipReport` lists each parameter whose gradient held inf/NaN after unscaling
(:class:`OverflowedParam`: name or ``param_groups[g][i]``, shape, dtype, counts) and, when
anomaly mode was on, the op and the user's source line that first produced a non-finite
value (recorded by ``ember.autograd.anomaly`` instead of raising).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace

__all__ = ["OverflowedParam", "SkipReport"]


@dataclass(frozen=True)
class OverflowedParam:
    """One parameter whose gradient held inf/NaN when its step was skipped."""
    group: int
    index: int
    name: str | None
    shape: tuple
    dtype: str
    n_inf: int
    n_nan: int
    numel: int
    param_ref: object = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """The parameter's name, else ``param_groups[g][i]``."""
        return self.name or f"param_groups[{self.group}][{self.index}]"

    @classmethod
    def check(cls, p, g, group: int, index: int, name):
        """The entry for parameter ``p`` with gradient ``g``, or None if ``g`` is finite."""
        from ..device.base import _backends
        xp = _backends[g.device.type].xp
        a = g._data
        n_inf, n_nan = int(xp.isinf(a).sum()), int(xp.isnan(a).sum())
        if not (n_inf or n_nan):
            return None
        try:
            ref = weakref.ref(p)
        except TypeError:
            ref = None
        return cls(group, index, name, tuple(g.shape), g.dtype.name, n_inf, n_nan,
                   int(a.size), ref)

    def __str__(self) -> str:
        what = ", ".join(s for s in (f"{self.n_inf} inf" if self.n_inf else "",
                                     f"{self.n_nan} NaN" if self.n_nan else "") if s)
        return (f"{self.label} {list(self.shape)} {self.dtype}: {what} of {self.numel} "
                "gradient values")


@dataclass(frozen=True)
class SkipReport:
    """Why ``GradScaler.step`` skipped an optimizer step.

    Attributes:
        iteration: the scaler's iteration (number of ``update()`` calls before the skip).
        scale: the loss scale of that iteration.
        params: the parameters whose unscaled gradient held inf/NaN.
        op: the op that first produced inf/NaN (anomaly mode only, else None).
        where: ``file:line (source)`` of the user's code that ran that op, or None.
        phase: ``"forward"`` or ``"backward"`` (where the op produced it), or None.
        anomaly_mode: whether anomaly mode was on when the step was skipped.
    """
    iteration: int
    scale: float
    params: list
    op: str | None = None
    where: str | None = None
    phase: str | None = None
    anomaly_mode: bool = False

    @property
    def names(self) -> list:
        """The labels of the overflowed parameters, in optimizer order."""
        return [p.label for p in self.params]

    def named(self, names) -> "SkipReport":
        """This report with parameter names taken from ``model.named_parameters()``.

        ``names`` is an ``nn.Module``, an iterable of ``(name, param)`` pairs or a dict.
        """
        if hasattr(names, "named_parameters"):
            names = names.named_parameters()
        pairs = names.items() if isinstance(names, dict) else names
        by_id = {id(p): n for n, p in pairs}
        out = []
        for e in self.params:
            p = e.param_ref() if e.param_ref is not None else None
            n = by_id.get(id(p)) if p is not None else None
            out.append(replace(e, name=n) if n is not None else e)
        return replace(self, params=out)

    def __str__(self) -> str:
        head = (f"GradScaler skipped the optimizer step of iteration {self.iteration} "
                f"(scale {self.scale:g}): ")
        if self.params:
            lines = [head + f"{len(self.params)} gradient(s) held inf/NaN"]
            lines += [f"  {p}" for p in self.params]
        else:
            lines = [head + "inf/NaN gradients"]
        if self.op is not None:
            lines.append(f"  first inf/NaN: {self.op} ({self.phase}), created at {self.where}")
        elif not self.anomaly_mode:
            lines.append("  (run with ember.autograd.set_detect_anomaly(True) to see the op "
                         "and line that first produced it)")
        return "\n".join(lines)
