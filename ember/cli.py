"""The ``ember`` command: ``ember train --model cnn --dataset digits --epochs 15``."""
from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ember", description="Ember: train models from the "
                                "command line.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a model and report held-out accuracy")
    t.add_argument("--model", choices=["mlp", "cnn", "gpt"], default="cnn")
    t.add_argument("--dataset", choices=["digits", "spirals", "mnist", "text"],
                   default="digits")
    t.add_argument("--epochs", type=int, default=15)
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--weight-decay", type=float, default=1e-4)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--checkpoint", default="checkpoints/ember-{model}-{dataset}.safetensors",
                   help="checkpoint path ({model} and {dataset} are filled in)")
    t.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    t.add_argument("--data-root", help="folder with the MNIST IDX files (--dataset mnist)")
    t.add_argument("--text-file", help="text to model (--dataset text; default: the Zen "
                   "of Python)")
    t.add_argument("--block-size", type=int, default=32)
    t.add_argument("--max-steps", type=int, help="stop after this many steps (checkpointed)")
    t.add_argument("--plot", help="write a training-curve PNG here (needs matplotlib)")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    sub.add_parser("config", help="print Ember's configuration (BLAS, threads, allocator)")
    from .codegen import cache_cli
    cache_cli.add_parser(sub)
    from .distributed import run as dist_run
    dist_run.add_parser(sub)
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "config":
        import ember
        ember.show_config()
        return 0
    if args.command == "cache":
        from .codegen import cache_cli
        return cache_cli.main(args)
    if args.command == "run":
        from .distributed import run as dist_run
        return dist_run.run_from_args(args)
    from .training import TrainConfig, train
    cfg = TrainConfig(model=args.model, dataset=args.dataset, epochs=args.epochs,
                      batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay,
                      seed=args.seed, checkpoint=args.checkpoint, resume=args.resume,
                      data_root=args.data_root, text_file=args.text_file,
                      block_size=args.block_size, max_steps=args.max_steps,
                      progress=not args.no_progress, plot=args.plot)
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
