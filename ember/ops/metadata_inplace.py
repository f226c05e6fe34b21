"""In-place view ops (``unsqueeze_``, ``squeeze_``, ``t_``, ``transpose_``, ``swapdims_``,
``swapaxes_``, ``as_strided_``) and the CPU-only ``apply_``/``map_``.

An in-place view op changes the tensor's own shape and strides over the same storage.
Ember supports that for tensors outside autograd (not requiring grad, or under
``no_grad``) and outside graph capture — what data-preparation code does
(``img.unsqueeze_(0)``); elsewhere it raises and names the out-of-place spelling, since
rebasing a differentiable tensor's history onto a new view is not implemented.

Example:
    >>> x = ember.zeros(3)
    >>> x.unsqueeze_(0).shape
    ember.Size([1, 3])
"""
from __future__ import annotations

import numpy as np

from ..autograd.grad_mode import state
from ..tensor import Tensor

__all__: list = []


def _restride(self: Tensor, view: Tensor, op: str, spelling: str) -> Tensor:
    if state.modes:
        raise RuntimeError(f"{op}: in-place view ops are not supported while a graph is "
                           f"being captured; write x = {spelling}")
    if self.grad_fn is not None or (self.requires_grad and state.grad_enabled):
        raise RuntimeError(f"{op}: in-place view ops on a tensor that requires grad or has "
                           f"autograd history are not supported; write x = {spelling} (a "
                           f"leaf may be reshaped under ember.no_grad())")
    self._data = view._data
    return self


def _unsqueeze_(self, dim):
    return _restride(self, self.unsqueeze(dim), "unsqueeze_", f"x.unsqueeze({dim})")


def _squeeze_(self, dim=None):
    v = self.squeeze() if dim is None else self.squeeze(dim)
    return _restride(self, v, "squeeze_", "x.squeeze(...)")


def _t_(self):
    return _restride(self, self.t(), "t_", "x.t()")


def _transpose_(self, dim0, dim1):
    return _restride(self, self.transpose(dim0, dim1), "transpose_",
                     f"x.transpose({dim0}, {dim1})")


def _as_strided_(self, size, stride, storage_offset=None):
    v = self.as_strided(size, stride, storage_offset)
    return _restride(self, v, "as_strided_", "x.as_strided(...)")


def _host_map(self: Tensor, fn, op: str, *others) -> Tensor:
    if self.device.type != "cpu":
        raise RuntimeError(f"{op} is only implemented on CPU tensors, got {self.device}")
    if self.requires_grad and state.grad_enabled:
        raise RuntimeError(f"{op}: a Python callable cannot be differentiated; run it under "
                           f"ember.no_grad() on a tensor that does not require grad")
    from .inplace import commit
    from .factories import tensor
    arrs = [np.asarray(t.detach().numpy()) for t in (self,) + others]
    out = np.vectorize(fn, otypes=[self.dtype.np])(*arrs) if self.numel() else arrs[0]
    return commit(self, tensor(out, dtype=self.dtype), op)


def _apply_(self, callable):
    """Replace each element by ``callable(element)`` (CPU, no autograd) (``Tensor.apply_``)."""
    return _host_map(self, callable, "apply_")


def _map_(self, tensor, callable):
    """Replace each element by ``callable(self_elem, tensor_elem)`` (``Tensor.map_``)."""
    return _host_map(self, callable, "map_", tensor.expand(self.shape))


Tensor.unsqueeze_ = _unsqueeze_
Tensor.squeeze_ = _squeeze_
Tensor.t_ = _t_
Tensor.transpose_ = Tensor.swapdims_ = Tensor.swapaxes_ = _transpose_
Tensor.as_strided_ = _as_strided_
Tensor.apply_ = _apply_
Tensor.map_ = _map_
