"""``model.summary(example_input)``: a torchinfo-like table of a model's layers.

One forward pass runs under ``no_grad`` with hooks on every submodule; the model's
buffers (e.g. BatchNorm running stats) and the global RNG state are restored afterwards,
so summarising has no side effects.

FLOP convention (documented, like fvcore/torchinfo but explicit):

* ``macs``: multiply-accumulates of the matmul-like work — Linear ``N·in·out``,
  Bilinear ``N·in1·in2·out``, Conv ``out_numel·(C_in/groups)·prod(kernel)``, ConvTranspose
  ``in_numel·(C_out/groups)·prod(kernel)``, RNN/LSTM/GRU ``T·N·gates·H·(in + H)`` per layer
  and direction, MultiheadAttention's four projections plus ``QKᵀ`` and ``AV``.
* ``flops = 2·macs + elementwise``: a multiply-add is 2 FLOPs; a bias adds 1 per output
  element; pooling costs ``prod(kernel)`` per output element (adaptive pooling: input numel);
  views (Flatten, Unflatten, Identity) and Embedding lookups cost 0; every other leaf module
  (activations, normalisation, dropout, softmax...) costs 1 FLOP per output element.
* Work a container does itself (e.g. a residual ``x + f(x)`` in ``forward``) is not
  counted; a row's totals include its children's.
* ``activation_bytes``: bytes of the tensors output by leaf modules (what backward keeps).

Example:
    >>> net = ember.nn.Sequential(ember.nn.Linear(4, 8), ember.nn.ReLU())
    >>> s = net.summary(ember.randn(2, 4))
    >>> s.total_params, s.total_macs, s.total_flops     # 4·8+8 ; 2·4·8 ; 2·64 + 16 + 16
    (40, 64, 160)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..autograd.grad_mode import no_grad
from ..random import get_rng_state, set_rng_state
from ..tensor import Tensor

__all__ = ["summary", "ModelSummary", "LayerInfo"]


@dataclass
class LayerInfo:
    """One module call: where it sits, what it produced and what it cost."""
    name: str
    type: str
    depth: int
    is_leaf: bool
    input_shapes: list = field(default_factory=list)
    output_shapes: list = field(default_factory=list)
    num_params: int = 0          # parameters of this module and its children
    trainable_params: int = 0
    macs: int = 0                # this call, children included
    flops: int = 0
    activation_bytes: int = 0


@dataclass
class ModelSummary:
    """What :func:`summary` returns; ``print()`` it for the table."""
    model_name: str
    layers: list
    total_params: int
    trainable_params: int
    total_macs: int
    total_flops: int
    activation_bytes: int
    input_bytes: int
    param_bytes: int

    @property
    def non_trainable_params(self) -> int:
        return self.total_params - self.trainable_params

    @property
    def total_bytes(self) -> int:
        return self.input_bytes + self.activation_bytes + self.param_bytes

    def __str__(self) -> str:
        return _render(self)

    def __repr__(self) -> str:
        return _render(self)


def summary(model, *inputs, depth: int = 10, **kwargs) -> ModelSummary:
    """Run ``model(*inputs, **kwargs)`` once and report per-layer shapes, parameters,
    FLOPs and activation bytes (see the module docstring for the FLOP convention).

    Args:
        model: the Module.
        *inputs: example inputs for ``forward``.
        depth: deepest nesting level shown in the table (totals always cover everything).

    Example:
        >>> print(ember.nn.Linear(3, 2).summary(ember.randn(5, 3)))   # doctest: +SKIP
    """
    names = {}
    for n, m in model.named_modules(remove_duplicate=False):
        names.setdefault(id(m), n)
    rows, stack, handles = [], [], []

    def pre(mod, args):
        row = LayerInfo(names.get(id(mod), "?") or type(mod).__name__, type(mod).__name__,
                        len(stack), not mod._modules or _rule(mod) is not None, _shapes(args))
        ps = list(mod.parameters())
        row.num_params = sum(p.numel() for p in ps)
        row.trainable_params = sum(p.numel() for p in ps if p.requires_grad)
        rows.append(row)
        stack.append(row)

    def post(mod, args, out):
        row = stack.pop()
        outs = _tensors(out)
        row.output_shapes = [list(t.shape) for t in outs]
        if row.is_leaf:   # NOTE: overwrite: a costed module's children are not added twice
            macs, extra = _cost(mod, args, outs)
            row.macs = macs
            row.flops = 2 * macs + extra
            row.activation_bytes = sum(t.nbytes for t in outs)
        if stack:
            parent = stack[-1]
            parent.macs += row.macs
            parent.flops += row.flops
            parent.activation_bytes += row.activation_bytes

    for m in model.modules():
        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))
    saved_bufs = [(b, b.clone()) for b in model.buffers()]
    rng = get_rng_state()
    try:
        with no_grad():
            model(*inputs, **kwargs)
    finally:
        for h in handles:
            h.remove()
        with no_grad():
            for b, old in saved_bufs:
                b.copy_(old)
        set_rng_state(rng)
    params = list(model.parameters())
    top = [r for r in rows if r.depth == 0]
    return ModelSummary(
        model_name=type(model).__name__, layers=[r for r in rows if r.depth <= depth],
        total_params=sum(p.numel() for p in params),
        trainable_params=sum(p.numel() for p in params if p.requires_grad),
        total_macs=sum(r.macs for r in top), total_flops=sum(r.flops for r in top),
        activation_bytes=sum(r.activation_bytes for r in top),
        input_bytes=sum(t.nbytes for t in _tensors((inputs, kwargs))),
        param_bytes=sum(p.nbytes for p in params))


def _tensors(obj) -> list:
    """All tensors inside nested tuples/lists/dicts."""
    if isinstance(obj, Tensor):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _tensors(o)]
    return []


def _shapes(obj) -> list:
    return [list(t.shape) for t in _tensors(obj)]


def _numel(shape) -> int:
    return math.prod(shape)


def _cost(mod, args, outs) -> tuple[int, int]:
    """(macs, extra elementwise flops) of one leaf-module call."""
    kind = type(mod).__name__
    out_numel = sum(t.numel() for t in outs)
    xs = _tensors(args)
    x = xs[0] if xs else None
    has_bias = getattr(mod, "bias", None) is not None
    rule = _rule(mod)
    if rule is not None:
        return rule(mod, xs, outs, out_numel, has_bias)
    if kind in _FREE:
        return 0, 0
    if kind.endswith("Pool1d") or kind.endswith("Pool2d") or kind.endswith("Pool3d"):
        if kind.startswith("Adaptive"):
            return 0, x.numel() if x is not None else out_numel
        k = mod.kernel_size
        return 0, out_numel * (math.prod(k) if isinstance(k, (tuple, list)) else
                               k ** (int(kind[-2]) if kind[-2].isdigit() else 1))
    return 0, out_numel


def _rule(mod):
    """The cost rule for ``mod``'s class or its nearest base class with one."""
    for cls in type(mod).__mro__:
        rule = _RULES.get(cls.__name__)
        if rule is not None:
            return rule
    return None


