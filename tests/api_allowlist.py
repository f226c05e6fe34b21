"""PyTorch public names Ember deliberately lacks, per namespace, each with its reason.

Read by ``tests/test_api_coverage.py`` (a name of a checked namespace that is neither in
Ember nor here fails it; a name here that Ember now has fails it too, so the list stays
true) and by ``scripts/api_coverage.py`` (the "after allowlist" column). Reasons are
one line; a group shares one reason. Names are PyTorch 2.13's.
"""
from __future__ import annotations


def _group(reason: str, names: str) -> dict[str, str]:
    return {n: reason for n in names.split()}


SPARSE = ("sparse layouts: Ember's COO tensors are a separate small type (ember.sparse), "
          "strided tensors do not carry sparse-only methods; CSR/CSC/BSR/BSC are absent")
QUANT = "quantized tensors/dtypes: Ember has no quantization backend"
REMOVED = "removed from PyTorch (raises there, pointing to torch.linalg or others)"
DEVICE = "device type Ember has no backend for (XPU, IPU, MTIA, MKL-DNN)"
TORCH_FUNCTION = ("__torch_function__ protocol internals: Ember overrides through dispatch "
                  "modes instead")
TYPING = "typing helper re-exported by torch.nn.functional's source, not an API"
DATAPIPES = "torch.utils.data DataPipes: deprecated by PyTorch (torchdata dropped them)"

ALLOWLIST: dict[str, dict[str, str]] = {
    "torch.Tensor": {
        **_group(SPARSE, "ccol_indices coalesce col_indices crow_indices dense_dim indices "
                         "is_coalesced resize_as_sparse_ row_indices smm sparse_dim "
                         "sparse_mask sparse_resize_ sparse_resize_and_clear_ sspaddmm "
                         "to_sparse_bsc to_sparse_bsr to_sparse_csc to_sparse_csr values"),
        **_group(QUANT, "dequantize int_repr q_per_channel_axis q_per_channel_scales "
                        "q_per_channel_zero_points q_scale q_zero_point qscheme"),
        **_group(REMOVED, "eig lstsq solve symeig"),
        **_group(DEVICE, "ipu mtia xpu to_mkldnn"),
        "reinforce": "stochastic-function API removed in PyTorch 0.4 (raises there)",
        "volatile": "removed in PyTorch 0.4 (always False, warns); use no_grad",
        "record_stream": "CUDA caching-allocator stream hint; Ember's CPU storages have none",
        "chalf": "complex32 dtype: Ember has complex64/complex128 only",
        "storage_type": "legacy typed storage classes (FloatStorage...) are not provided",
        "to_padded_tensor": "nested (jagged) tensors are not provided",
        "index": "first-class dims (functorch.dim) binding, not provided",
        "name": "undocumented internal attribute",
        "hash_tensor": "new in 2.13, undocumented hashing reduction",
        "slice_inverse": "internal inverse of a slice view used by PyTorch's compiler",
        "grad_dtype": "needs an engine hook casting incoming gradients; not yet",
    },
    "torch.nn": {
        **_group(QUANT, "intrinsic qat quantizable quantized"),
    },
    "torch.nn.functional": {
        **_group(TYPING, "BroadcastingList1 BroadcastingList2 BroadcastingList3 Callable "
                         "DType Optional TYPE_CHECKING Tensor ScalingType SwizzleType"),
        **_group(TORCH_FUNCTION, "boolean_dispatch handle_torch_function has_torch_function "
                                 "has_torch_function_unary has_torch_function_variadic"),
        **_group("docstring fragments, not API", "reproducibility_notes "
                 "sparse_support_notes tf32_notes"),
        **_group("float8/grouped GEMMs for CUDA tensor cores", "grouped_mm scaled_mm "
                 "scaled_grouped_mm"),
    },
    "torch.utils.data": _group(DATAPIPES, "DFIterDataPipe DataChunk IterDataPipe MapDataPipe "
                               "argument_validation datapipes functional_datapipe graph "
                               "graph_settings guaranteed_datapipes_determinism "
                               "non_deterministic runtime_validation "
                               "runtime_validation_disabled"),
}

IMPORTED = "a name torch's source imports (typing, functools, collections...), not an API"
DOCS = "docstring fragments PyTorch's source formats its docstrings with, not an API"

ALLOWLIST.update({
    "torch.optim.lr_scheduler": {
        **_group(IMPORTED, "Any Counter Literal Optimizer Self SupportsFloat TYPE_CHECKING "
                           "Tensor TypedDict annotations bisect_right cast inf override "
                           "partial ref wraps"),
        "EPOCH_DEPRECATION_WARNING": "text of a deprecation warning, not an API",
    },
    "torch.special": {"Tensor": IMPORTED, **_group(DOCS, "common_args multi_dim_common")},
    "torch.fft": {"Tensor": IMPORTED, **_group(DOCS, "common_args factory_common_args")},
    "torch.linalg": {"common_notes": DOCS},
    "torch.nn.utils": _group("memory formats (channels_last): Ember tensors have one "
                             "layout, so there is nothing to convert",
                             "convert_conv2d_weight_memory_format "
                             "convert_conv3d_weight_memory_format memory_format"),
})

#: Namespaces whose every missing name must be allowlisted (the others only report).
COMPLETE = {"torch.Tensor", "torch.nn", "torch.nn.functional", "torch.optim",
            "torch.utils.data", "torch.optim.lr_scheduler", "torch.special", "torch.fft",
            "torch.linalg", "torch.nn.utils", "torch.distributions"}

#: Coverage targets after the allowlist (issue 17), by namespace label.
TARGETS = {"torch.Tensor": 0.95, "torch.nn": 0.95, "torch.nn.functional": 0.95,
           "torch.optim": 0.95, "torch.utils.data": 0.95, "torch (functions)": 0.70}
