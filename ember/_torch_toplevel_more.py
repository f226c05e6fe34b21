"""More of ``torch``'s top-level callables: the ``*_copy`` variants of view ops (a view,
then a copy: the result never aliases its input), top-level spellings of functionals
(``torch.conv3d``, ``torch.max_pool3d``, ``torch.channel_shuffle``, ``torch.conv_tbc``...),
the single-step RNN cells (``torch.lstm_cell``, ``gru_cell``, ``rnn_tanh_cell``,
``rnn_relu_cell`` with PyTorch's gate order), the legacy per-device autocast switches
(``torch.is_autocast_cpu_enabled``...), the ``sym_*`` helpers on plain Python numbers,
the deprecated inclusive ``torch.range`` and a few small truthful queries.

Example:
    >>> x = ember.arange(6.).reshape(2, 3)
    >>> y = ember.transpose_copy(x, 0, 1)
    >>> y[0, 0] = 9.
    >>> float(x[0, 0])
    0.0
"""
from __future__ import annotations

import builtins
import math
import warnings

from . import dtypes as _dt
from .nn import functional as F
from .tensor import Tensor

__all__ = ["alias_copy", "as_strided_copy", "detach_copy", "diagonal_copy", "expand_copy",
           "permute_copy", "select_copy", "slice_copy", "split_copy", "split_with_sizes_copy",
           "squeeze_copy", "t_copy", "transpose_copy", "unbind_copy", "unfold_copy",
           "unsqueeze_copy", "view_copy", "view_as_real_copy", "view_as_complex_copy",
           "conv3d", "conv_transpose3d", "max_pool3d", "max_pool1d_with_indices",
           "channel_shuffle", "native_channel_shuffle", "constant_pad_nd", "conv_tbc",
           "rnn_tanh_cell", "rnn_relu_cell", "gru_cell", "lstm_cell", "detach_", "addmv_",
           "index_put_", "as_strided_", "resize_as_", "conj_physical_", "nonzero_static",
           "is_autocast_cpu_enabled", "set_autocast_cpu_enabled", "get_autocast_cpu_dtype",
           "set_autocast_cpu_dtype", "get_autocast_gpu_dtype", "set_autocast_gpu_dtype",
           "is_autocast_cache_enabled", "set_autocast_cache_enabled", "clear_autocast_cache",
           "sym_float", "sym_int", "sym_max", "sym_min", "sym_not", "sym_sqrt", "sym_sum",
           "sym_ite", "range", "to_dlpack", "is_distributed", "is_vulkan_available"]


# ---------------------------------------------------------------- *_copy variants
def _copied(view):
    def fn(input, *args, **kwargs):
        out = view(input, *args, **kwargs)
        if isinstance(out, (tuple, list)):
            return tuple(t.clone() for t in out)
        return out.clone()
    name = view.__name__ if hasattr(view, "__name__") else "view"
    fn.__doc__ = (f"The same as ``{name}`` but the result is a copy (``torch.{name}_copy``): "
                  f"it never shares memory with ``input``.")
    return fn


def _slice(input, dim=0, start=None, end=None, step=1):
    idx = [builtins.slice(None)] * input.ndim
    idx[dim] = builtins.slice(start, end, step)
    return input[tuple(idx)]


alias_copy = _copied(lambda x: x)
as_strided_copy = _copied(lambda x, size, stride, storage_offset=None:
                          x.as_strided(size, stride, storage_offset))
detach_copy = _copied(Tensor.detach)
diagonal_copy = _copied(lambda x, offset=0, dim1=0, dim2=1: x.diagonal(offset, dim1, dim2))
expand_copy = _copied(lambda x, size, *, implicit=False: x.expand(*size))
permute_copy = _copied(lambda x, dims: x.permute(*dims))
select_copy = _copied(lambda x, dim, index: x.select(dim, index))
slice_copy = _copied(_slice)
split_copy = _copied(lambda x, split_size, dim=0: x.split(split_size, dim))
split_with_sizes_copy = _copied(lambda x, split_sizes, dim=0: x.split(list(split_sizes), dim))
squeeze_copy = _copied(lambda x, dim=None: x.squeeze() if dim is None else x.squeeze(dim))
t_copy = _copied(Tensor.t)
transpose_copy = _copied(lambda x, dim0, dim1: x.transpose(dim0, dim1))
unbind_copy = _copied(lambda x, dim=0: x.unbind(dim))
unfold_copy = _copied(lambda x, dimension, size, step: x.unfold(dimension, size, step))
unsqueeze_copy = _copied(lambda x, dim: x.unsqueeze(dim))
view_copy = _copied(lambda x, *size: x.view(*size))


def view_as_real_copy(input):
    """``view_as_real`` then a copy (``torch.view_as_real_copy``)."""
    from .ops.complex import view_as_real
    return view_as_real(input).clone()


