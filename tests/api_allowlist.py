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
})

#: Namespaces whose every missing name must be allowlisted (the others only report).
COMPLETE = {"torch.Tensor", "torch.nn", "torch.nn.functional", "torch.optim",
            "torch.utils.data", "torch.optim.lr_scheduler", "torch.special", "torch.fft",
            "torch.linalg", "torch.nn.utils", "torch.distributions"}

#: Coverage targets after the allowlist (issue 17), by namespace label.
TARGETS = {"torch.Tensor": 0.95, "torch.nn": 0.95, "torch.nn.functional": 0.95,
           "torch.optim": 0.95, "torch.utils.data": 0.95, "torch (functions)": 0.70}

# --------------------------------------------------------------- torch, torch.func, torch.cuda
JIT = ("TorchScript (torch.jit) IR, type system and runtime: Ember compiles with "
       "ember.compile/ember.fx instead of a scripting language")
STORAGES = ("legacy typed storage classes and (de)serialization contexts of torch.save's "
            "pickle format: Ember's save is safetensors, no pickle")
SYMBOLIC = "symbolic-shape (SymInt) internals of torch.export/dynamo"
ATEN_INTERNAL = ("ATen-internal entry point behind a public function Ember has (use the "
                 "nn/nn.functional API it backs)")
CUDA_KERNEL = "vendor-library entry point (cuDNN, MIOpen, oneDNN/MKL-DNN, FBGEMM)"
NARROW_DTYPES = ("dtype Ember has no arrays for (float8/float4, sub-byte ints, uint16-64, "
                 "complex32, bit types)")
BUILD = "libtorch build-configuration flag or loader switch"
SUBMODULE = "PyTorch subsystem Ember does not provide"

