"""``SyncBatchNorm``: batch norm whose training statistics are computed over every process
of a group (``torch.nn.SyncBatchNorm``).

Without an initialised ``ember.distributed`` (or in a group of one, or in eval mode) it is
exactly :class:`BatchNorm` over any ``(N, C, *)`` input. With one, the per-channel sums
are all-reduced (two collectives: the sum and count, then the sum of squared deviations
from the global mean, which is as stable as a single-process two-pass variance); the
all-reduce is differentiable (its backward all-reduces the gradient), so gradients are
those of the global statistics. Ember deliberately differs from PyTorch in allowing this
on CPU tensors (PyTorch's sync path requires GPU tensors): Ember's collectives run on
CPU through MPI.
"""
from __future__ import annotations

from ...autograd.function import Function
from ...autograd.grad_mode import no_grad
from .normalization import _BatchNorm

__all__ = ["SyncBatchNorm"]


class _AllReduceSum(Function):
    """Differentiable all-reduce (sum): the gradient is all-reduced too."""

    @staticmethod
    def forward(ctx, x, group):
        from ... import distributed as dist
        ctx.group = group
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        from ... import distributed as dist
        g = grad.clone()
        dist.all_reduce(g, group=ctx.group)
        return g, None


class SyncBatchNorm(_BatchNorm):
    """Batch norm over ``(N, C, *)`` input with statistics synchronised across processes.

    Args:
        num_features: ``C``.
        eps, momentum, affine, track_running_stats, device, dtype, bias: as BatchNorm.
        process_group: the ``ember.distributed`` group to synchronise over (default: world).

    Example:
        >>> bn = ember.nn.SyncBatchNorm(3)
        >>> bn(ember.randn(4, 3, 5)).shape       # no process group: plain batch norm
        ember.Size([4, 3, 5])
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, process_group=None,
                 device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)
        self.process_group = process_group

    def _check_input_dim(self, input) -> None:
        if input.ndim < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {input.ndim}D "
                             f"input)")

    def _needs_sync(self) -> bool:
        """Training with an initialised ``ember.distributed`` group of more than one."""
        from ... import distributed as dist
        return (self.training and dist.is_initialized()
                and dist.get_world_size(self.process_group) > 1)

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        if not self._needs_sync():
            return super().forward(input)
        return self._sync_forward(input, self.process_group, self._factor())

    def _sync_forward(self, input, group, factor):
        from ...ops.factories import tensor
        dims = [0] + list(range(2, input.ndim))
        shape = [1, -1] + [1] * (input.ndim - 2)
        count = tensor([float(input.numel() // input.shape[1])], dtype=input.dtype,
                       device=input.device)
        tot = _AllReduceSum.apply(input.sum(dim=dims), group)
        n = _AllReduceSum.apply(count, group)
        mean = tot / n
        dev = input - mean.reshape(shape)
        var = _AllReduceSum.apply((dev * dev).sum(dim=dims), group) / n
        out = dev * (var + self.eps).rsqrt().reshape(shape)
        if self.weight is not None:
            out = out * self.weight.reshape(shape)
        if self.bias is not None:
            out = out + self.bias.reshape(shape)
        if self.track_running_stats:
            with no_grad():
                nn_ = float(n.item())
                unbiased = var.detach() * (nn_ / max(nn_ - 1.0, 1.0))
                self.running_mean.mul_(1 - factor).add_(mean.detach() * factor)
                self.running_var.mul_(1 - factor).add_(unbiased * factor)
        return out

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """Replace every ``BatchNorm*D`` in ``module`` by a ``SyncBatchNorm`` holding the same
        parameters and buffers (returns the converted module, as PyTorch)."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_group)
            for name in ("weight", "bias"):
                if getattr(module, name, None) is not None:
                    out._parameters[name] = module._parameters[name]
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                out._buffers[name] = module._buffers.get(name)
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out
