"""A resumable training loop with progress bars, checkpoints and a held-out evaluation.

Resuming is bit-exact: a checkpoint holds the model, the optimizer, the scheduler, the
global RNG state, the loader's generator and its position inside the epoch (and the loss
sums of that epoch), so an interrupted run continued with ``--resume`` ends with the same
parameters and logs the same metrics as a run that was never interrupted. Progress bars
change nothing: they are given the loader's iterator, never the loader.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import ember as em
from ember import nn, optim
from ember.data import DataLoader

from . import checkpoint as ckpt
from . import distributed as _dist
from .datasets import load_dataset
from .errors import CheckpointError, DivergedError, UsageError
from .models import DEFAULT_EPOCHS, build_model
from .precision import Precision
from .report import metrics_path, plot, sample, write_metrics


@dataclass
class TrainConfig:
    """The options of ``ember train`` (see ``ember train --help``)."""
    model: str = "cnn"
    dataset: str = "digits"
    epochs: int | None = None        # None: the model's default (models.DEFAULT_EPOCHS)
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 1e-4
    seed: int = 0
    checkpoint: str = "checkpoints/ember-{model}-{dataset}.safetensors"
    resume: bool = False
    overwrite: bool = False          # replace an existing checkpoint (else: refuse)
    data_root: str | None = None
    text_file: str | None = None
    block_size: int = 32
    max_steps: int | None = None     # stop (after checkpointing) once this many steps ran
    progress: bool = True
    plot: str | None = None          # training-curve PNG (needs matplotlib)
    nproc: int = 1                   # data-parallel ranks (batch_size is the global batch)
    amp: str | None = None           # "bf16"/"fp16": mixed precision (training/precision.py)
    profile: str | None = None       # trace path ("": beside the checkpoint), training/profiling
    device: str = "cpu"              # "cuda": model and batches on the GPU (or the stand-in)
    history: list = field(default_factory=list)

    def checkpoint_path(self) -> str:
        return self.checkpoint.format(model=self.model, dataset=self.dataset)


def _bar(it, total: int, done: int, desc: str, enabled: bool):
    if not enabled:
        return it
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return it
    # NOTE: ``it`` is the loader's iterator: tqdm.auto calls iter() on what it gets when
    # created and again when iterated, and each iter(loader) starts an epoch
    return tqdm(it, total=total, initial=done, desc=desc, leave=False, dynamic_ncols=True)


def evaluate(model: nn.Module, loader: DataLoader, token_level: bool = False,
             device=None) -> tuple:
    """(mean loss, accuracy) of ``model`` over ``loader`` in eval mode (batches moved to
    ``device`` when given)."""
    model.eval()
    total = correct = 0
    loss_sum = 0.0
    with em.no_grad():
        for x, y in loader:
            if device is not None:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            logits = model(x)
            if token_level:
                logits, y = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
            loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(-1) == y).sum())
            total += y.numel()
    model.train()
    return loss_sum / max(total, 1), correct / max(total, 1)


def _check_options(cfg) -> None:
    for name in ("epochs", "batch_size", "block_size", "max_steps"):
        v = getattr(cfg, name)
        if v is not None and (not isinstance(v, int) or v < 1):
            raise UsageError(f"--{name.replace('_', '-')} must be a positive integer, got {v}")
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise UsageError(f"--lr must be a positive number, got {cfg.lr}")
    if not (math.isfinite(cfg.weight_decay) and cfg.weight_decay >= 0):
        raise UsageError(f"--weight-decay must be a number >= 0, got {cfg.weight_decay}")
    _check_device(cfg)


def _check_device(cfg) -> None:
    try:
        dev = em.device(cfg.device)
    except (ValueError, TypeError) as e:
        raise UsageError(f"--device: {e}") from None
    if dev.type == "cuda":
        if not em.cuda.is_available():
            from ..device.base import cuda_backend
            raise UsageError(f"--device {cfg.device}: no CUDA GPU is available here "
                             f"({cuda_backend()[1]}); use --device cpu")
        n = em.cuda.device_count()
        if dev.index >= n:
            raise UsageError(f"--device {cfg.device}: this machine has {n} CUDA device(s) "
                             f"(valid: cuda:0 to cuda:{n - 1})")
        if cfg.nproc > 1:
            raise UsageError("--device cuda with --nproc > 1 is not supported yet (ember "
                             "run's ranks communicate through MPI on the CPU)")


def _schedule(opt, cfg, total: int, at: int = 0):
    """One-cycle over ``total`` steps, positioned to give step ``at + 1`` its lr."""
    return optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=total,
                                         last_epoch=min(at, total - 1) - 1)


def _resume(path, cfg, model, opt, loader, total, log, prec):
    """Restore a run; returns ``(epoch, step, sums, scheduler)``."""
    ck = ckpt.load(path)
    ckpt.check_options(ck, cfg, path)
    spe = len(loader)
    epoch, step, sums = ckpt.restore(ck, path, model, opt, loader, spe)
    prec.load_state_dict(ck, path)
    cfg.history = list(ck["history"])
    old_total = ck["scheduler"].get("total_steps")
    if not isinstance(old_total, int) or old_total < 1:
        raise CheckpointError(f"checkpoint {path}: 'scheduler' has no valid 'total_steps' "
                              f"(got {old_total!r}); it is not a one-cycle schedule's state")
    if old_total == total:
        sched = _schedule(opt, cfg, total, step)
        ckpt.restore_schedule(ck, path, sched, step)
    elif step > total:
        raise UsageError(f"checkpoint {path} has already run {epoch} epochs ({step} steps); "
                         f"--epochs {cfg.epochs} is fewer: pass --epochs {-(-step // spe)} "
                         "or more to continue it")
    else:
        sched = _schedule(opt, cfg, total, step)
        log(f"the checkpoint's learning-rate schedule was for {old_total} steps; rebuilt "
            f"the one-cycle schedule for {total} steps ({cfg.epochs} epochs): step "
            f"{step + 1} runs at lr {sched.get_last_lr()[0]:.2e}")
    log(f"resumed from {path} at epoch {epoch + 1}, step {step}")
    return epoch, step, sums, sched


def _epoch(model, opt, sched, it, token_level, step, sums, cfg, prec, prof=None):
    """Run the rest of an epoch from ``it``; returns ``(step, sums, stopped)``."""
    loss_sum, n = sums
    dev = None if cfg.device == "cpu" else em.device(cfg.device)
    for x, y in it:
        if dev is not None:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with prec.autocast():   # NOTE: --amp: the forward and the loss under autocast
            logits = model(x)
            if token_level:
                logits, y = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
            loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        prec.backward_step(loss, opt)   # through the GradScaler with --amp fp16
        step += 1
        if step < sched.total_steps:   # NOTE: past its end the one-cycle lr rises again
            sched.step()
        if prof is not None:           # --profile: the step ends here
            prof.step()
        value = float(loss)
        if not math.isfinite(value):
            raise DivergedError(f"training diverged at step {step}: the loss is {value}; "
                                f"try a lower --lr (now {cfg.lr})")
        loss_sum, n = loss_sum + value, n + 1
        if hasattr(it, "set_postfix"):
            it.set_postfix(loss=f"{loss_sum / n:.4f}", lr=f"{sched.get_last_lr()[0]:.2e}",
                           refresh=False)
        if cfg.max_steps is not None and step >= cfg.max_steps:
            return step, (loss_sum, n), True
    return step, (loss_sum, n), False


def train(cfg: TrainConfig, log=print) -> dict:
    """Train ``cfg.model`` on ``cfg.dataset``; returns the final metrics.

    Raises:
        UsageError: options that cannot work (the CLI exits with status 2).
        CheckpointError: ``--resume`` from a checkpoint that is unreadable or invalid.
        DivergedError: the loss became NaN or Inf.
    """
    if cfg.epochs is None:
        cfg.epochs = DEFAULT_EPOCHS.get(cfg.model, 15)
    _check_options(cfg)
    prec = Precision(cfg.amp, cfg.device)
    rank, world = _dist.init(cfg.nproc)
    if rank != 0:   # NOTE: rank 0 alone prints, evaluates and writes checkpoints
        log = _silent
    path = cfg.checkpoint_path()
    if _dist.restarted() and os.path.exists(path):
        cfg.resume = True   # a job ember run --max-restarts started again: continue it
    if not cfg.resume and os.path.exists(path) and not cfg.overwrite:
        raise UsageError(f"{path} already holds a checkpoint; pass --resume to continue "
                         "that run, --overwrite to replace it, or --checkpoint PATH")
    em.manual_seed(cfg.seed)
    train_ds, test_ds, info = load_dataset(cfg)
    loader = _dist.make_loader(train_ds, cfg.batch_size, cfg.seed,
                               em.Generator().manual_seed(cfg.seed), rank, world)
    if len(loader) == 0:
        raise UsageError(f"--batch-size {cfg.batch_size} is larger than the {len(train_ds)} "
                         f"training samples of {cfg.dataset}")
    test_loader = DataLoader(test_ds, batch_size=256)
    model = build_model(cfg.model, info).to(cfg.device)
    net = _dist.wrap(model, world)   # DistributedDataParallel(model) when world > 1
    opt = optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    spe, total = len(loader), cfg.epochs * len(loader)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    epoch, step, sums = 0, 0, (0.0, 0)
    if cfg.resume:
        epoch, step, sums, sched = _resume(path, cfg, model, opt, loader, total, log, prec)
        if cfg.max_steps is not None and step >= cfg.max_steps:
            raise UsageError(f"--max-steps {cfg.max_steps}: the checkpoint is already at "
                             f"step {step}")
    else:
        sched = _schedule(opt, cfg, total)
    nparams = sum(p.numel() for p in model.parameters())
    log(f"{cfg.model} on {info['name']}: {len(train_ds)} train / {len(test_ds)} held-out "
        f"samples, {nparams:,} parameters, {cfg.epochs} epochs")
    token_level = "vocab" in info
    t0, stopped = time.perf_counter(), False
    prof = _start_profile(cfg, path, log) if cfg.profile is not None and rank == 0 else None
    try:
        epoch, step, sums, stopped = _epochs(cfg, model, net, opt, sched, loader, test_loader,
                                             token_level, epoch, step, sums, prec, prof, path,
                                             rank, log)
    finally:
        if prof is not None:
            prof.stop()
    elapsed = time.perf_counter() - t0
    result = {"steps": step, "seconds": elapsed, "checkpoint": path, "model": model}
    if cfg.history:
        result.update(cfg.history[-1])
    if not stopped and rank == 0:
        _log_end(cfg, result, epoch, elapsed, path, token_level, log)
        if token_level and hasattr(model, "generate"):
            sample(model, info, log)
        if cfg.plot:
            plot(cfg, cfg.plot, log)
    return result


def _start_profile(cfg, path, log):
    from .profiling import default_path, start
    return start(cfg.profile or default_path(path), log)


def _epochs(cfg, model, net, opt, sched, loader, test_loader, token_level, epoch, step, sums,
            prec, prof, path, rank, log) -> tuple:
    """The epochs from ``epoch`` on; returns ``(epoch, step, sums, stopped)``."""
    stopped, spe = False, len(loader)
    while epoch < cfg.epochs and not stopped:
        model.train()
        _dist.set_epoch(loader, epoch)
        pos = loader.state_dict()
        it = iter(loader)
        bar = _bar(it, spe, 0 if pos["exhausted"] else pos["batches_consumed"],
                   f"epoch {epoch + 1}/{cfg.epochs}", cfg.progress and rank == 0)
        step, sums, stopped = _epoch(net, opt, sched, bar, token_level, step, sums, cfg,
                                     prec, prof)
        if hasattr(bar, "close"):
            bar.close()
        if stopped:
            if rank == 0:
                ckpt.save(path, model, opt, sched, loader, epoch, step, sums, cfg,
                          prec.state_dict())
            log(f"stopped after {step} steps; checkpoint written to {path}")
            break
        epoch += 1
        # NOTE: every rank evaluates: iterating a loader draws from the global RNG, which
        # must stay the same on all ranks for rank 0's checkpoint to resume all of them
        held_out = evaluate(model, test_loader, token_level, cfg.device)
        if rank != 0:
            sums = (0.0, 0)
            continue
        _log_epoch(cfg, epoch, sums, held_out, token_level, log)
        sums = (0.0, 0)
        ckpt.save(path, model, opt, sched, loader, epoch, step, sums, cfg, prec.state_dict())
        write_metrics(metrics_path(path), cfg.history)
    return epoch, step, sums, stopped


def _silent(*args, **kwargs) -> None:
    """The log of ranks other than 0."""


def _log_epoch(cfg, epoch, sums, held_out, token_level, log) -> None:
    train_loss = sums[0] / max(sums[1], 1)
    test_loss, test_acc = held_out
    row = {"epoch": epoch, "train_loss": train_loss, "test_loss": test_loss}
    if token_level:   # NOTE: next-character accuracy says little; perplexity is the measure
        row["test_ppl"] = math.exp(test_loss)
        what = f"perplexity {row['test_ppl']:7.3f}"
    else:
        row["test_acc"] = test_acc
        what = f"accuracy {test_acc * 100:6.2f}%"
    cfg.history.append(row)
    log(f"epoch {epoch:3d}  train loss {train_loss:.4f}  held-out loss {test_loss:.4f}  {what}")


def _log_end(cfg, result, epoch, elapsed, path, token_level, log) -> None:
    if token_level:
        what = (f"held-out loss {result.get('test_loss', math.nan):.4f}, perplexity "
                f"{result.get('test_ppl', math.nan):.3f}")
    else:
        what = f"held-out accuracy {result.get('test_acc', math.nan) * 100:.2f}%"
    log(f"{what} after {epoch} epochs ({elapsed:.1f} s this run); checkpoint: {path}; "
        f"metrics: {metrics_path(path)}")
