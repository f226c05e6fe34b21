"""The errors ``ember train`` reports as one line (the CLI prints them without a traceback)."""
from __future__ import annotations

__all__ = ["UsageError", "CheckpointError", "DivergedError"]


class UsageError(ValueError):
    """Options that cannot work together (``--model cnn --dataset spirals``, an existing
    checkpoint without ``--resume``/``--overwrite``...): the CLI exits with status 2."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: unreadable, incomplete or with invalid state
    (the message names the file and the entry)."""


class DivergedError(RuntimeError):
    """The training loss became NaN or Inf (no checkpoint is written for that epoch)."""
