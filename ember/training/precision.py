"""``ember train --amp {bf16,fp16}``: mixed-precision steps for the training loop.

The parameters and the optimizer stay in float32; the forward runs under
``ember.autocast(device_type, dtype)`` for the training device (``--device``: "cpu" or
"cuda"; matmuls and convolutions in the low dtype, losses in float32), and the backward
follows the dtypes the forward chose. ``fp16`` adds a
:class:`ember.amp.GradScaler` against gradient underflow: its state goes into the
checkpoint, so a resumed run continues with the same loss scale. ``bf16`` has float32's
range and needs no scaling. Without ``--amp`` both contexts are no-ops. A skipped fp16
step still counts as a step (the schedule advances, as in PyTorch scripts), and the
held-out evaluation runs in float32.
"""
from __future__ import annotations

import contextlib

import ember as em
from ember.amp.grad_scaler import GradScaler

from .errors import CheckpointError, UsageError

__all__ = ["AMP_CHOICES", "Precision"]

AMP_CHOICES = ("bf16", "fp16")


class Precision:
    """The forward context and the backward/step of one training step for ``amp``.

    Args:
        amp: ``None`` (float32), ``"bf16"`` or ``"fp16"``.
        device: the training device (``"cpu"``, ``"cuda"``, ``"cuda:1"``...): autocast and
            the GradScaler act on its device type (an autocast region of another device
            type would leave the model's ops alone).

    Example:
        >>> prec = Precision("fp16")
        >>> with prec.autocast():
        ...     loss = loss_fn(model(x), y)
        >>> opt.zero_grad(); prec.backward_step(loss, opt)
    """

    def __init__(self, amp: str | None = None, device: str = "cpu") -> None:
        if amp is not None and amp not in AMP_CHOICES:
            raise UsageError(f"--amp must be one of {', '.join(AMP_CHOICES)}, got {amp!r}")
        if amp is not None and not hasattr(em, "autocast"):
            raise UsageError(f"--amp {amp} needs ember.autocast, which this build lacks")
        self.amp = amp
        self.dtype = {"bf16": em.bfloat16, "fp16": em.float16}.get(amp)
        self.device_type = em.device(device).type
        self.scaler = GradScaler(self.device_type, enabled=amp == "fp16")

    def autocast(self):
        """The context the forward (and the loss) runs in."""
        if self.amp is None:
            return contextlib.nullcontext()
        return em.autocast(self.device_type, dtype=self.dtype)

    def backward_step(self, loss, opt) -> bool:
        """Backward and optimizer step (through the scaler with fp16); False if skipped."""
        scaler = self.scaler
        scaler.scale(loss).backward()
        if not scaler.is_enabled():
            opt.step()
            return True
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        # NOTE: the scale backs off exactly when the step was skipped
        return scaler.get_scale() >= before

    def state_dict(self) -> dict:
        """The scaler's state (``{}`` without fp16)."""
        return self.scaler.state_dict()

    def load_state_dict(self, ck: dict, path: str) -> None:
        """Restore the scaler from checkpoint ``ck`` (written at ``path``), if it has one."""
        sd = ck.get("grad_scaler")
        if not self.scaler.is_enabled() or sd is None:
            return
        if not isinstance(sd, dict):
            raise CheckpointError(f"checkpoint {path}: 'grad_scaler' must be a dict (a state "
                                  f"dict), got {type(sd).__name__}")
        try:
            self.scaler.load_state_dict(sd)
        except (KeyError, ValueError, TypeError, RuntimeError) as e:
            raise CheckpointError(f"checkpoint {path}: 'grad_scaler': {e}") from e