ALLOWLIST["torch"] = {
    **_group(JIT, "AliasDb AnyType Argument ArgumentSpec AwaitType Block BoolType CallStack "
                  "Capsule ClassType Code CompilationUnit CompleteArgumentSpec ComplexType "
                  "ConcreteModuleType ConcreteModuleTypeBuilder DeepCopyMemoTable "
                  "DeviceObjType DictType EnumType ErrorReport ExecutionPlan FileCheck "
                  "FloatType FunctionSchema Future FutureType Gradient GraphExecutorState "
                  "IODescriptor InferredType IntType InterfaceType JITException ListType "
                  "LiteScriptModule LockingLogger LoggerBase ModuleDict Node NoneType "
                  "NoopLogger NumberType OperatorInfo OptionalType ParameterDict BufferDict "
                  "PyObjectType RRefType ScriptClass ScriptClassFunction ScriptDict "
                  "ScriptDictIterator ScriptDictKeyIterator ScriptFunction ScriptList "
                  "ScriptListIterator ScriptMethod ScriptModule ScriptModuleSerializer "
                  "ScriptObject ScriptObjectProperty StaticModule StreamObjType StringType "
                  "TensorType TracingState TupleType Type UnionType Use Value fork wait "
                  "futures classes import_ir_module import_ir_module_from_buffer "
                  "merge_type_from_type_comment parse_ir parse_schema parse_type_comment "
                  "unify_type_list classproperty thread_safe_generator"),
    **_group(STORAGES, "BFloat16Storage BoolStorage ByteStorage CharStorage "
                       "ComplexDoubleStorage ComplexFloatStorage DoubleStorage FloatStorage "
                       "HalfStorage IntStorage LongStorage ShortStorage Storage StorageBase "
                       "TypedStorage UntypedStorage QInt32Storage QInt8Storage "
                       "QUInt2x4Storage QUInt4x2Storage QUInt8Storage PyTorchFileReader "
                       "PyTorchFileWriter SerializationStorageContext "
                       "DeserializationStorageContext"),
    **_group("ThroughputBenchmark (a C++ multi-threaded serving benchmark) and its enums",
             "ThroughputBenchmark BenchmarkConfig BenchmarkExecutionStats AggregationType "
             "AVG SUM"),
    **_group(TORCH_FUNCTION, "DisableTorchFunction DisableTorchFunctionSubclass overrides"),
    **_group("dispatcher internals (dispatch keys, op tags, op lists): Ember dispatches "
             "through its registry and dispatch modes", "DispatchKey DispatchKeySet "
             "ExcludeDispatchKeyGuard Tag PRIVATE_OPS"),
    **_group(SYMBOLIC, "SymBool SymBoolType SymFloat SymInt SymIntType sym_constrain_range "
                       "sym_constrain_range_for_size sym_fresh_size"),
    **_group(QUANT, "ao quantization dequantize int_repr q_per_channel_axis "
                    "q_per_channel_scales q_per_channel_zero_points q_scale q_zero_point "
                    "qint32 qint8 quint2x4 quint4x2 quint8 qscheme per_channel_affine "
                    "per_channel_affine_float_qparams per_channel_symmetric "
                    "per_tensor_affine per_tensor_symmetric quantize_per_channel "
                    "quantize_per_tensor quantize_per_tensor_dynamic quantized_batch_norm "
                    "quantized_gru quantized_gru_cell quantized_lstm quantized_lstm_cell "
                    "quantized_max_pool1d quantized_max_pool2d quantized_max_pool3d "
                    "quantized_rnn_relu_cell quantized_rnn_tanh_cell empty_quantized "
                    "fake_quantize_per_channel_affine fake_quantize_per_tensor_affine "
                    "fused_moving_avg_obs_fake_quant choose_qparams_optimized "
                    "fbgemm_linear_fp16_weight fbgemm_linear_fp16_weight_fp32_activation "
                    "fbgemm_linear_int8_weight fbgemm_linear_int8_weight_fp32_activation "
                    "fbgemm_linear_quantize_weight fbgemm_pack_gemm_matrix_fp16 "
                    "fbgemm_pack_quantized_matrix"),
    **_group(CUDA_KERNEL, "cudnn_affine_grid_generator cudnn_batch_norm cudnn_convolution "
                          "cudnn_convolution_add_relu cudnn_convolution_relu "
                          "cudnn_convolution_transpose cudnn_grid_sampler cudnn_is_acceptable "
                          "miopen_batch_norm miopen_convolution miopen_convolution_add_relu "
                          "miopen_convolution_relu miopen_convolution_transpose "
                          "miopen_ctc_loss miopen_depthwise_convolution miopen_rnn "
                          "mkldnn_adaptive_avg_pool2d mkldnn_convolution "
                          "mkldnn_linear_backward_weights mkldnn_max_pool2d mkldnn_max_pool3d "
                          "mkldnn_rnn_layer"),
    **_group("SyncBatchNorm's CUDA statistics kernels (Ember's SyncBatchNorm all-reduces "
             "moments in Ember ops)", "batch_norm_backward_elemt batch_norm_backward_reduce "
             "batch_norm_elemt batch_norm_gather_stats batch_norm_gather_stats_with_counts "
             "batch_norm_stats batch_norm_update_stats"),
    **_group(ATEN_INTERNAL, "native_batch_norm native_dropout native_group_norm "
                            "native_layer_norm native_norm norm_except_dim embedding_bag "
                            "embedding_renorm_ lstm gru rnn_relu rnn_tanh "
                            "autocast_decrement_nesting autocast_increment_nesting "
                            "prepare_multiprocessing_environment get_file_path"),
    **_group(DEVICE, "xpu mtia get_autocast_ipu_dtype get_autocast_xla_dtype "
                     "is_autocast_ipu_enabled is_autocast_xla_enabled set_autocast_ipu_dtype "
                     "set_autocast_ipu_enabled set_autocast_xla_dtype set_autocast_xla_enabled"),
    **_group(NARROW_DTYPES, "bit bits16 bits1x8 bits2x4 bits4x2 bits8 chalf complex32 "
                            "float4_e2m1fn_x2 float8_e4m3fn float8_e4m3fnuz float8_e5m2 "
                            "float8_e5m2fnuz float8_e8m0fnu int1 int2 int3 int4 int5 int6 int7 "
                            "uint1 uint2 uint3 uint4 uint5 uint6 uint7 uint16 uint32 uint64"),
    **_group(SPARSE, "ccol_indices_copy col_indices_copy crow_indices_copy indices_copy "
                     "row_indices_copy values_copy hsmm hspmm saddmm smm sspaddmm "
                     "resize_as_sparse_ sparse_bsc sparse_bsc_tensor sparse_bsr "
                     "sparse_bsr_tensor sparse_compressed_tensor sparse_csc sparse_csc_tensor "
                     "sparse_csr sparse_csr_tensor"),
    **_group(REMOVED, "eig lstsq matrix_rank solve symeig"),
    **_group(BUILD, "USE_GLOBAL_DEPS USE_RTLD_GLOBAL_WITH_LIBTORCH compiled_with_cxx11_abi "
                    "has_lapack has_mkl has_openmp has_spectral"),
    **_group(SUBMODULE, "cpp export masked monitor nested jagged package "
                        "quasirandom return_types functional torch_version "
                        "windows"),
    "TYPE_CHECKING": IMPORTED,
    "AcceleratorError": "error of a failed accelerator runtime call (CUDA/XPU runtime)",
    "FatalError": "libtorch C++ fatal-error exception type",
    "mps": "Apple MPS device module: Ember has no MPS backend (ember.backends.mps answers)",
    "lobpcg": "iterative sparse eigensolver; use ember.linalg.eigh",
    "segment_reduce": "prototype ATen op (unstable API)",
    "hash_tensor": "new in 2.13, undocumented hashing reduction",
    "slice_inverse": "internal inverse of a slice view used by PyTorch's compiler",
    "profiler_allow_cudagraph_cupti_lazy_reinit_cuda12": "CUDA-graph/CUPTI profiler switch",
}

