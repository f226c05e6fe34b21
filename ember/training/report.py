"""What ``ember train`` writes besides checkpoints: per-epoch metrics, a curve, a sample."""
from __future__ import annotations

import json
import os

import ember as em

__all__ = ["metrics_path", "write_metrics", "plot", "sample"]


def metrics_path(checkpoint: str) -> str:
    """``checkpoints/run.safetensors`` -> ``checkpoints/run.metrics.jsonl``."""
    root, ext = os.path.splitext(checkpoint)
    return (root if ext == ".safetensors" else checkpoint) + ".metrics.jsonl"


def write_metrics(path: str, history: list) -> None:
    """One JSON object per epoch. Rewritten whole from ``history`` (which the checkpoint
    holds), so a resumed run's file matches an uninterrupted one's."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for row in history:
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


def plot(cfg, path: str, log) -> None:
    """A training-curve PNG (loss, and held-out accuracy or perplexity) at ``path``."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: no training-curve PNG (pip install ember[examples])")
        return
    h = cfg.history
    ep = [r["epoch"] for r in h]
    metric, label = ("test_ppl", "held-out perplexity") if h and "test_ppl" in h[0] \
        else ("test_acc", "held-out accuracy (%)")
    scale = 1 if metric == "test_ppl" else 100
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    ax[0].plot(ep, [r["train_loss"] for r in h], label="train")
    ax[0].plot(ep, [r["test_loss"] for r in h], label="held-out")
    ax[0].set_xlabel("epoch"), ax[0].set_ylabel("loss"), ax[0].legend()
    ax[1].plot(ep, [scale * r[metric] for r in h])
    ax[1].set_xlabel("epoch"), ax[1].set_ylabel(label)
    fig.suptitle(f"ember train --model {cfg.model} --dataset {cfg.dataset}")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    log(f"training curve written to {path}")


def sample(model, info, log, length: int = 80) -> None:
    """Log ``length`` characters the language model writes after a short prompt."""
    ds = info["dataset"]
    model.eval()
    prompt = ds.text[: model.block_size // 2]
    dev = next(model.parameters()).device
    out = model.generate(em.tensor([ds.encode(prompt)], device=dev), length,
                         generator=em.Generator().manual_seed(0))
    log("sample: " + repr(ds.decode(out[0].tolist())))
