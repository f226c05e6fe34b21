"""A variational autoencoder on the 8x8 digits with ``ember.distributions``.

The encoder maps an image to ``q(z|x) = Normal(loc, scale)`` over a small latent space; a
reparameterised sample ``z = q.rsample()`` goes through the decoder to per-pixel logits of
``p(x|z) = Bernoulli`` (pixels binarised at 1/2); training maximises the evidence lower bound

    ELBO(x) = E_q[log p(x|z)] - KL(q(z|x) || Normal(0, 1))

(one sample of ``z`` per image; the KL in closed form by ``kl_divergence``). Prints the
training ELBO per epoch and the held-out ELBO (nats per image; higher is better).

Run:
    python examples/vae_digits.py [--epochs 30] [--latent 8]
"""
from __future__ import annotations

import argparse
import time

import ember as em
from ember import datasets, nn, optim
from ember.data import DataLoader, TensorDataset
from ember.distributions import Bernoulli, Independent, Normal, kl_divergence


class VAE(nn.Module):
    """MLP encoder to (loc, scale) of a diagonal Gaussian; MLP decoder to pixel logits."""

    def __init__(self, n_pixels: int = 64, hidden: int = 128, latent: int = 8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n_pixels, hidden), nn.ReLU(),
                                     nn.Linear(hidden, 2 * latent))
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(),
                                     nn.Linear(hidden, n_pixels))

    def posterior(self, x) -> Normal:
        loc, raw_scale = self.encoder(x).chunk(2, dim=-1)
        return Normal(loc, nn.functional.softplus(raw_scale) + 1e-4)

    def likelihood(self, z) -> Independent:
        return Independent(Bernoulli(logits=self.decoder(z)), 1)

    def elbo(self, x):
        """Per-image ELBO (one reparameterised sample of z)."""
        q = self.posterior(x)
        z = q.rsample()
        kl = kl_divergence(q, Normal(0.0, 1.0)).sum(-1)
        return self.likelihood(z).log_prob(x) - kl


def main(argv=None) -> dict:
    """Train and evaluate; returns ``{"train_elbo" (per epoch), "test_elbo", "seconds"}``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--latent", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    em.manual_seed(args.seed)
    x_tr, _, x_te, _ = datasets.load_digits(seed=args.seed, flatten=True)
    x_tr, x_te = (x_tr > 0.5).float(), (x_te > 0.5).float()     # binary pixels
    model = VAE(x_tr.shape[1], latent=args.latent)
    opt = optim.Adam(model.parameters(), lr=args.lr)
    loader = DataLoader(TensorDataset(x_tr), batch_size=args.batch_size, shuffle=True)
    print(f"VAE on the digits: {len(x_tr)} train / {len(x_te)} test images, "
          f"{x_tr.shape[1]} binary pixels, {args.latent}-d latent")

    start, history = time.perf_counter(), []
    for epoch in range(1, args.epochs + 1):
        total = 0.0
        for (xb,) in loader:
            elbo = model.elbo(xb)
            loss = -elbo.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += elbo.sum().item()
        history.append(total / len(x_tr))
        print(f"epoch {epoch:3d}  train ELBO {history[-1]:9.3f} nats/image")

    with em.no_grad():
        em.manual_seed(args.seed + 1)
        test_elbo = model.elbo(x_te).mean().item()
    seconds = time.perf_counter() - start
    print(f"held-out ELBO: {test_elbo:.3f} nats/image ({seconds:.1f} s)")
    return {"train_elbo": history, "test_elbo": test_elbo, "seconds": seconds}


if __name__ == "__main__":
    main()