ALLOWLIST["torch.func"] = {
    "debug_unwrap": "functorch wrapper-tensor debugging helper",
    "functionalize": "removes mutations for torch's compiler; ember.compile functionalises "
                     "in-place writes itself",
    "linearize": "not yet provided: use ember.func.jvp (linearize caches the primal)",
    "rearrange": "einops-style first-class-dims rearrange, not provided",
    "replace_all_batch_norm_modules_": "not yet provided (patches BatchNorm running stats "
                                       "for vmap)",
}

CUDA_GRAPHS = ("pluggable allocators and MemPool objects: Ember's cuda backend has CUDAGraph, "
               "graph, graph_pool_handle and make_graphed_callables (ember/cuda/graphs.py)")
CUDA_DRIVER = ("CUDA driver/runtime, NVML or library handles: not exposed by Ember's "
               "CuPy-based cuda backend")
CUDA_TYPES = "legacy torch.cuda.*Tensor/*Storage types: use ember.tensor(..., device='cuda')"
CUDA_SUBMODULE = "torch.cuda submodule Ember does not provide as a module"

ALLOWLIST["torch.cuda"] = {
    **_group(IMPORTED, "Any Callable NewType Optional TYPE_CHECKING cast lru_cache "
                       "classproperty"),
    **_group(CUDA_TYPES, "BFloat16Storage BFloat16Tensor BoolStorage BoolTensor ByteStorage "
                         "ByteTensor CharStorage CharTensor ComplexDoubleStorage "
                         "ComplexFloatStorage DoubleStorage DoubleTensor FloatStorage "
                         "FloatTensor HalfStorage HalfTensor IntStorage IntTensor "
                         "LongStorage LongTensor ShortStorage ShortTensor"),
    **_group(CUDA_GRAPHS, "CUDAPluggableAllocator MemPool "
                          "use_mem_pool change_current_allocator caching_allocator_alloc "
                          "caching_allocator_delete caching_allocator_disabled "
                          "caching_allocator_enable get_allocator_backend "
                          "memory_snapshot host_memory_stats host_memory_stats_as_nested_dict "
                          "reset_accumulated_host_memory_stats reset_peak_host_memory_stats "
                          "memory_stats_as_nested_dict reset_accumulated_memory_stats"),
    **_group(CUDA_DRIVER, "AcceleratorError CudaError DeferredCudaCallError cudaStatus "
                          "cudart check_error current_blas_handle current_solver_handle "
                          "can_device_access_peer clock_rate device_memory_used "
                          "list_gpu_processes memory_usage power_draw temperature "
                          "utilization get_arch_list get_gencode_flags "
                          "PYTORCH_RELEASES_CODE_CC DEVICE_REQUIREMENT has_half has_magma "
                          "get_sync_debug_mode set_sync_debug_mode "
                          "ExternalStream get_stream_from_external GreenContext"),
    **_group(CUDA_SUBMODULE, "gds green_contexts jiterator memory nccl profiler "
                             "random sparse streams tunable"),
    "Device": "typing alias (int | str | torch.device), not an API",
    "default_generators": "tuple of per-device CUDA generators; use ember.cuda.manual_seed",
    "set_stream": "not yet provided: use ember.cuda.stream(s) as a context manager",
}

COMPLETE |= {"torch", "torch.func", "torch.cuda"}

# ------------------------------------------------------------------------------ torch.autograd
PROFILER = ("profiler types re-exported by torch.autograd from its profiler: Ember's "
            "profiler is ember.profiler (also ember.autograd.profiler)")
AUTOGRAD_INTERNAL = "autograd implementation detail or debug switch, not a user API"

