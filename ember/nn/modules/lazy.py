"""Lazy modules (``torch.nn.modules.lazy`` and the ``Lazy*`` layers): the input size is
read from the first call's input.

A lazy module holds :class:`~ember.nn.UninitializedParameter` s (and
``UninitializedBuffer`` s); a forward pre-hook materialises them from the first input,
runs ``reset_parameters()`` and turns the module into its ``cls_to_become`` (``LazyLinear``
becomes ``Linear``), as PyTorch does. ``load_state_dict`` into a lazy module materialises
its parameters with the loaded shapes. Create optimizers after a dry run.

Example:
    >>> fc = ember.nn.LazyLinear(4)
    >>> fc(ember.ones(2, 3)).shape
    ember.Size([2, 4])
    >>> type(fc).__name__, tuple(fc.weight.shape)
    ('Linear', (4, 3))
"""
from __future__ import annotations

from .._uninitialized import UninitializedBuffer, UninitializedParameter, is_lazy
from .conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
                   ConvTranspose3d)
from .instancenorm import InstanceNorm3d
from .linear import Linear
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d,
                            InstanceNorm2d)

__all__ = ["LazyModuleMixin", "UninitializedParameter", "UninitializedBuffer",
           "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d",
           "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyBatchNorm1d", "LazyBatchNorm2d",
           "LazyBatchNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d",
           "LazyInstanceNorm3d"]


class LazyModuleMixin:
    """Mixin of the ``Lazy*`` modules: subclasses define ``initialize_parameters(*args)``
    (materialise from the first input) and ``cls_to_become``."""

    cls_to_become = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._register_initialize_hook()

    def _register_initialize_hook(self) -> None:
        """The forward pre-hook that materialises the parameters on the first call."""
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters,
                                                               with_kwargs=True)

    def has_uninitialized_params(self) -> bool:
        """Whether any parameter or buffer of this module is still uninitialised."""
        tensors = list(self._parameters.values()) + list(self._buffers.values())
        return any(is_lazy(t) for t in tensors)

    def initialize_parameters(self, *args, **kwargs) -> None:
        """Materialise the parameters from the first call's arguments."""
        raise NotImplementedError(f"initialize_parameters is not implemented for "
                                  f"{type(self).__name__}")

    @staticmethod
    def _infer_parameters(module, args, kwargs=None):
        module.initialize_parameters(*args, **(kwargs or {}))
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {module._get_name()} has not been fully initialized")
        module._initialize_hook.remove()
        del module._initialize_hook
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict,
                              missing_keys, unexpected_keys, error_msgs) -> None:
        for name, t in [*self._parameters.items(), *self._buffers.items()]:
            key = prefix + name
            if is_lazy(t) and key in state_dict:
                t.materialize(state_dict[key].shape)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                      missing_keys, unexpected_keys, error_msgs)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params():
            super().reset_parameters()

    def _apply(self, fn, recurse: bool = True):
        # NOTE: Module._apply replaces buffers by fn(b); an uninitialised buffer must stay
        # the same placeholder (now with fn's dtype/device) so the first call materialises it.
        lazy = {k: b for k, b in self._buffers.items() if is_lazy(b)}
        super()._apply(fn, recurse)
        for k, b in lazy.items():
            new = self._buffers[k]
            b._data, b._storage, b._dtype, b._device = (new._data, new._storage, new._dtype,
                                                        new._device)
            self._buffers[k] = b
        return self


def _kw(device, dtype):
    return dict(device=device, dtype=dtype)


class LazyLinear(LazyModuleMixin, Linear):
    """:class:`Linear` whose ``in_features`` is ``input.shape[-1]`` of the first call."""

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(0, 0, False)
        self.weight = UninitializedParameter(**_kw(device, dtype))
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(**_kw(device, dtype))

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if self.has_uninitialized_params():
            self.in_features = input.shape[-1]
            self.weight.materialize((self.out_features, self.in_features))
            if self.bias is not None:
                self.bias.materialize((self.out_features,))
            self.reset_parameters()


