"""Autocast op lists, per device type, as PyTorch 2.13 keeps them (``aten/src/ATen/autocast_mode``).

Each list maps a PyTorch op name to its *cast policy* inside an autocast region:

=================  ==========================================================================
``"lower"``        float inputs (not float64) run in the region's dtype (bfloat16/float16)
``"fp32"``         float inputs (not float64) run in float32
``"promote"``      float inputs (not float64) run in the widest of their dtypes
``"banned"``       the op raises (CUDA's ``binary_cross_entropy``: unsafe in float16)
=================  ==========================================================================

An op on no list runs on its inputs as they are. The names are PyTorch's; the dispatcher
looks a primitive up by its registry name (``matmul``, ``cat``, ``prod``, ``einsum``...), and a
composite (``linear``, ``conv2d``, the losses) applies its policy at its entry point
(:func:`ember.ops.dispatch.autocast_entry`) and runs its body with autocast off, as PyTorch's
autocast kernels redispatch with the autocast key excluded.

The CPU and CUDA lists differ: ``layer_norm``, ``softmax`` and ``exp`` keep the lower dtype on
CPU, run in float32 on CUDA. ``tests/amp/test_autocast.py`` checks every CPU entry against
``torch.autocast("cpu")`` and the CUDA lists against the installed PyTorch's header.
"""
from __future__ import annotations

_CPU_LOWER = """
conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm addbmm linear matmul conv_tbc
conv_transpose1d conv_transpose2d conv_transpose3d prelu scaled_dot_product_attention
_native_multi_head_attention _convolution mkldnn_rnn_layer
"""
# NOTE: einsum and tensordot are not on PyTorch's CPU list but decompose into bmm/mm there,
# so their results come out in the lower dtype; Ember's einsum is one primitive.
_CPU_DERIVED_LOWER = "einsum"

_CPU_FP32 = """
avg_pool3d binary_cross_entropy grid_sampler polar prod quantile nanquantile stft cdist trace
view_as_complex cholesky cholesky_inverse cholesky_solve inverse lu_solve orgqr ormqr pinverse
max_pool3d max_unpool2d max_unpool3d adaptive_avg_pool3d reflection_pad1d reflection_pad2d
replication_pad1d replication_pad2d replication_pad3d mse_loss cosine_embedding_loss nll_loss
nll_loss2d hinge_embedding_loss poisson_nll_loss smooth_l1_loss cross_entropy l1_loss huber_loss
margin_ranking_loss soft_margin_loss triplet_margin_loss multi_margin_loss ctc_loss kl_div
multilabel_margin_loss binary_cross_entropy_with_logits fft_fft fft_ifft fft_fft2 fft_ifft2
fft_fftn fft_ifftn fft_rfft fft_irfft fft_rfft2 fft_irfft2 fft_rfftn fft_irfftn fft_hfft
fft_ihfft linalg_cond linalg_matrix_rank linalg_solve linalg_cholesky linalg_svdvals
linalg_eigvals linalg_eigvalsh linalg_inv linalg_householder_product linalg_tensorinv
linalg_tensorsolve fake_quantize_per_tensor_affine geqrf _lu_with_info qr svd
triangular_solve fractional_max_pool2d fractional_max_pool3d adaptive_max_pool3d
linalg_qr linalg_cholesky_ex linalg_svd linalg_eig linalg_eigh linalg_lstsq linalg_inv_ex
"""

_CPU_PROMOTE = "stack cat index_copy"

_CUDA_LOWER = """
_convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d
convolution prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm bmm
chain_matmul linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell
rnn_tanh_cell rnn_relu_cell _scaled_dot_product_flash_attention scaled_dot_product_attention
"""

_CUDA_FP32 = """
acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow softplus
layer_norm native_layer_norm rms_norm group_norm frobenius_norm nuclear_norm cosine_similarity
poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div l1_loss
smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss soft_margin_loss
triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm
logsumexp upsample_nearest1d _upsample_nearest_exact1d upsample_nearest2d
_upsample_nearest_exact2d upsample_nearest3d _upsample_nearest_exact3d upsample_linear1d
upsample_bilinear2d _upsample_bilinear2d_aa upsample_trilinear3d upsample_bicubic2d
_upsample_bicubic2d_aa
"""
# NOTE: PyTorch's "fp32_set_opt_dtype" ops: called with dtype=float32 when no dtype is given,
# which gives what casting the inputs to float32 gives.
_CUDA_FP32_SET_OPT_DTYPE = """
prod softmax log_softmax cumprod cumsum linalg_vector_norm linalg_matrix_norm sum
"""
# NOTE: not on PyTorch's CUDA list, but it decomposes there into log_softmax + nll_loss (both
# float32), so its result is float32.
_CUDA_DERIVED_FP32 = "cross_entropy"

_CUDA_PROMOTE = """
addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add
stack cat index_copy
"""

_CUDA_BANNED = "binary_cross_entropy"


def _table(**policies: str) -> dict[str, str]:
    table: dict[str, str] = {}
    for policy, names in policies.items():
        for name in names.split():
            if name in table:
                raise ValueError(f"autocast op lists: {name!r} is on two lists")
            table[name] = policy.rstrip("_")
    return table


#: ``OP_LISTS[device_type][op name] -> policy``.
OP_LISTS: dict[str, dict[str, str]] = {
    "cpu": _table(lower=_CPU_LOWER + _CPU_DERIVED_LOWER, fp32=_CPU_FP32,
                  promote=_CPU_PROMOTE),
    "cuda": _table(lower=_CUDA_LOWER, fp32=_CUDA_FP32 + _CUDA_DERIVED_FP32,
                   fp32_=_CUDA_FP32_SET_OPT_DTYPE, promote=_CUDA_PROMOTE,
                   banned=_CUDA_BANNED),
}
