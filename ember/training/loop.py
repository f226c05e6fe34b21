"""A resumable training loop with progress bars, checkpoints and a held-out evaluation.

Resuming is bit-exact: a checkpoint holds the model, the optimizer, the scheduler, the
global RNG state, the loader's generator and its position inside the epoch, so an
interrupted run continued with ``--resume`` ends with the same parameters as a run that
was never interrupted.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field

import ember as em
from ember import nn, optim
from ember.data import DataLoader

from . import distributed as _dist
from .datasets import load_dataset
from .models import build_model


@dataclass
class TrainConfig:
    model: str = "cnn"
    dataset: str = "digits"
    epochs: int = 15
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 1e-4
    seed: int = 0
    checkpoint: str = "checkpoints/ember-{model}-{dataset}.safetensors"
    resume: bool = False
    data_root: str | None = None
    text_file: str | None = None
    block_size: int = 32
    max_steps: int | None = None     # stop (after checkpointing) once this many steps ran
    progress: bool = True
    plot: str | None = None          # training-curve PNG (needs matplotlib)
    nproc: int = 1                   # data-parallel ranks (batch_size is the global batch)
    history: list = field(default_factory=list)

    def checkpoint_path(self) -> str:
        return self.checkpoint.format(model=self.model, dataset=self.dataset)


def _bar(iterable, total, desc, enabled):
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, total=total, desc=desc, leave=False, dynamic_ncols=True)


def evaluate(model: nn.Module, loader: DataLoader, token_level: bool = False) -> tuple:
    """(mean loss, accuracy) of ``model`` over ``loader`` in eval mode."""
    model.eval()
    total = correct = 0
    loss_sum = 0.0
    with em.no_grad():
        for x, y in loader:
            logits = model(x)
            if token_level:
                logits, y = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
            loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(-1) == y).sum())
            total += y.numel()
    model.train()
    return loss_sum / max(total, 1), correct / max(total, 1)


def _state(model, opt, sched, loader, epoch, step, cfg):
    return {"model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(), "rng": em.get_rng_state(),
            "loader": loader.state_dict(), "epoch": epoch, "step": step,
            "history": cfg.history, "config": {k: v for k, v in asdict(cfg).items()
                                               if k != "history"}}


def _restore(path, model, opt, sched, loader, cfg):
    ck = em.load(path)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    sched.load_state_dict(ck["scheduler"])
    em.set_rng_state(ck["rng"])
    loader.load_state_dict(ck["loader"])
    cfg.history = list(ck["history"])
    return int(ck["epoch"]), int(ck["step"])


def train(cfg: TrainConfig, log=print) -> dict:
    """Train ``cfg.model`` on ``cfg.dataset``; returns the final metrics."""
    rank, world = _dist.init(cfg.nproc)
    if rank != 0:   # NOTE: rank 0 alone prints, evaluates and writes checkpoints
        log = _silent
    em.manual_seed(cfg.seed)
    train_ds, test_ds, info = load_dataset(cfg)
    gen = em.Generator().manual_seed(cfg.seed)
    loader = _dist.make_loader(train_ds, cfg.batch_size, cfg.seed, gen, rank, world)
    test_loader = DataLoader(test_ds, batch_size=256)
    model = build_model(cfg.model, info)
    net = _dist.wrap(model, world)   # DistributedDataParallel(model) when world > 1
    opt = optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = len(loader)
    sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, epochs=cfg.epochs,
                                          steps_per_epoch=steps_per_epoch)
    path = cfg.checkpoint_path()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    epoch, step = 0, 0
    if cfg.resume:
        if not os.path.exists(path):
            raise FileNotFoundError(f"--resume: no checkpoint at {path}")
        epoch, step = _restore(path, model, opt, sched, loader, cfg)
        log(f"resumed from {path} at epoch {epoch + 1}, step {step}")
    nparams = sum(p.numel() for p in model.parameters())
    log(f"{cfg.model} on {info['name']}: {len(train_ds)} train / {len(test_ds)} held-out "
        f"samples, {nparams:,} parameters, {cfg.epochs} epochs")
    token_level = "vocab" in info
    t0 = time.perf_counter()
    stopped = False
    while epoch < cfg.epochs and not stopped:
        model.train()
        run_loss = run_n = 0
        _dist.set_epoch(loader, epoch)
        bar = _bar(loader, steps_per_epoch, f"epoch {epoch + 1}/{cfg.epochs}",
                   cfg.progress and rank == 0)
        for x, y in bar:
            logits = net(x)
            if token_level:
                logits, y = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            run_loss, run_n = run_loss + float(loss), run_n + 1
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{run_loss / run_n:.4f}", lr=f"{sched.get_last_lr()[0]:.2e}")
            if cfg.max_steps is not None and step >= cfg.max_steps:
                stopped = True
                break
        if stopped:
            if rank == 0:
                em.save(_state(model, opt, sched, loader, epoch, step, cfg), path)
            log(f"stopped after {step} steps; checkpoint written to {path}")
            break
        epoch += 1
        if rank != 0:
            continue
        test_loss, test_acc = evaluate(model, test_loader, token_level)
        cfg.history.append({"epoch": epoch, "train_loss": run_loss / max(run_n, 1),
                            "test_loss": test_loss, "test_acc": test_acc})
        log(f"epoch {epoch:3d}  train loss {run_loss / max(run_n, 1):.4f}  held-out loss "
            f"{test_loss:.4f}  accuracy {test_acc * 100:6.2f}%")
        em.save(_state(model, opt, sched, loader, epoch, step, cfg), path)
    elapsed = time.perf_counter() - t0
    result = {"steps": step, "seconds": elapsed, "checkpoint": path, "model": model}
    if cfg.history:
        result.update(cfg.history[-1])
    if not stopped and rank == 0:
        log(f"held-out accuracy {result.get('test_acc', math.nan) * 100:.2f}% after "
            f"{epoch} epochs ({elapsed:.1f} s this run); checkpoint: {path}")
        if token_level and hasattr(model, "generate"):
            _sample(model, info, log)
        if cfg.plot:
            _plot(cfg, log)
    return result


def _silent(*args, **kwargs) -> None:
    """The log of ranks other than 0."""


def _sample(model, info, log):
    ds = info["dataset"]
    start = em.tensor([ds.encode(ds.text[: model.block_size // 2])])
    out = model.generate(start, 80, generator=em.Generator().manual_seed(0))
    log("sample: " + repr(ds.decode(out[0].tolist())))


def _plot(cfg, log):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: no training-curve PNG (pip install ember[examples])")
        return
    h = cfg.history
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    ax[0].plot([r["epoch"] for r in h], [r["train_loss"] for r in h], label="train")
    ax[0].plot([r["epoch"] for r in h], [r["test_loss"] for r in h], label="held-out")
    ax[0].set_xlabel("epoch"), ax[0].set_ylabel("loss"), ax[0].legend()
    ax[1].plot([r["epoch"] for r in h], [100 * r["test_acc"] for r in h])
    ax[1].set_xlabel("epoch"), ax[1].set_ylabel("held-out accuracy (%)")
    fig.suptitle(f"ember train --model {cfg.model} --dataset {cfg.dataset}")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(cfg.plot)), exist_ok=True)
    fig.savefig(cfg.plot, dpi=100)
    log(f"training curve written to {cfg.plot}")
