"""``MultiheadAttention`` (``torch.nn.MultiheadAttention``: same parameters, init and masks)."""
from __future__ import annotations

import math

from ... import dtypes as _dt
from ...autograd.grad_mode import no_grad
from ...ops.factories import empty
from ..functional import multi_head_attention_forward
from ..module import Module
from ..parameter import Parameter
from .linear import NonDynamicallyQuantizableLinear

__all__ = ["MultiheadAttention", "NonDynamicallyQuantizableLinear"]


def _xavier_uniform_(w) -> None:
    fan_out, fan_in = w.shape[0], w.shape[1] * math.prod(w.shape[2:])
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    w.uniform_(-bound, bound)


def _xavier_normal_(w) -> None:
    rf = math.prod(w.shape[2:])
    std = math.sqrt(2.0 / (w.shape[0] * rf + w.shape[1] * rf))
    w.normal_(0.0, std)


class MultiheadAttention(Module):
    """Multi-head attention ``softmax(Q Kᵀ / sqrt(d)) V`` over ``num_heads`` heads.

    Inputs are (L, N, E) — (N, L, E) with ``batch_first`` — or unbatched (L, E).
    ``key_padding_mask`` (N, S) and bool ``attn_mask`` use True for "do not attend"; float
    masks are added to the scores. Returns ``(output, weights)``; weights are None unless
    ``need_weights`` (averaged over heads if ``average_attn_weights``).

    Example:
        >>> mha = ember.nn.MultiheadAttention(8, 2, batch_first=True)
        >>> x = ember.randn(3, 5, 8)
        >>> out, w = mha(x, x, x)
        >>> tuple(out.shape), tuple(w.shape)
        ((3, 5, 8), (3, 5, 5))
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"MultiheadAttention: embed_dim and num_heads must be greater "
                             f"than 0, got embed_dim={embed_dim} and num_heads={num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible "
                             f"by num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        kw = dict(dtype=dtype or _dt.get_default_dtype(), device=device)
        E = embed_dim
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(empty((E, E), **kw))
            self.k_proj_weight = Parameter(empty((E, self.kdim), **kw))
            self.v_proj_weight = Parameter(empty((E, self.vdim), **kw))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(empty((3 * E, E), **kw))
            for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(n, None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * E, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(E, E, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(empty((1, 1, E), **kw))
            self.bias_v = Parameter(empty((1, 1, E), **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """xavier_uniform_ on the input projections, zero biases, xavier_normal_ on bias_k/v."""
        with no_grad():
            if self._qkv_same_embed_dim:
                _xavier_uniform_(self.in_proj_weight)
            else:
                for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                    _xavier_uniform_(w)
            if self.in_proj_bias is not None:
                self.in_proj_bias.zero_()
                self.out_proj.bias.zero_()
            if self.bias_k is not None:
                _xavier_normal_(self.bias_k)
                _xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        batched = query.ndim == 3
        if self.batch_first and batched:
            # NOTE: keep the `query is key is value` identity: it selects the packed projection.
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = (x.transpose(1, 0) for x in (query, key))
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        sep = {}
        if not self._qkv_same_embed_dim:
            sep = dict(use_separate_proj_weight=True, q_proj_weight=self.q_proj_weight,
                       k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight)
        out, w = multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
            self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
            self.out_proj.weight, self.out_proj.bias, training=self.training,
            key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
            average_attn_weights=average_attn_weights, is_causal=is_causal, **sep)
        if self.batch_first and batched:
            out = out.transpose(1, 0)
        return out, w
