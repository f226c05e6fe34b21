"""JAX peer for ``bench/compile.py``: W1-W4 written the way a JAX user writes them.

Models are pure functions of a parameter pytree; one ``jax.jit`` covers the whole training
step (forward, cross-entropy, ``jax.value_and_grad``, the optimizer update), with the
parameters and optimizer state donated so XLA updates them in place. The optimizers are
written by hand (no optax/flax) from the hyper-parameters of the torch/Ember optimizer
``bench/train.py`` builds, and the parameters start FROM THE SAME WEIGHTS: the torch-named
NumPy state dict that ``bench/compile.py`` already extracts. So the JAX column times the same
computation as the others, and ``bench/compile.py`` checks its first losses against torch's.

Layouts: torch's ``Linear.weight`` is (out, in); here it becomes a (in, out) kernel, as flax
stores it, so a layer is ``x @ w + b``. Convolutions keep torch's OIHW weights and NCHW
activations (``lax.conv_general_dilated`` with those dimension numbers), so ``Flatten``
needs no permutation.

Only ``bench/compile.py`` imports this module, and only when ``import jax`` works
(``pip install -e '.[bench]'`` installs ``jax[cpu]``); Ember itself never imports JAX.
"""
from __future__ import annotations

import inspect
import os
import time
from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import train

NAME = "jax.jit"
LN_EPS = 1e-5       # nn.LayerNorm's default, which bench/train.py's make_gpt uses


def describe() -> str:
    """Version and threading of the JAX CPU backend, for the bench's config line."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:      # not Linux
        cores = os.cpu_count()
    flags = os.environ.get("XLA_FLAGS")
    return (f"jax {jax.__version__} on {jax.default_backend()}: default threading, XLA's "
            f"intra-op Eigen pool has one thread per schedulable core ({cores})"
            + (f"; XLA_FLAGS={flags}" if flags else ""))


# ------------------------------------------------------------------------ models
def _linear(state: dict, name: str, bias: bool = True) -> dict:
    """torch ``Linear`` ``name`` as a flax-style {w: (in, out), b: (out,)} leaf."""
    p = {"w": jnp.asarray(state[f"{name}.weight"].T)}
    if bias:
        p["b"] = jnp.asarray(state[f"{name}.bias"])
    return p


def _dense(p: dict, x):
    return x @ p["w"] + p["b"] if "b" in p else x @ p["w"]


def mlp_params(state: dict, **_) -> list:
    """``nn.Sequential(Linear, ReLU, ..., Linear)``: the Linears sit at indices 0, 2, 4..."""
    idx = sorted({int(k.split(".")[0]) for k in state})
    return [_linear(state, str(i)) for i in idx]


def mlp(params: list, x):
    for p in params[:-1]:
        x = jax.nn.relu(_dense(p, x))
    return _dense(params[-1], x)


def cnn_params(state: dict, **_) -> dict:
    """``build_cnn``'s Sequential: conv at 0 and 3, Linear at 7 and 9 (ReLU/pool/flatten
    between hold no weights)."""
    conv = lambda i: {"w": jnp.asarray(state[f"{i}.weight"]),   # noqa: E731 - OIHW
                      "b": jnp.asarray(state[f"{i}.bias"])}
    return {"conv1": conv(0), "conv2": conv(3),
            "fc1": _linear(state, "7"), "fc2": _linear(state, "9")}


def _conv_relu_pool(p: dict, x):
    """Conv2d(k=3, padding=1) -> ReLU -> MaxPool2d(2), NCHW activations, OIHW weights."""
    x = lax.conv_general_dilated(x, p["w"], window_strides=(1, 1), padding=((1, 1), (1, 1)),
                                 dimension_numbers=("NCHW", "OIHW", "NCHW"))
    x = jax.nn.relu(x + p["b"][None, :, None, None])
    return lax.reduce_window(x, -jnp.inf, lax.max,
                             (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def cnn(params: dict, x):
    x = _conv_relu_pool(params["conv2"], _conv_relu_pool(params["conv1"], x))
    x = jax.nn.relu(_dense(params["fc1"], x.reshape(x.shape[0], -1)))
    return _dense(params["fc2"], x)


def gpt_params(state: dict, **_) -> dict:
    """``make_gpt``'s names: tok/pos embeddings, blocks.i.{ln1, qkv, proj, ln2, fc, out},
    ln_f and an untied, bias-free head."""
    ln = lambda n: {"g": jnp.asarray(state[f"{n}.weight"]),    # noqa: E731
                    "b": jnp.asarray(state[f"{n}.bias"])}
    if any(".attn." in k for k in state):
        raise NotImplementedError("W3 with attn='mha' (nn.MultiheadAttention) has no JAX peer; "
                                  "only the default attn='sdpa'")
    n_layers = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("blocks."))
    blocks = [{"ln1": ln(f"blocks.{i}.ln1"), "ln2": ln(f"blocks.{i}.ln2"),
               **{n: _linear(state, f"blocks.{i}.{n}") for n in ("qkv", "proj", "fc", "out")}}
              for i in range(n_layers)]
    return {"tok": jnp.asarray(state["tok.weight"]), "pos": jnp.asarray(state["pos.weight"]),
            "blocks": blocks, "ln_f": ln("ln_f"), "head": _linear(state, "head", bias=False)}


def _layer_norm(p: dict, x):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)       # biased, as torch's
    return (x - mu) * lax.rsqrt(var + LN_EPS) * p["g"] + p["b"]


def _attention(p: dict, x, heads: int):
    """The qkv Linear, ``F.scaled_dot_product_attention(is_causal=True)`` and the projection."""
    B, T, C = x.shape
    q, k, v = _dense(p["qkv"], x).reshape(B, T, 3, heads, C // heads).transpose(2, 0, 3, 1, 4)
    s = (q @ k.swapaxes(-1, -2)) / np.sqrt(C // heads).astype(np.float32)
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
    y = jax.nn.softmax(s, axis=-1) @ v
    return _dense(p["proj"], y.transpose(0, 2, 1, 3).reshape(B, T, C))


def gpt(params: dict, idx, heads: int):
    x = params["tok"][idx] + params["pos"][: idx.shape[1]]
    for b in params["blocks"]:
        x = x + _attention(b, _layer_norm(b["ln1"], x), heads)
        # NOTE: F.gelu's default is the exact erf form, hence approximate=False
        x = x + _dense(b["out"], jax.nn.gelu(_dense(b["fc"], _layer_norm(b["ln2"], x)),
                                             approximate=False))
    return _dense(params["head"], _layer_norm(params["ln_f"], x))


def _default(fn: Callable, size: dict, key: str):
    """``size[key]``, else the default of ``fn``'s parameter ``key`` (what train.py builds)."""
    return size.get(key, inspect.signature(fn).parameters[key].default)