def _linear(mod, xs, outs, out_numel, bias):
    return out_numel * mod.in_features, out_numel if bias else 0


def _bilinear(mod, xs, outs, out_numel, bias):
    return out_numel * mod.in1_features * mod.in2_features, out_numel if bias else 0


def _conv(mod, xs, outs, out_numel, bias):
    k = math.prod(mod.weight.shape[2:])
    if "Transpose" in type(mod).__name__:
        macs = xs[0].numel() * (mod.out_channels // mod.groups) * k
    else:
        macs = out_numel * (mod.in_channels // mod.groups) * k
    return macs, out_numel if bias else 0


def _rnn(mod, xs, outs, out_numel, bias):
    x = xs[0]
    gates = {"LSTM": 4, "GRU": 3}.get(type(mod).__name__, 1)
    batch_first = getattr(mod, "batch_first", False)
    if x.dim() == 2:
        steps, batch = x.shape[0], 1
    else:
        steps, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    dirs = 2 if getattr(mod, "bidirectional", False) else 1
    hidden = mod.hidden_size
    macs, size_in = 0, mod.input_size
    for _ in range(mod.num_layers):
        macs += dirs * steps * batch * gates * hidden * (size_in + hidden)
        size_in = hidden * dirs
    return macs, out_numel


def _mha(mod, xs, outs, out_numel, bias):
    e = mod.embed_dim
    seq = 0 if xs[0].dim() == 2 or not getattr(mod, "batch_first", False) else 1
    batch = 1 if xs[0].dim() == 2 else xs[0].shape[1 - seq]
    lq = xs[0].shape[seq]
    lk = xs[1].shape[seq] if len(xs) > 1 else lq
    kdim, vdim = getattr(mod, "kdim", e) or e, getattr(mod, "vdim", e) or e
    proj = batch * (lq * e * e + lk * kdim * e + lk * vdim * e + lq * e * e)
    attn = batch * 2 * lq * lk * e
    return proj + attn, outs[0].numel() if outs else 0


_RULES = {"Linear": _linear, "LazyLinear": _linear, "Bilinear": _bilinear,
          "Conv1d": _conv, "Conv2d": _conv, "Conv3d": _conv, "ConvTranspose1d": _conv,
          "ConvTranspose2d": _conv, "ConvTranspose3d": _conv, "RNN": _rnn, "LSTM": _rnn,
          "GRU": _rnn, "MultiheadAttention": _mha}
_FREE = {"Flatten", "Unflatten", "Identity", "Embedding", "EmbeddingBag"}


def _fmt_bytes(n: int) -> str:
    return f"{n / 1e6:.2f}"


def _render(s: ModelSummary) -> str:
    heads = ("Layer (type)", "Output Shape", "Param #", "MACs", "FLOPs")
    body = []
    for r in s.layers:
        label = ("  " * r.depth + ("├─" if r.depth else "") + f"{r.type}"
                 + (f" ({r.name})" if r.depth else ""))
        shape = ", ".join(str(x) for x in r.output_shapes) or "--"
        params = f"{r.num_params:,}" if r.is_leaf else f"({r.num_params:,})"
        body.append((label, shape, params, f"{r.macs:,}", f"{r.flops:,}"))
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(heads)]
    line = "  ".join(h.ljust(w) if i < 2 else h.rjust(w)
                     for i, (h, w) in enumerate(zip(heads, widths)))
    bar = "=" * len(line)
    out = [bar, line, bar]
    out += ["  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                      for i, (c, w) in enumerate(zip(b, widths))) for b in body]
    out += [bar,
            f"Total params: {s.total_params:,}",
            f"Trainable params: {s.trainable_params:,}",
            f"Non-trainable params: {s.non_trainable_params:,}",
            f"Total MACs: {s.total_macs:,}",
            f"Total FLOPs: {s.total_flops:,}",
            bar,
            f"Input size (MB): {_fmt_bytes(s.input_bytes)}",
            f"Activations size (MB): {_fmt_bytes(s.activation_bytes)}",
            f"Params size (MB): {_fmt_bytes(s.param_bytes)}",
            f"Estimated Total Size (MB): {_fmt_bytes(s.total_bytes)}",
            bar]
    return "\n".join(out)