class _LazyConvMixin(LazyModuleMixin):
    """In-channels from the first input (batched or unbatched), then PyTorch's shapes."""

    def _lazy_init(self, out_channels, bias, device, dtype) -> None:
        self.weight = UninitializedParameter(**_kw(device, dtype))
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(**_kw(device, dtype))

    def _get_in_channels(self, input) -> int:
        nsp = len(self.kernel_size)
        if input.ndim not in (nsp + 1, nsp + 2):
            raise RuntimeError(f"Expected {nsp + 1}D (unbatched) or {nsp + 2}D (batched) "
                               f"input to {type(self).__name__}, but got input of size: "
                               f"{list(input.shape)}")
        return input.shape[1] if input.ndim == nsp + 2 else input.shape[0]

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if not self.has_uninitialized_params():
            return
        self.in_channels = self._get_in_channels(input)
        if self.in_channels % self.groups:
            raise ValueError(f"{type(self).__name__}: in_channels ({self.in_channels}) must "
                             f"be divisible by groups ({self.groups})")
        if self.transposed:
            shape = (self.in_channels, self.out_channels // self.groups)
        else:
            shape = (self.out_channels, self.in_channels // self.groups)
        self.weight.materialize(shape + tuple(self.kernel_size))
        if self.bias is not None:
            self.bias.materialize((self.out_channels,))
        self.reset_parameters()


def _lazy_type(mixin, base, init, doc):
    """The class ``Lazy<base>``: ``mixin`` and ``base`` with ``init``, becoming ``base``."""
    return type("Lazy" + base.__name__, (mixin, base),
                {"__init__": init, "cls_to_become": base, "__doc__": doc,
                 "__module__": __name__})


def _lazy_conv(base, doc):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        base.__init__(self, 0, 0, kernel_size, stride, padding, dilation, groups, False,
                      padding_mode, device, dtype)
        self._register_initialize_hook()
        self._lazy_init(out_channels, bias, device, dtype)
    return _lazy_type(_LazyConvMixin, base, __init__, doc)


def _lazy_conv_t(base, doc):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 groups=1, bias=True, dilation=1, padding_mode="zeros", device=None,
                 dtype=None):
        base.__init__(self, 0, 0, kernel_size, stride, padding, output_padding, groups, False,
                      dilation, padding_mode, device, dtype)
        self._register_initialize_hook()
        self._lazy_init(out_channels, bias, device, dtype)
    return _lazy_type(_LazyConvMixin, base, __init__, doc)


LazyConv1d = _lazy_conv(Conv1d, "Conv1d with in_channels from the first input.")
LazyConv2d = _lazy_conv(Conv2d, "Conv2d with in_channels from the first input.")
LazyConv3d = _lazy_conv(Conv3d, "Conv3d with in_channels from the first input.")
LazyConvTranspose1d = _lazy_conv_t(ConvTranspose1d,
                                   "ConvTranspose1d with in_channels from the first input.")
LazyConvTranspose2d = _lazy_conv_t(ConvTranspose2d,
                                   "ConvTranspose2d with in_channels from the first input.")
LazyConvTranspose3d = _lazy_conv_t(ConvTranspose3d,
                                   "ConvTranspose3d with in_channels from the first input.")


class _LazyNormMixin(LazyModuleMixin):
    """``num_features = input.shape[1]`` (``shape[0]`` for unbatched instance norm)."""

    def _lazy_init(self, affine, track_running_stats, device, dtype) -> None:
        kw = _kw(device, dtype)
        if affine:
            self.weight = UninitializedParameter(**kw)
            self.bias = UninitializedParameter(**kw)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(**kw)
            self.running_var = UninitializedBuffer(**kw)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if not self.has_uninitialized_params():
            return
        self._check_input_dim(input)
        unbatched = input.ndim == self._dims[0] and "Instance" in type(self).__name__
        self.num_features = input.shape[0] if unbatched else input.shape[1]
        for t in (self.weight, self.bias, self.running_mean, self.running_var):
            if t is not None and is_lazy(t):
                t.materialize((self.num_features,))
        self.reset_parameters()


def _lazy_norm(base, affine, track, doc):
    def __init__(self, eps=1e-5, momentum=0.1, affine=affine, track_running_stats=track,
                 device=None, dtype=None):
        base.__init__(self, 0, eps, momentum, False, False, device, dtype)
        self.affine, self.track_running_stats = affine, track_running_stats
        if track_running_stats:   # NOTE: a real 0-d counter, as PyTorch's
            from ... import dtypes
            from ...ops.factories import zeros
            self.num_batches_tracked = zeros((), device=device, dtype=dtypes.int64)
        self._register_initialize_hook()
        self._lazy_init(affine, track_running_stats, device, dtype)
    return _lazy_type(_LazyNormMixin, base, __init__, doc)


LazyBatchNorm1d = _lazy_norm(BatchNorm1d, True, True,
                             "BatchNorm1d with num_features from the first input.")
LazyBatchNorm2d = _lazy_norm(BatchNorm2d, True, True,
                             "BatchNorm2d with num_features from the first input.")
LazyBatchNorm3d = _lazy_norm(BatchNorm3d, True, True,
                             "BatchNorm3d with num_features from the first input.")
LazyInstanceNorm1d = _lazy_norm(InstanceNorm1d, False, False,
                                "InstanceNorm1d with num_features from the first input.")
LazyInstanceNorm2d = _lazy_norm(InstanceNorm2d, False, False,
                                "InstanceNorm2d with num_features from the first input.")
LazyInstanceNorm3d = _lazy_norm(InstanceNorm3d, False, False,
                                "InstanceNorm3d with num_features from the first input.")
