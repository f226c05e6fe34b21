"""Helpers shared by the ``ember train`` tests (``test_train_cli.py``,
``amp/test_train_amp.py``)."""
from ember.training import TrainConfig

QUIET = dict(log=lambda *a: None)     # train(..., **QUIET): no log lines


def train_config(path, **kw) -> TrainConfig:
    """A small, fast run (MLP on spirals, 2 epochs, no bars) checkpointing to ``path``."""
    base = dict(model="mlp", dataset="spirals", epochs=2, batch_size=32, progress=False,
                checkpoint=str(path))
    base.update(kw)
    return TrainConfig(**base)


def weights(model) -> dict:
    """A copy of ``model``'s state dict as NumPy arrays."""
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
