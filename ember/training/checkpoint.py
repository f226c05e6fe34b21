"""``ember train``'s checkpoints: what they hold, and checks before a run resumes from one.

A checkpoint holds the model, the optimizer, the scheduler, the global RNG state, the
loader's position inside the epoch, the running loss sums of that epoch, the metrics
history and the run's options. Everything is checked on load, so a truncated, edited or
diverged checkpoint is refused with a :class:`CheckpointError` naming the file and entry
instead of failing steps later (or "finishing" with NaN weights).
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict

import ember as em

from .errors import CheckpointError, UsageError

__all__ = ["save", "load", "check_options", "restore", "restore_schedule"]

_ENTRIES = ("model", "optimizer", "scheduler", "rng", "loader", "epoch", "step", "history",
            "config")
# NOTE: options that define the run; a resumed run must use the same (epochs may change)
_SAME = ("model", "dataset", "batch_size", "lr", "weight_decay", "seed", "block_size", "amp")


def save(path: str, model, opt, sched, loader, epoch: int, step: int, sums, cfg,
         grad_scaler: dict | None = None) -> None:
    """Write the whole training state to ``path`` (atomically, see :func:`ember.save`);
    ``grad_scaler`` is the ``--amp fp16`` loss scaler's state (an optional entry)."""
    extra = {"grad_scaler": grad_scaler} if grad_scaler else {}
    em.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "rng": em.get_rng_state(),
             "loader": loader.state_dict(), "epoch": epoch, "step": step,
             "epoch_loss_sum": sums[0], "epoch_batches": sums[1], "history": cfg.history,
             "config": {k: v for k, v in asdict(cfg).items() if k != "history"}, **extra},
            path)


def load(path: str) -> dict:
    """Read a checkpoint; :class:`CheckpointError` unless it has every entry."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"--resume: no checkpoint at {path}")
    try:
        ck = em.load(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path} cannot be read: {e}") from e
    if not isinstance(ck, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(ck).__name__}, not the dict "
                              "ember train writes")
    missing = [k for k in _ENTRIES if k not in ck]
    if missing:
        raise CheckpointError(f"checkpoint {path} has no {', '.join(map(repr, missing))} "
                              "entry (not written by ember train?)")
    for key in ("model", "optimizer", "scheduler", "loader", "config"):
        if not isinstance(ck[key], dict):
            raise CheckpointError(f"checkpoint {path}: {key!r} must be a dict (a state dict), "
                                  f"got {type(ck[key]).__name__}")
    return ck


def check_options(ck: dict, cfg, path: str) -> None:
    """:class:`UsageError` when ``cfg`` differs from the checkpoint's run in an option that
    defines it (model, dataset, batch size, lr, weight decay, seed, block size, amp)."""
    saved = ck["config"]
    for key in _SAME:
        if key in saved and saved[key] != getattr(cfg, key):
            flag = "--" + key.replace("_", "-")
            raise UsageError(f"checkpoint {path} was written by a run with {flag} "
                             f"{saved[key]}, not {getattr(cfg, key)}; resume with the same "
                             f"{flag} (or start over with --overwrite)")


def restore(ck: dict, path: str, model, opt, loader, steps_per_epoch: int) -> tuple:
    """Load ``ck`` into the model, optimizer, RNG and loader (the scheduler is the
    caller's: its length may change); returns ``(epoch, step, (loss_sum, batches))``."""
    _part(path, "model", model.load_state_dict, ck["model"])
    for name, value in model.state_dict().items():
        if value.is_floating_point() and not bool(value.isfinite().all()):
            raise CheckpointError(f"checkpoint {path}: model weight {name!r} holds NaN or Inf "
                                  "values (the run that wrote it diverged); start over with "
                                  "--overwrite and a lower --lr")
    _part(path, "optimizer", opt.load_state_dict, ck["optimizer"])
    _part(path, "rng", em.set_rng_state, ck["rng"])
    _part(path, "loader", loader.load_state_dict, ck["loader"])
    epoch, step = _count(path, ck, "epoch"), _count(path, ck, "step")
    pos = ck["loader"]
    consumed = 0 if pos["exhausted"] else pos["batches_consumed"]
    if step != epoch * steps_per_epoch + consumed:
        raise CheckpointError(f"checkpoint {path}: 'step' is {step}, but epoch {epoch} and "
                              f"{consumed} batches into the next make "
                              f"{epoch * steps_per_epoch + consumed} steps of "
                              f"{steps_per_epoch}")
    if not isinstance(ck["history"], list):
        raise CheckpointError(f"checkpoint {path}: 'history' must be a list of per-epoch "
                              f"metrics, got {type(ck['history']).__name__}")
    if "epoch_loss_sum" not in ck:   # NOTE: written before the sums were saved
        return epoch, step, (0.0, 0)
    loss_sum, batches = ck["epoch_loss_sum"], ck.get("epoch_batches")
    if not (isinstance(loss_sum, (int, float)) and math.isfinite(loss_sum)
            and isinstance(batches, int) and batches == consumed):
        raise CheckpointError(f"checkpoint {path}: 'epoch_loss_sum'/'epoch_batches' "
                              f"({loss_sum!r}, {batches!r}) are not a finite sum over the "
                              f"{consumed} batches run this epoch")
    return epoch, step, (float(loss_sum), batches)


def restore_schedule(ck: dict, path: str, sched, step: int) -> None:
    """Load the scheduler state, checking that it stands at ``step``."""
    _part(path, "scheduler", sched.load_state_dict, ck["scheduler"])
    last, total = sched.last_epoch, sched.total_steps
    # NOTE: the loop does not step the schedule past its last step (older checkpoints did)
    if not isinstance(last, int) or last not in (step, min(step, total - 1)):
        raise CheckpointError(f"checkpoint {path}: 'scheduler' stands at step {last!r}, but "
                              f"the run is at step {step}")


def _part(path: str, key: str, load, value) -> None:
    try:
        load(value)
    except (KeyError, ValueError, TypeError, IndexError, RuntimeError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        raise CheckpointError(f"checkpoint {path}: {key!r}: {msg}") from e


def _count(path: str, ck: dict, key: str) -> int:
    v = ck[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise CheckpointError(f"checkpoint {path}: {key!r} must be an integer >= 0, got {v!r}")
    return v