def model_for(wl, size: dict) -> tuple[Callable, Callable]:
    """(params_from_state, forward(params, x)) for the workload ``wl`` of bench/train.py."""
    if wl.build is train.build_mlp:
        return mlp_params, mlp
    if wl.build is train.build_cnn:
        return cnn_params, cnn
    if wl.build is train.build_gpt:
        if _default(train.build_gpt, size, "attn") != "sdpa":
            raise NotImplementedError("W3's JAX peer implements attn='sdpa' only")
        return gpt_params, partial(gpt, heads=_default(train.build_gpt, size, "heads"))
    raise NotImplementedError(f"no JAX peer for workload {wl.name!r}")


def cross_entropy(logits, y):
    """``F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))``: mean over all positions."""
    logp = jax.nn.log_softmax(logits.reshape(-1, logits.shape[-1]), axis=-1)
    return -jnp.take_along_axis(logp, y.reshape(-1, 1), axis=-1).mean()


# ------------------------------------------------------------------------ optimizers
def optimizer(opt) -> tuple[Callable, Callable]:
    """(init(params), update(params, grads, state)) mirroring the torch/Ember optimizer ``opt``.

    The hyper-parameters are read from ``opt.param_groups``, so they follow bench/train.py;
    options this peer does not implement raise rather than silently differ.
    """
    if len(opt.param_groups) != 1:
        raise NotImplementedError("JAX peer: one parameter group only")
    h = opt.param_groups[0]
    kind = type(opt).__name__
    if h.get("maximize") or h.get("amsgrad") or h.get("nesterov") or h.get("momentum"):
        raise NotImplementedError(f"JAX peer: {kind} with maximize/amsgrad/nesterov/momentum")
    lr, wd = float(h["lr"]), float(h.get("weight_decay", 0.0))
    tmap = jax.tree_util.tree_map
    if kind == "SGD":
        def update(params, grads, state):
            return tmap(lambda p, g: p - lr * (g + wd * p), params, grads), state
        return (lambda params: ()), update
    if kind not in ("Adam", "AdamW"):
        raise NotImplementedError(f"JAX peer: optimizer {kind}")
    (b1, b2), eps = map(float, h["betas"]), float(h["eps"])
    decoupled = kind == "AdamW" or bool(h.get("decoupled_weight_decay"))

    def init(params):
        # NOTE: m and v must be distinct buffers: the step donates both
        return {"t": jnp.zeros((), jnp.int32), "m": tmap(jnp.zeros_like, params),
                "v": tmap(jnp.zeros_like, params)}

    def update(params, grads, state):
        t = state["t"] + 1
        if not decoupled:                               # Adam's L2 penalty joins the gradient
            grads = tmap(lambda g, p: g + wd * p, grads, params)
        m = tmap(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = tmap(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
        tf = t.astype(jnp.float32)
        step_size, bc2_sqrt = lr / (1 - b1 ** tf), jnp.sqrt(1 - b2 ** tf)

        def one(p, m, v):                               # torch's _single_tensor_adam, in order
            if decoupled:
                p = p * (1 - lr * wd)
            return p - step_size * m / (jnp.sqrt(v) / bc2_sqrt + eps)
        return tmap(one, params, m, v), {"t": t, "m": m, "v": v}
    return init, update


# ------------------------------------------------------------------------ the steps
def train_step(wl, size: dict, state: dict, opt, x: np.ndarray, y: np.ndarray):
    """JAX peer of one bench/compile.py workload.

    Args:
        wl, size: the bench/train.py workload and its size dict (``wl.size`` or ``wl.tiny``).
        state: torch-named NumPy state dict holding the initial weights.
        opt: the torch (or Ember) optimizer whose hyper-parameters to mirror.
        x, y: the workload's data as NumPy arrays.

    Returns:
        (step, first_losses, compile_s): ``step()`` runs one training step and returns the
        loss once the step's outputs are ready; ``first_losses`` are the losses of the first
        two steps, which ``compile_s`` (trace + XLA compile + run) timed.
    """
    from_state, forward = model_for(wl, size)
    init, update = optimizer(opt)
    params = from_state(state)
    carry = [params, init(params)]
    x = jnp.asarray(x if x.dtype.kind == "f" else x.astype(np.int32))
    y = jnp.asarray(y.astype(np.int32))

    @partial(jax.jit, donate_argnums=(0, 1))
    def jstep(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda p: cross_entropy(forward(p, x), y))(params)
        params, opt_state = update(params, grads, opt_state)
        return params, opt_state, loss

    def step():
        # NOTE: block on every output, not just the loss: the timed step includes the update.
        carry[0], carry[1], loss = jax.block_until_ready(jstep(carry[0], carry[1], x, y))
        return loss

    t0 = time.perf_counter()
    first = [float(step()), float(step())]
    return step, first, time.perf_counter() - t0


def gelu_steps(gelu: Callable, xa: np.ndarray, dya: np.ndarray):
    """W4 under ``jax.jit``: (forward(), forward_backward(), compile_s, y, dx).

    ``gelu(lib, x)`` is bench/compile.py's expression, called with ``lib=jnp``; the
    forward+backward returns (y, dx) with dx = ``vjp(dy)``, what Ember's ``autograd.grad(y,
    [x], dy)`` and torch's ``y.backward(dy)`` compute.
    """
    x, dy = jnp.asarray(xa), jnp.asarray(dya)
    fwd = jax.jit(lambda x: gelu(jnp, x))

    @jax.jit
    def fwd_bwd(x, dy):
        y, vjp = jax.vjp(lambda v: gelu(jnp, v), x)
        return y, vjp(dy)[0]

    t0 = time.perf_counter()
    fwd(x).block_until_ready()
    y, dx = jax.block_until_ready(fwd_bwd(x, dy))
    compile_s = time.perf_counter() - t0
    return (lambda: fwd(x).block_until_ready(),
            lambda: jax.block_until_ready(fwd_bwd(x, dy)),
            compile_s, np.asarray(y), np.asarray(dx))
