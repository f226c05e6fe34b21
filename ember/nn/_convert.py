"""Moving and casting a :class:`~ember.nn.Module`: ``to``, ``float``, ``double``, ``cpu``...

``_apply(fn)`` rewrites every parameter *in place* (``param.data = fn(param)``), so the
Parameter objects an optimizer holds stay valid, as in PyTorch.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..autograd.grad_mode import no_grad
from ..device import device as _device
from ..tensor import Tensor


#: the tensor ranks ``Module.to(memory_format=)`` lays out (PyTorch: 4-D and 5-D ones)
_FORMAT_RANKS = {"channels_last": (4,), "channels_last_3d": (5,), "contiguous_format": (4, 5)}


class _ConversionMixin:
    """The conversion half of ``Module`` (kept apart to keep module.py readable)."""

    def _apply(self, fn, recurse: bool = True) -> "Module":
        """Apply ``fn`` to every parameter (in place: the Parameter objects stay the same,
        so optimizers keep working), its gradient, and every buffer."""
        if recurse:
            for m in self.children():
                m._apply(fn)
        with no_grad():
            for p in self._parameters.values():
                if p is None:
                    continue
                new = fn(p)
                if new is not p:
                    p.data = new
                if p.grad is not None:
                    g = fn(p.grad)
                    if g is not p.grad:
                        p._grad = g
            for k, b in self._buffers.items():
                if b is not None:
                    self._buffers[k] = fn(b)
        return self

    _apply_tensors = _apply   # NOTE: the first version's name, kept for compatibility

    def to(self, *args, **kwargs) -> "Module":
        """Move and/or cast parameters and buffers: ``to(device)``, ``to(dtype)``,
        ``to(device, dtype)``, ``to(tensor)``; dtype casts touch floating-point ones only;
        ``memory_format=ember.channels_last`` lays 4-D ones (conv weights) out in NHWC order.

        Example:
            >>> m = ember.nn.Linear(2, 2).to(ember.float64)
            >>> m.weight.dtype
            ember.float64
        """
        fmt = kwargs.get("memory_format")
        device, dtype, non_blocking = _parse_to(args, kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, "
                            f"but got desired dtype={dtype}")

        def convert(t):
            if t.is_meta and device is not None and _device(device).type != "meta":
                raise NotImplementedError(
                    "Cannot copy out of meta tensor; no data! Please use "
                    "ember.nn.Module.to_empty() instead of ember.nn.Module.to() when moving "
                    "module from meta to a different device.")
            return t.to(device=device, dtype=dtype if t.is_floating_point() else None,
                        non_blocking=non_blocking,
                        memory_format=fmt if fmt is not None and t.dim() in _FORMAT_RANKS.get(
                            getattr(fmt, "name", None), ()) else None)
        return self._apply(convert)

    def to_empty(self, *, device, recurse: bool = True) -> "Module":
        """Give every parameter and buffer new *uninitialised* storage on ``device`` (same
        shapes and dtypes): how a model built on the ``meta`` device gets real memory,
        to be filled by ``load_state_dict`` or ``reset_parameters()``.

        Example:
            >>> with ember.device("meta"):
            ...     m = ember.nn.Linear(2, 3)
            >>> m = m.to_empty(device="cpu")
            >>> with ember.no_grad():
            ...     m.reset_parameters()
        """
        from ..ops.factories import empty_like
        return self._apply(lambda t: empty_like(t, device=device), recurse=recurse)

    def _cast_float(self, dtype) -> "Module":
        return self._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)

    def float(self) -> "Module":
        return self._cast_float(_dt.float32)

    def double(self) -> "Module":
        return self._cast_float(_dt.float64)

    def half(self) -> "Module":
        return self._cast_float(_dt.float16)

    def bfloat16(self) -> "Module":
        return self._cast_float(_dt.bfloat16)

    def type(self, dst_type) -> "Module":
        """Cast all parameters and buffers (integer ones too) to ``dst_type``."""
        dst = _dt.as_dtype(dst_type)
        return self._apply(lambda t: t.to(dst))

    def cpu(self) -> "Module":
        return self.to("cpu")

    def cuda(self, device=None) -> "Module":
        if device is None:
            return self.to("cuda")
        return self.to(f"cuda:{device}" if isinstance(device, int) else device)

    def share_memory(self) -> "Module":
        return self   # NOTE: CPU storages are process-local NumPy buffers; nothing to do


def _parse_to(args, kwargs):
    """(device, dtype, non_blocking) from ``Module.to``'s flexible arguments."""
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    non_blocking = kwargs.pop("non_blocking", False)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, _dt.DType):
            dtype = a
        elif isinstance(a, _device):
            device = a
        elif isinstance(a, str):
            try:
                device = _device(a)
            except (ValueError, TypeError, RuntimeError):
                dtype = _dt.as_dtype(a)
        elif isinstance(a, bool):
            non_blocking = a
        elif a is not None:
            raise TypeError(f"to() received an invalid argument {a!r}: expected a device, "
                            f"a dtype or a tensor")
    if dtype is not None:
        dtype = _dt.as_dtype(dtype)
    return device, dtype, non_blocking
