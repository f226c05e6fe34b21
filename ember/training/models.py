"""The models ``ember train --model`` knows: an MLP, a small CNN and a char-level GPT."""
from __future__ import annotations

import math

import ember as em
from ember import nn

from .errors import UsageError

# NOTE: epochs when --epochs is not given
# NOTE: a char-level epoch visits each character block_size times (one window per offset);
# on the Zen of Python the held-out loss falls for 3 epochs and rises from about the 5th
DEFAULT_EPOCHS = {"mlp": 15, "cnn": 15, "gpt": 3}


def mlp(in_features: int, num_classes: int, hidden: int = 256, dropout: float = 0.1):
    """Two hidden ReLU layers."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


def cnn(in_channels: int, size: int, num_classes: int, width: int = 32):
    """Conv-ReLU-Conv-ReLU-MaxPool, then a two-layer head (sized for 8x8 digits up)."""
    pooled = size // 2
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * pooled * pooled, 128), nn.ReLU(), nn.Dropout(0.25),
        nn.Linear(128, num_classes))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model), nn.Dropout(dropout))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A character-level decoder-only transformer (token + learned position embeddings)."""

    def __init__(self, vocab_size: int, block_size: int, d_model: int = 64, n_heads: int = 4,
                 n_layers: int = 2, dropout: float = 0.2):
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, dropout) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.register_buffer("mask", em.triu(em.full((block_size, block_size), -math.inf),
                                             diagonal=1), persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(em.arange(t, device=idx.device))
        mask = self.mask[:t, :t]
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))

    @em.no_grad()
    def generate(self, idx, steps: int, generator=None):
        """Sample ``steps`` more tokens after ``idx`` (batch, time)."""
        for _ in range(steps):
            logits = self(idx[:, -self.block_size:])[:, -1]
            nxt = em.multinomial(em.softmax(logits, dim=-1), 1, generator=generator)
            idx = em.cat([idx, nxt], dim=1)
        return idx


def build_model(name: str, info: dict) -> nn.Module:
    """The model ``name`` sized for a dataset described by ``info``."""
    if name == "mlp":
        if "features" not in info:
            raise UsageError(f"--model mlp needs a dataset of feature vectors (digits, "
                             f"spirals or mnist), not {info['name']!r}")
        return mlp(info["features"], info["classes"])
    if name == "cnn":
        if "channels" not in info:
            raise UsageError(f"--model cnn needs an image dataset (digits or mnist), not "
                             f"{info['name']!r}")
        return cnn(info["channels"], info["size"], info["classes"])
    if name == "gpt":
        if "vocab" not in info:
            raise UsageError(f"--model gpt needs a token dataset (text), not {info['name']!r}")
        return GPT(info["vocab"], info["block_size"])
    raise UsageError(f"unknown model {name!r}; choose mlp, cnn or gpt")