def view_as_complex_copy(input):
    """``view_as_complex`` then a copy (``torch.view_as_complex_copy``)."""
    from .ops.complex import view_as_complex
    return view_as_complex(input).clone()


# ---------------------------------------------------------------- functionals at top level
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.conv3d``: :func:`ember.nn.functional.conv3d`."""
    return F.conv3d(input, weight, bias, stride, padding, dilation, groups)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """``torch.conv_transpose3d``: :func:`ember.nn.functional.conv_transpose3d`."""
    return F.conv_transpose3d(input, weight, bias, stride, padding, output_padding, groups,
                              dilation)


def max_pool3d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``torch.max_pool3d`` (values only): :func:`ember.nn.functional.max_pool3d`."""
    return F.max_pool3d(input, kernel_size, stride or None, padding, dilation, ceil_mode)


def max_pool1d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1,
                            ceil_mode=False):
    """``torch.max_pool1d_with_indices``: (values, indices)."""
    return F.max_pool1d(input, kernel_size, stride or None, padding, dilation, ceil_mode,
                        return_indices=True)


def channel_shuffle(input, groups: int):
    """``torch.channel_shuffle``: :func:`ember.nn.functional.channel_shuffle`."""
    return F.channel_shuffle(input, groups)


native_channel_shuffle = channel_shuffle


def constant_pad_nd(input, pad, value=0):
    """``torch.constant_pad_nd``: ``F.pad(input, pad, "constant", value)``."""
    return F.pad(input, list(pad), "constant", value)


def conv_tbc(input, weight, bias, pad: int = 0):
    """``torch.conv_tbc``: :func:`ember.nn.functional.conv_tbc`."""
    return F.conv_tbc(input, weight, bias, pad)


