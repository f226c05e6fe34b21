"""A character-level GPT: learn to continue a text one character at a time.

The model is ``ember.training.models.GPT`` (token + position embeddings, pre-LayerNorm
transformer blocks with causal ``nn.MultiheadAttention``, a linear head) trained with
AdamW on windows of the text from ``ember.datasets.CharText``: the target of every
position is the next character. The default text is the Zen of Python, which ships
with Python (``import this``); pass ``--text-file`` for your own. Prints the loss as
training goes and a sample generated from the first characters of the text.

Run:
    python examples/char_gpt.py [--steps 300] [--text-file book.txt] [--sample-len 200]
"""
from __future__ import annotations

import argparse
import codecs
import contextlib
import io
import math

import ember as em
from ember import nn, optim
from ember.data import DataLoader
from ember.datasets import CharText
from ember.training.models import GPT


def zen_of_python() -> str:
    with contextlib.redirect_stdout(io.StringIO()):   # ``import this`` prints once
        import this
    return codecs.decode(this.s, "rot13")


def main(argv=None) -> dict:
    """Train briefly; returns ``{"losses": [...], "sample": str, "vocab_size": int}``.

    ``losses`` holds the mean training loss of each logged chunk of ``--log-every`` steps
    (the first is the loss at the start, ≈ ln(vocab_size)).
    """
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--text-file", help="text to learn (default: the Zen of Python)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--sample-len", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    text = open(args.text_file, encoding="utf-8").read() if args.text_file \
        else zen_of_python()
    em.manual_seed(args.seed)
    data = CharText(text, block_size=args.block_size)
    model = GPT(data.vocab_size, args.block_size, d_model=args.d_model, n_heads=args.heads,
                n_layers=args.layers, dropout=0.0)
    opt = optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{len(text)} characters, vocabulary {data.vocab_size}, GPT with {n_params} "
          f"parameters; chance loss ln({data.vocab_size}) = {math.log(data.vocab_size):.3f}")

    losses, chunk, step = [], [], 0
    while step < args.steps:
        for x, y in loader:
            logits = model(x)                                  # (batch, time, vocab)
            loss = nn.functional.cross_entropy(logits.reshape(-1, data.vocab_size),
                                               y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            chunk.append(loss.item())
            step += 1
            if step == 1 or step % args.log_every == 0 or step == args.steps:
                losses.append(sum(chunk) / len(chunk))
                print(f"step {step:5d}  loss {losses[-1]:.4f}")
                chunk = []
            if step >= args.steps:
                break

    model.eval()
    prompt = em.tensor([data.encode(text[:8])])
    out = model.generate(prompt, args.sample_len, generator=em.Generator().manual_seed(0))
    sample = data.decode(out[0])
    print(f"--- sample ---\n{sample}\n--------------")
    return {"losses": losses, "sample": sample, "vocab_size": data.vocab_size}


if __name__ == "__main__":
    main()