ALLOWLIST["torch.autograd"] = {
    **_group(IMPORTED, "Mapping Sequence cast overload"),
    **_group(PROFILER, "DeviceType ProfilerActivity ProfilerConfig ProfilerEvent ProfilerState "
                       "kineto_available profiler_legacy profiler_util"),
    **_group(TORCH_FUNCTION, "handle_torch_function has_torch_function is_tensor_like"),
    **_group(AUTOGRAD_INTERNAL, "SavedTensor enforce_grad_layout_policy is_view_replay_enabled"),
    "NestedIOFunction": "legacy (pre-0.4) autograd Function style; use autograd.Function",
    "anomaly_mode": "torch's submodule name; Ember's anomaly mode is ember.autograd.anomaly "
                    "(detect_anomaly, set_detect_anomaly are in ember.autograd)",
}
ALLOWLIST["torch.autograd.forward_ad"] = _group(IMPORTED, "Any NamedTuple")
ALLOWLIST["torch.autograd.graph"] = {
    **_group(IMPORTED, "Any Callable Generator Iterable Iterator Literal MutableMapping "
                       "NamedTuple Optional Sequence TYPE_CHECKING TypeAlias Union Variable "
                       "WeakKeyDictionary WeakValueDictionary cast defaultdict deque log "
                       "RemovableHandle TorchDispatchMode"),
    "allow_mutation_on_saved_tensors": ("not provided: an in-place write to a saved tensor "
                                        "is an error, as PyTorch's default"),
    **_group(AUTOGRAD_INTERNAL, "region_activation_memory_budget "
                                "set_override_stale_capture_stream "
                                "set_warn_on_accumulate_grad_stream_mismatch"),
}
COMPLETE |= {"torch.autograd", "torch.autograd.functional", "torch.autograd.forward_ad",
             "torch.autograd.graph", "torch.amp"}

# ------------------------------------------------- torch.testing, utils.dlpack, nn.utils.rnn
ALLOWLIST["torch.testing"] = {"FileCheck": JIT}
ALLOWLIST["torch.utils.dlpack"] = {"Any": IMPORTED}
ALLOWLIST["torch.nn.utils.rnn"] = {
    **_group(IMPORTED, "Any Callable Iterable Self TypeVar"),
    **_group("private helper of torch's PackedSequence implementation (its NamedTuple base "
             "and method-binding helpers), not an API", "PackedSequence_ bind "
             "copy_method_params"),
}
COMPLETE |= {"torch.testing", "torch.utils.dlpack", "torch.nn.utils.rnn"}
ALLOWLIST["torch.nn.attention"] = {
    **_group(IMPORTED, "Iterable Union warn"),
    **_group("PyTorch's kernel-selection predicates and their parameter struct: Ember picks "
             "its one kernel per case itself", "SDPAParams can_use_efficient_attention "
             "can_use_flash_attention"),
    **_group("pluggable FlashAttention implementations (registering FA3/FA4): Ember has one "
             "flash kernel of its own", "activate_flash_attention_impl "
             "current_flash_attention_impl list_flash_attention_impls "
             "register_flash_attention_impl restore_flash_attention_impl"),
    # NOTE: a submodule, in dir(torch.nn.attention) only once something imported it
    "flex_attention": "FlexAttention (score_mod/BlockMask) is generated by torch.compile's "
                      "Inductor; Ember's fused attention kernel serves "
                      "scaled_dot_product_attention",
}
COMPLETE |= {"torch.nn.attention"}
ALLOWLIST["torch.jit"] = {
    **_group(IMPORTED, "Iterator contextmanager"),
    **_group(JIT, "CompilationUnit ONNXTracedModule RecursiveScriptClass ScriptWarning "
                  "TopLevelTracedModule TracedModule TracingCheckError export_opnames "
                  "frontend fuser jit_module_from_flatbuffer last_executed_optimized_graph "
                  "optimized_execution run_frozen_optimizations save_jit_module_to_flatbuffer "
                  "script_method set_module"),
    "Future": ("torch.futures' type: ember.jit.fork returns a finished future of its own "
               "(wait()/done())"),
}
ALLOWLIST["torch.compiler"] = {
    **_group(IMPORTED, "Any Callable F FuncType ParamSpec TypeVar"),
    **_group("TorchDynamo/Inductor's guard, cache-artifact and backend machinery: "
             "ember.compile has one backend, its own guards and an on-disk graph cache",
             "CacheInfo NestedCompileRegionOptions config get_default_backend "
             "keep_portable_guards_unsafe keep_tensor_guards_unsafe load_cache_artifacts "
             "load_compiled_function nested_compile_region save_cache_artifacts "
             "set_default_backend set_enable_guard_collectives skip_all_guards_unsafe "
             "skip_guard_on_all_nn_modules_unsafe skip_guard_on_globals_unsafe "
             "skip_guard_on_inbuilt_nn_modules_unsafe substitute_in_graph wrap_numpy"),
}
COMPLETE |= {"torch.jit", "torch.compiler"}
