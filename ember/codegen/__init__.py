"""Generated kernels: a loop-level kernel IR rendered to C (OpenMP + SIMD) or CUDA C.

How a fusion pass uses it::

    from ember.codegen import InputSpec, from_nodes, compile
    k = from_nodes([InputSpec(float32, strides)], [("mul", [("in", 0), 2.0], {}, None),
                   ("tanh", [("node", 0)], {}, None)], out_shape)
    fn = compile(k)          # compiled and cached on disk; NumPy fallback without a compiler
    y = fn(x)                # NumPy arrays in, a new C-contiguous array out (or out=)

Modules: :mod:`.ir` (expressions, kernels, dtype inference, builder), :mod:`.cexpr`
(expressions to C), :mod:`.prelude` (C helpers), :mod:`.layout` (loop layout classes),
:mod:`.render_c` / :mod:`.render_cuda` (loops), :mod:`.toolchain` (compiler, flags),
:mod:`.cache` (disk cache), :mod:`.runtime` (callables), :mod:`.interp` (NumPy
evaluation), :mod:`.eager` (single-op kernels for eager mode).
"""
from .ir import (Apply, Const, Expr, InputSpec, Kernel, Load, OutSpec, Reduce, ReduceKernel,
                 Row, call, from_nodes, typed)
from .runtime import (CompiledKernel, NumpyKernel, compile, compile_many, num_threads,
                      set_num_threads, source)
from .render_cuda import render_cuda
from .eager import elementwise_kernel
from .toolchain import CompileError, available, find_compiler

__all__ = ["Apply", "Const", "Expr", "InputSpec", "Kernel", "Load", "OutSpec", "Reduce",
           "ReduceKernel", "Row", "call", "from_nodes", "typed", "CompiledKernel",
           "NumpyKernel", "compile", "compile_many", "num_threads", "set_num_threads",
           "source", "render_cuda", "elementwise_kernel", "CompileError", "available",
           "find_compiler"]
