"""A PyTorch program, unmodified, on Ember: ``torch`` below is Ember (or PyTorch with
``--backend torch``, to compare).

The task: read a variable-length sequence of numbers and say whether their sum is
positive. The program is written as a PyTorch user writes it: a ``Dataset`` and a
``DataLoader`` whose ``collate_fn`` pads the batch (``pad_sequence``), an LSTM over
``pack_padded_sequence`` input (``enforce_sorted=False``: the padding is skipped), a
``LazyLinear`` head, ``BCEWithLogitsLoss``, and ``optim.LBFGS`` with the strong-Wolfe line
search and a closure, in float64, one full batch per step (as L-BFGS is meant to run).
Weights are drawn from NumPy so both backends start identically; with PyTorch installed,
``--backend both`` prints the two loss curves side by side.

Run:
    python examples/pytorch_dropin.py [--backend ember|torch|both] [--steps 15]
"""
from __future__ import annotations

import argparse
import importlib

import numpy as np


def load_backend(name: str):
    """``import ember as torch`` (or the real PyTorch)."""
    return importlib.import_module("ember" if name == "ember" else "torch")


def make_data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    seqs = [rng.standard_normal(int(rng.integers(2, 9))) for _ in range(n)]
    return seqs, [float(s.sum() > 0) for s in seqs]


def train(torch, steps: int, seed: int = 0, batch_size: int = 256) -> list[float]:
    """The PyTorch program: returns the loss after each LBFGS step."""
    nn = torch.nn
    from_utils = torch.utils.data
    pad_sequence = nn.utils.rnn.pad_sequence
    pack_padded_sequence = nn.utils.rnn.pack_padded_sequence

    class Sequences(from_utils.Dataset):
        def __init__(self, seqs, labels):
            self.seqs, self.labels = seqs, labels

        def __len__(self):
            return len(self.seqs)

        def __getitem__(self, i):
            return (torch.tensor(self.seqs[i]).unsqueeze(-1),
                    torch.tensor(self.labels[i], dtype=torch.float64))

    def collate(batch):
        xs, ys = zip(*batch)
        lengths = torch.tensor([len(x) for x in xs])
        return pad_sequence(list(xs), batch_first=True), lengths, torch.stack(ys)

    class Classifier(nn.Module):
        def __init__(self, hidden: int = 8):
            super().__init__()
            self.lstm = nn.LSTM(1, hidden, batch_first=True)
            self.head = nn.LazyLinear(1)

        def forward(self, x, lengths):
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            _, (h, _) = self.lstm(packed)
            return self.head(h[-1]).squeeze(-1)

    seqs, labels = make_data(256, seed)
    loader = from_utils.DataLoader(Sequences(seqs, labels), batch_size=batch_size,
                                   shuffle=False, collate_fn=collate)
    model = Classifier().double()                     # float64: iterates comparable
    x0, len0, _ = next(iter(loader))
    model(x0, len0)                                   # dry run: LazyLinear gets its size
    rng = np.random.default_rng(seed + 1)
    with torch.no_grad():
        for p in model.parameters():                  # identical start on both backends
            p.copy_(torch.tensor(rng.uniform(-0.3, 0.3, tuple(p.shape))))
    opt = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=5, history_size=10,
                            line_search_fn="strong_wolfe")
    loss_fn = nn.BCEWithLogitsLoss()
    losses = []
    for _ in range(steps):
        for x, lengths, y in loader:
            def closure():
                opt.zero_grad()
                loss = loss_fn(model(x, lengths), y)
                loss.backward()
                return loss
            opt.step(closure)
        with torch.no_grad():
            total = sum(float(loss_fn(model(x, n), y)) for x, n, y in loader)
        losses.append(total / len(loader))
    return losses


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["ember", "torch", "both"], default="ember")
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args(argv)
    names = ["ember", "torch"] if args.backend == "both" else [args.backend]
    curves = {name: train(load_backend(name), args.steps) for name in names}
    print("step " + "".join(f"{name:>12s}" for name in names))
    for i in range(args.steps):
        print(f"{i + 1:4d} " + "".join(f"{curves[name][i]:12.6f}" for name in names))
    return curves


if __name__ == "__main__":
    main()
