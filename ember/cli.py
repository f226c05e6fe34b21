"""The ``ember`` command: ``ember train --model cnn --dataset digits --epochs 15``."""
from __future__ import annotations

import argparse
import sys

from . import __version__


class _DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: ...)`` for options that have a default value."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ember", description="Ember: train models from the "
                                "command line.")
    p.add_argument("--version", action="version", version=f"ember {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a model and report held-out accuracy",
                       formatter_class=_DefaultsHelp)
    t.set_defaults(error=t.error)
    t.add_argument("--model", choices=["mlp", "cnn", "gpt"], default="cnn", help="model")
    t.add_argument("--dataset", choices=["digits", "spirals", "mnist", "text"],
                   default="digits", help="dataset")
    t.add_argument("--epochs", type=int, help="epochs (default: 15; 3 for --model gpt)")
    t.add_argument("--batch-size", type=int, default=64, help="samples per step")
    t.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (one-cycle)")
    t.add_argument("--weight-decay", type=float, default=1e-4, help="AdamW weight decay")
    t.add_argument("--seed", type=int, default=0, help="seed of the weights and the shuffle")
    t.add_argument("--checkpoint", default="checkpoints/ember-{model}-{dataset}.safetensors",
                   help="checkpoint path ({model} and {dataset} are filled in); the metrics "
                   "of each epoch go beside it, in <checkpoint>.metrics.jsonl")
    t.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    t.add_argument("--overwrite", action="store_true",
                   help="replace an existing checkpoint (without it, ember train refuses)")
    t.add_argument("--data-root", help="folder with the MNIST IDX files (--dataset mnist)")
    t.add_argument("--text-file", help="text to model (--dataset text; default: the Zen "
                   "of Python)")
    t.add_argument("--block-size", type=int, default=32, help="context length (--model gpt)")
    t.add_argument("--max-steps", type=int, help="stop after this many steps (checkpointed)")
    t.add_argument("--plot", help="write a training-curve PNG here (needs matplotlib)")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    t.add_argument("--nproc", type=int, default=1, help="train data-parallel on this many "
                   "processes (MPI; --batch-size stays the global batch)")
    t.add_argument("--max-restarts", type=int, default=0, help="with --nproc: start a failed "
                   "job again (resuming from its checkpoint) up to this many times")
    t.add_argument("--amp", choices=["bf16", "fp16"], help="mixed precision: the forward "
                   "under ember.autocast in this dtype, float32 weights (fp16: with a "
                   "GradScaler)")
    t.add_argument("--device", default="cpu", help="where to train: cpu, cuda or cuda:N "
                   "(needs CuPy and an NVIDIA GPU; EMBER_FAKE_CUDA=1 gives a CPU stand-in)")
    t.add_argument("--profile", nargs="?", const="", metavar="PATH",
                   help="write an ember.profiler Chrome trace of training steps 4-6 to PATH "
                   "(default: beside the checkpoint, .trace.json) and print the top ops")
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
    if args.nproc > 1:
        from .training import distributed as dist_train
        if not dist_train.in_job():   # NOTE: re-run this same command on --nproc ranks
            return dist_train.launch(sys.argv[1:] if argv is None else list(argv), args.nproc,
                                     args.max_restarts)
    from .training import TrainConfig, train
    cfg = TrainConfig(model=args.model, dataset=args.dataset, epochs=args.epochs,
                      batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay,
                      seed=args.seed, checkpoint=args.checkpoint, resume=args.resume,
                      overwrite=args.overwrite,
                      data_root=args.data_root, text_file=args.text_file,
                      block_size=args.block_size, max_steps=args.max_steps,
                      progress=not args.no_progress, plot=args.plot, nproc=args.nproc,
                      amp=args.amp, profile=args.profile, device=args.device)
    from .training.errors import CheckpointError, DivergedError, UsageError
    try:
        train(cfg)
    except UsageError as e:
        args.error(str(e))   # NOTE: argparse's usage line and exit status 2
    except (CheckpointError, DivergedError, OSError) as e:
        print(f"ember train: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
