"""The operator registry: every primitive is declared exactly once, here-through.

A primitive's :class:`Op` entry holds everything any part of Ember needs to know
about it — the dispatcher, autograd, forward-mode AD, the tracer, the constant
folder, the fused-kernel code generator and the generated op tests all read the
same entry:

=============  ===================================================================
``name``       PyTorch-style name (``"add"``, ``"sum"``, ``"permute"``)
``nin``        number of tensor inputs (``-1`` = variadic, e.g. ``cat``)
``params``     names and defaults of the non-tensor parameters
``kernels``    ``{backend type or "xp": fn(xp, *arrays, **params) -> array}``
``shape``      shape rule ``fn(*input_shapes, **params) -> output shape`` (abstract eval,
               and the op's kernel on the ``meta`` device: ``ember/device/meta.py``)
``dtype``      dtype rule: a kind (see :data:`DTYPE_KINDS`) or ``fn(*inputs, **params)``
``expr``       scalar C expression template for fusion, e.g. ``"({0} + {1})"``
``vjp``        ``fn(g, out, *inputs, **params) -> tuple of input grads`` in Ember ops
``jvp``        ``fn(tangents, out, *inputs, **params) -> output tangent`` in Ember ops,
               or ``"linear"`` when the op is linear in its (single) tensor input
``save``       what the VJP reads: ``"inputs"``, ``"output"``, ``"both"`` or ``None``
               (inputs not saved reach the VJP as :class:`ShapeOnly` placeholders)
``view``       ``True`` if the output aliases input 0, ``"maybe"`` if it may (reshape)
``eager_vjp``  optional: ``fn(next, g, out, *inputs, **params) -> tuple or None``, the VJP
               of a plain eager backward (no ``create_graph``) on raw arrays, asked
               before ``vjp`` (``next[i] is None``: input ``i`` needs no gradient); it
               must give ``vjp``'s values bit for bit, or None to leave them to ``vjp``
``batch``      batching rule for ``ember.func.vmap``: ``fn(inputs, bdims, **params) ->
               (out, out_bdim)`` on the physical tensors (``bdims[i]``: the batch dim of
               input ``i`` or ``None``), a generic rule's name from
               ``ember.ops.batching.GENERIC`` (elementwise ops default to
               ``"elementwise"``), or ``"loop"`` (run per example and stack)
=============  ===================================================================

Example (a unary primitive in one declaration)::

    defop("exp", nin=1, kernel=lambda xp, x: xp.exp(x), dtype="float",
          expr="exp({0})", save="output",
          vjp=lambda g, out, x: (g * out,),
          jvp=lambda t, out, x: t[0] * out)
"""
from __future__ import annotations

from typing import Callable

REGISTRY: dict[str, "Op"] = {}

#: dtype rule kinds understood by the dispatcher.
DTYPE_KINDS = (
    "promote",   # compute and output in result_type(inputs) (add, mul, where's values...)
    "float",     # like promote, but integers/bool compute in the default float (exp, div)
    "compare",   # compute in result_type(inputs), output bool (eq, lt...)
    "bool",      # inputs unchanged, output bool (logical_and, isnan...)
    "same",      # inputs unchanged, output dtype of input 0 (movement, indexing)
    "int64",     # inputs unchanged, output int64 (argmax, argsort...)
    "integral",  # like promote, but only integer/bool dtypes are valid (bitwise ops)
)


class Op:
    """A primitive operator declaration. Call it to apply it: ``add_p(x, y)``."""

    free_saved = None  # custom autograd Functions free their ctx through this hook

    __slots__ = ("name", "nin", "params", "kernels", "shape", "dtype", "expr", "vjp", "jvp",
                 "save", "view", "elementwise", "differentiable", "check", "doc",
                 "nondiff_argnums", "random", "batch", "eager_vjp", "_kcache", "__weakref__")

    def __init__(self, name: str, *, nin: int, kernel: Callable | None = None,
                 kernels: dict | None = None, params: dict | None = None,
                 shape: Callable | None = None, dtype="promote", expr: str | None = None,
                 vjp: Callable | None = None, jvp=None, save: str | None = "inputs",
                 view=False, elementwise: bool = False, differentiable: bool = True,
                 check: Callable | None = None, nondiff_argnums: tuple = (),
                 random: bool = False, batch=None, doc: str = "", eager_vjp=None):
        if name in REGISTRY:
            raise ValueError(f"op {name!r} is already registered")
        if dtype not in DTYPE_KINDS and not callable(dtype):
            raise ValueError(f"op {name!r}: unknown dtype rule {dtype!r}")
        if save not in ("inputs", "output", "both", None):
            raise ValueError(f"op {name!r}: save must be inputs/output/both/None")
        self.name = name
        self.nin = nin
        self.params = dict(params or {})
        self.kernels = dict(kernels or {})
        if kernel is not None:
            self.kernels["xp"] = kernel
        if not self.kernels:
            raise ValueError(f"op {name!r} declares no kernel")
        self.shape = shape
        self.dtype = dtype
        self.expr = expr
        self.vjp = vjp
        self.jvp = jvp
        self.save = save
        self.view = view
        self.elementwise = elementwise
        self.differentiable = differentiable and (vjp is not None)
        self.check = check
        self.nondiff_argnums = nondiff_argnums
        self.random = random
        self.batch = batch if batch is not None or not elementwise else "elementwise"
        self.doc = doc
        self.eager_vjp = eager_vjp
        self._kcache = {}
        REGISTRY[name] = self

    def kernel_for(self, backend_type: str) -> Callable:
        k = self._kcache.get(backend_type)
        if k is None:
            k = self.kernels.get(backend_type) or self.kernels.get("xp")
            if backend_type == "meta":     # NOTE: shapes and dtypes only (device/meta.py)
                from ..device.meta import meta_kernel
                k = meta_kernel(self)
            if k is None and backend_type == "cuda" and "cpu" in self.kernels:
                # NOTE: a CPU-only kernel (SciPy, LAPACK extras) runs on host copies
                from ..device.cuda import host_fallback
                k = host_fallback(self.name, self.kernels["cpu"])
            if k is None:
                raise NotImplementedError(f"{self.name}: no kernel for the "
                                          f"{backend_type!r} backend")
            if backend_type == "cuda":
                # NOTE: on a GPU with bfloat16 arrays, what CuPy lacks for them runs in
                # float32, rounded once (device/cuda_bf16.py); elsewhere k itself
                from ..device.cuda_bf16 import device_kernel
                k = device_kernel(self.name, k)
            self._kcache[backend_type] = k
        return k

    def __call__(self, *inputs, **params):
        return _apply(self, inputs, params)

    def __repr__(self) -> str:
        return f"<ember op {self.name}>"


def defop(name: str, **kwargs) -> Op:
    """Declare a primitive op (see the module docstring for the fields)."""
    return Op(name, **kwargs)


def get_op(name: str) -> Op:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no primitive op named {name!r}") from None


def _apply(op, inputs, params):  # replaced by the dispatcher at import
    raise RuntimeError("dispatcher not initialised")


def _install_dispatcher(fn) -> None:
    global _apply
    _apply = fn
