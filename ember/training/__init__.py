"""Ember's main job: ready-made models, datasets and a resumable training loop.

Run it as ``ember train ...`` or ``python -m ember train ...`` (see ``ember/cli.py``).
"""
from .loop import TrainConfig, evaluate, train
from .models import build_model

__all__ = ["TrainConfig", "train", "evaluate", "build_model"]