# ---------------------------------------------------------------- RNN cells
def _affine(x, w, b):
    return F.linear(x, w, b)


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One Elman step: ``tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""
    return (_affine(input, w_ih, b_ih) + _affine(hx, w_hh, b_hh)).tanh()


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One Elman step with ReLU: ``relu(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""
    return (_affine(input, w_ih, b_ih) + _affine(hx, w_hh, b_hh)).relu()


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One GRU step, PyTorch's gates (r, z, n): ``n = tanh(i_n + r * h_n)``,
    ``h' = (1 - z) * n + z * h``."""
    i_r, i_z, i_n = _affine(input, w_ih, b_ih).chunk(3, -1)
    h_r, h_z, h_n = _affine(hx, w_hh, b_hh).chunk(3, -1)
    r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    return (1 - z) * n + z * hx


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step, PyTorch's gates (i, f, g, o); ``hx = (h, c)``; returns ``(h', c')``."""
    h, c = hx
    gates = _affine(input, w_ih, b_ih) + _affine(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, -1)
    c2 = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c2.tanh(), c2


# ---------------------------------------------------------------- in-place at top level
def detach_(input):
    """``torch.detach_(t)`` = ``t.detach_()``."""
    return input.detach_()


def addmv_(input, mat, vec, *, beta=1, alpha=1):
    """``torch.addmv_(t, ...)`` = ``t.addmv_(...)``."""
    return input.addmv_(mat, vec, beta=beta, alpha=alpha)


def index_put_(input, indices, values, accumulate=False):
    """``torch.index_put_(t, ...)`` = ``t.index_put_(...)``."""
    return input.index_put_(indices, values, accumulate)


def as_strided_(input, size, stride, storage_offset=None):
    """``torch.as_strided_(t, ...)`` = ``t.as_strided_(...)``."""
    return input.as_strided_(size, stride, storage_offset)


def resize_as_(input, the_template, *, memory_format=None):
    """``torch.resize_as_(t, other)`` = ``t.resize_as_(other)``."""
    return input.resize_as_(the_template)


def conj_physical_(input):
    """``torch.conj_physical_(t)`` = ``t.conj_physical_()``."""
    return input.conj_physical_()


def nonzero_static(input, *, size, fill_value=-1):
    """``torch.nonzero_static``: the first ``size`` nonzero indices, padded with
    ``fill_value`` rows."""
    return input.nonzero_static(size=size, fill_value=fill_value)


# ---------------------------------------------------------------- legacy autocast switches
def _amp(old: str = "", new: str = ""):
    from . import amp
    if old:   # NOTE: PyTorch's deprecation warning, same text
        warnings.warn(f"torch.{old} is deprecated. Please use torch.{new} instead.",
                      DeprecationWarning, stacklevel=3)
    return amp


def is_autocast_cpu_enabled() -> bool:
    """Deprecated ``torch.is_autocast_cpu_enabled()`` = ``is_autocast_enabled("cpu")``."""
    amp = _amp("is_autocast_cpu_enabled()", "is_autocast_enabled('cpu')")
    return amp.is_autocast_enabled("cpu")


def set_autocast_cpu_enabled(enabled: bool) -> None:
    """Deprecated ``torch.set_autocast_cpu_enabled`` = ``set_autocast_enabled("cpu", ..)``."""
    amp = _amp("set_autocast_cpu_enabled(enabled)", "set_autocast_enabled('cpu', enabled)")
    amp.set_autocast_enabled("cpu", enabled)


def get_autocast_cpu_dtype():
    """Deprecated ``torch.get_autocast_cpu_dtype()`` = ``get_autocast_dtype("cpu")``."""
    amp = _amp("get_autocast_cpu_dtype()", "get_autocast_dtype('cpu')")
    return amp.get_autocast_dtype("cpu")


def set_autocast_cpu_dtype(dtype) -> None:
    """Deprecated ``torch.set_autocast_cpu_dtype`` = ``set_autocast_dtype("cpu", dtype)``."""
    amp = _amp("set_autocast_cpu_dtype(dtype)", "set_autocast_dtype('cpu', dtype)")
    amp.set_autocast_dtype("cpu", dtype)


def get_autocast_gpu_dtype():
    """Deprecated ``torch.get_autocast_gpu_dtype()`` = ``get_autocast_dtype("cuda")``."""
    amp = _amp("get_autocast_gpu_dtype()", "get_autocast_dtype('cuda')")
    return amp.get_autocast_dtype("cuda")


def set_autocast_gpu_dtype(dtype) -> None:
    """Deprecated ``torch.set_autocast_gpu_dtype`` = ``set_autocast_dtype("cuda", dtype)``."""
    amp = _amp("set_autocast_gpu_dtype(dtype)", "set_autocast_dtype('cuda', dtype)")
    amp.set_autocast_dtype("cuda", dtype)


def is_autocast_cache_enabled() -> bool:
    """Whether autocast caches its weight casts (``torch.is_autocast_cache_enabled``)."""
    return _amp().is_autocast_cache_enabled()


def set_autocast_cache_enabled(enabled: bool) -> None:
    """``torch.set_autocast_cache_enabled``."""
    _amp().set_autocast_cache_enabled(enabled)


def clear_autocast_cache() -> None:
    """``torch.clear_autocast_cache``."""
    _amp().clear_autocast_cache()


# ---------------------------------------------------------------- sym_* on plain numbers
def sym_float(a):
    """``float(a)`` (``torch.sym_float``; Ember has no symbolic sizes)."""
    return float(a)


def sym_int(a):
    """``int(a)`` truncating toward zero (``torch.sym_int``)."""
    return int(a)


def sym_max(a, b):
    """``max(a, b)`` (``torch.sym_max``)."""
    return builtins.max(a, b)


def sym_min(a, b):
    """``min(a, b)`` (``torch.sym_min``)."""
    return builtins.min(a, b)


def sym_not(a):
    """``not a`` (``torch.sym_not``)."""
    return not a


def sym_sqrt(a):
    """``math.sqrt(a)`` (``torch.sym_sqrt``)."""
    return math.sqrt(a)


def sym_sum(args):
    """``sum(args)`` (``torch.sym_sum``)."""
    return builtins.sum(args)


def sym_ite(b, t, f):
    """``t if b else f`` (``torch.sym_ite``)."""
    return t if b else f


# ---------------------------------------------------------------- small ones
def range(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """Deprecated ``torch.range``: like ``arange`` but *including* ``end``
    (``floor((end - start) / step) + 1`` values, default float dtype); warns as PyTorch.

    Example:
        >>> ember.range(1, 4)     # doctest: +SKIP (warns)
        tensor([1., 2., 3., 4.])
    """
    from .ops.factories import arange
    warnings.warn("torch.range is deprecated and will be removed in a future release because "
                  "its behavior is inconsistent with Python's range builtin. Instead, use "
                  "torch.arange, which produces values in [start, end).", UserWarning,
                  stacklevel=2)
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("range: step must be nonzero")
    n = math.floor((end - start) / step) + 1
    if n < 0:
        raise ValueError(f"range: upper bound and larger bound inconsistent with step sign "
                         f"(start={start}, end={end}, step={step})")
    dtype = dtype or _dt.get_default_dtype()
    out = arange(n, dtype=_dt.float64, device=device) * step + start
    return out.to(dtype).requires_grad_(requires_grad)


def to_dlpack(tensor):
    """A DLPack capsule sharing ``tensor``'s memory (``torch.to_dlpack``)."""
    return tensor.__dlpack__()


def is_distributed(input) -> bool:
    """False: Ember tensors are never distributed tensors (``torch.is_distributed``)."""
    return False


def is_vulkan_available() -> bool:
    """False: Ember has no Vulkan backend."""
    return False
