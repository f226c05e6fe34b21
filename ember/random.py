"""Random numbers: seedable generators and the random factories (rand, randn, randint...).

A :class:`Generator` wraps NumPy's PCG64 bit generator. Its whole state (including
the half-used 32-bit word PCG64 buffers) round-trips bit-exactly through
:meth:`Generator.get_state` / :meth:`Generator.set_state`, which is what resuming a
training run from a checkpoint relies on. Samples are drawn natively in the target
dtype where NumPy can (float32 uniforms and normals are not float64 draws cast down).

These functions create data, so they are not registry primitives.

Example:
    >>> import ember as em
    >>> _ = em.manual_seed(0)
    >>> a = em.rand(3)
    >>> _ = em.manual_seed(0)
    >>> bool((em.rand(3) == a).all())
    True
"""
from __future__ import annotations

import contextlib
import os
import threading

import numpy as np

from . import dtypes as _dt
from .autograd.grad_mode import state as _grad_state
from .device import device as _device, get_backend
from .device.cuda_graph import is_capturing
from .errors import DTypeError, ShapeError
from .tensor import Tensor, _wrap
from .ops._util import as_shape, check_new_size, size_args
from .ops.factories import _finish
from .ops.layout import like_strides, strided_view

__all__ = ["Generator", "default_generator", "manual_seed", "seed", "initial_seed",
           "get_rng_state", "set_rng_state", "fork_rng", "rand", "randn", "randint", "normal",
           "bernoulli", "randperm", "multinomial", "rand_like", "randn_like", "randint_like"]

_DEFAULT_SEED = 67280421310721  # PyTorch's default initial seed
_MAGIC = b"PCG1"
_U64 = 1 << 64


_serials = [0]    # the next Generator's ``_serial`` (creation order)


def _next_serial() -> int:
    """The ``_serial`` the next :class:`Generator` will get."""
    return _serials[0]


class Generator:
    """A seedable source of random numbers (``torch.Generator``), backed by PCG64.

    Example:
        >>> g = ember.Generator().manual_seed(42)
        >>> s = g.get_state()
        >>> a = ember.randn(2, generator=g)
        >>> _ = g.set_state(s)
        >>> bool((ember.randn(2, generator=g) == a).all())
        True
    """

    def __init__(self, device="cpu"):
        self.device = _device(device)
        self._serial = _serials[0]      # creation order: tracers tell local generators apart
        _serials[0] += 1
        self.manual_seed(_DEFAULT_SEED)

    def manual_seed(self, seed) -> "Generator":
        """Reset the generator to the stream of ``seed`` (any int in [-2**63, 2**64))."""
        seed = int(seed)
        if not -(1 << 63) <= seed < _U64:
            raise ValueError(f"manual_seed: seed must be in [-2**63, 2**64), got {seed}")
        self._seed = seed % _U64
        self._bitgen = np.random.PCG64(self._seed)
        self._rng = np.random.Generator(self._bitgen)
        return self

    def seed(self) -> int:
        """Seed from OS entropy; returns the seed used."""
        s = int.from_bytes(os.urandom(8), "little")
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        """The seed this generator was last seeded with."""
        return self._seed

    def state_dict(self) -> dict:
        """The full state as plain data (ints and a str), e.g. for JSON."""
        st = self._bitgen.state
        return {"bit_generator": st["bit_generator"], "state": int(st["state"]["state"]),
                "inc": int(st["state"]["inc"]), "has_uint32": int(st["has_uint32"]),
                "uinteger": int(st["uinteger"]), "seed": self._seed}

    def get_state(self) -> Tensor:
        """The full state as a 1-D uint8 tensor (``torch.Generator.get_state``)."""
        d = self.state_dict()
        raw = (_MAGIC + d["state"].to_bytes(16, "little") + d["inc"].to_bytes(16, "little")
               + d["has_uint32"].to_bytes(4, "little") + d["uinteger"].to_bytes(4, "little")
               + d["seed"].to_bytes(8, "little"))
        return _wrap(np.frombuffer(raw, dtype=np.uint8).copy(), _dt.uint8, _device("cpu"))

    def set_state(self, new_state) -> "Generator":
        """Restore a state from :meth:`get_state` (uint8 tensor/array) or :meth:`state_dict`."""
        d = new_state if isinstance(new_state, dict) else _unpack_state(new_state)
        if d.get("bit_generator", "PCG64") != "PCG64":
            raise ValueError(f"set_state: expected a PCG64 state, got {d['bit_generator']!r}")
        self._bitgen.state = {"bit_generator": "PCG64",
                              "state": {"state": int(d["state"]), "inc": int(d["inc"])},
                              "has_uint32": int(d["has_uint32"]),
                              "uinteger": int(d["uinteger"])}
        self._seed = int(d.get("seed", self._seed))
        return self

    load_state_dict = set_state

    def __repr__(self) -> str:
        return f"<ember.Generator device={self.device} initial_seed={self._seed}>"


def _unpack_state(st) -> dict:
    arr = np.asarray(st.detach().numpy() if isinstance(st, Tensor) else st)
    if arr.dtype != np.uint8 or arr.ndim != 1 or arr.size != 52 or bytes(arr[:4]) != _MAGIC:
        raise ValueError(f"set_state: expected the 52-byte uint8 tensor from get_state(), got "
                         f"dtype {arr.dtype}, shape {arr.shape}")
    raw = arr.tobytes()
    le = lambda a, b: int.from_bytes(raw[a:b], "little")  # noqa: E731
    return {"state": le(4, 20), "inc": le(20, 36), "has_uint32": le(36, 40),
            "uinteger": le(40, 44), "seed": le(44, 52)}


default_generator = Generator()

#: one generator per CUDA device (``torch.cuda.default_generators``), made on first use;
#: draws for ``cuda`` tensors come from them (on the host, then copied to the device).
_cuda_generators: dict = {}
_global_seed: list = [None]     # what manual_seed last gave every generator (None: default)


def cuda_generator(index: int = 0) -> Generator:
    """The default generator of CUDA device ``index``."""
    g = _cuda_generators.get(index)
    if g is None:
        g = _cuda_generators[index] = Generator(_device("cuda", index))
        if _global_seed[0] is not None:
            g.manual_seed(_global_seed[0])
    return g


def is_device_default(g) -> bool:
    """Whether ``g`` is a CUDA device's default generator (made on that device's first
    draw, wherever that happens: a compiled function's first cuda draw included)."""
    return _cuda_generators.get(g.device.index if g.device.index is not None else 0) is g


class _DrawDevice(threading.local):
    dev = None                  # the device a draw in progress is for (None: the CPU)


_drawing = _DrawDevice()


def _for_device(dev, draw):
    """``draw`` taking its default generator from ``dev``'s (CUDA devices have their own)."""
    if dev is None or _device(dev).type != "cuda":
        return draw
    dev = _device(dev)

    def on_device(*arrays):
        if is_capturing():
            raise RuntimeError(
                f"random draw on {dev} inside a CUDA graph capture: Ember draws on the host "
                f"and copies, so every replay would repeat this capture's numbers. Draw "
                f"outside the capture (into a static tensor you refill), or compile the step "
                f"with ember.compile(fn, mode='reduce-overhead')")
        prev, _drawing.dev = _drawing.dev, dev
        try:
            return draw(*arrays)
        finally:
            _drawing.dev = prev
    on_device.sample = getattr(draw, "sample", None)
    return on_device


def _sampling(draw, kind: str, generator, *args):
    """Tag ``draw`` with what it samples: ``(kind, generator, args)`` — ``("uniform", g,
    (lo, span))``, ``("bernoulli", g, (p,))`` (``("bernoulli", g, ())``: ``p`` is the
    draw's tensor input), ``("normal", g, (mean, std))``, ``("randint", g, (low, high))``.
    A compiled GPU graph may generate such a draw on the device
    (:mod:`ember.graph.passes.philox`); eager draws never read the tag."""
    draw.sample = (kind, generator, tuple(args))
    return draw


def manual_seed(seed) -> Generator:
    """Seed the default generator and every CUDA device's (``torch.manual_seed``); returns
    the default one."""
    g = default_generator.manual_seed(seed)
    _global_seed[0] = int(seed)
    for cg in _cuda_generators.values():
        cg.manual_seed(seed)
    return g


def seed() -> int:
    """Seed the default generator (and the CUDA ones) from OS entropy; returns the seed."""
    s = default_generator.seed()
    _global_seed[0] = s
    for cg in _cuda_generators.values():
        cg.manual_seed(s)
    return s


def initial_seed() -> int:
    """The default generator's seed."""
    return default_generator.initial_seed()


def get_rng_state() -> Tensor:
    """The default generator's state as a uint8 tensor."""
    return default_generator.get_state()


def set_rng_state(new_state) -> None:
    """Restore the default generator's state (from :func:`get_rng_state`)."""
    default_generator.set_state(new_state)


@contextlib.contextmanager
def fork_rng(devices=None, enabled: bool = True):
    """Restore the default generator's state (and the CUDA ones') on exit
    (``torch.random.fork_rng``)."""
    if not enabled:
        yield
        return
    saved = default_generator.get_state()
    cuda = {i: g.get_state() for i, g in _cuda_generators.items()}
    try:
        yield
    finally:
        default_generator.set_state(saved)
        for i, st in cuda.items():
            _cuda_generators[i].set_state(st)


# ---------------------------------------------------------------------------- helpers
def _gen(generator) -> np.random.Generator:
    if generator is None:
        dev = _drawing.dev
        generator = default_generator if dev is None else cuda_generator(dev.index or 0)
    elif not isinstance(generator, Generator):
        raise TypeError(f"generator must be an ember.Generator, got {type(generator).__name__}")
    if _grad_state.modes:   # NOTE: a checkpoint notes the generators it must replay
        for m in _grad_state.modes:
            hook = getattr(m, "on_generator", None)
            if hook is not None:
                hook(generator)
    return generator._rng


def _float_dtype(dtype, op: str, complex_ok: bool = False) -> _dt.DType:
    dtype = _dt.as_dtype(dtype)
    if not dtype.is_floating_point and not (complex_ok and dtype.is_complex):
        raise DTypeError(f"{op}: expected a floating dtype, got {dtype}; valid: float16, "
                         f"bfloat16, float32, float64")
    return dtype


def _uniform01(rng, shape, dtype: _dt.DType) -> np.ndarray:
    """U[0, 1) in ``dtype`` (never rounds up to 1.0, also for half types); complex: real
    and imaginary parts each U[0, 1), like PyTorch."""
    if dtype.is_complex:
        return _uniform01(rng, (*shape, 2), dtype.to_real()).view(dtype.np)[..., 0]
    if dtype in (_dt.float32, _dt.float64):
        return rng.random(shape, dtype=dtype.np)
    bits = 11 if dtype is _dt.float16 else 8  # mantissa digits incl. the implicit bit
    return (rng.integers(0, 1 << bits, shape, dtype=np.int32) * (1.0 / (1 << bits))).astype(
        dtype.np)


def _normal01(rng, shape, dtype: _dt.DType) -> np.ndarray:
    if dtype.is_complex:   # NOTE: PyTorch draws each part with variance 1/2 (E|z|^2 = 1)
        r = _normal01(rng, (*shape, 2), dtype.to_real())
        r *= np.sqrt(0.5).astype(r.dtype)
        return r.view(dtype.np)[..., 0]
    if dtype in (_dt.float32, _dt.float64):
        return rng.standard_normal(shape, dtype=dtype.np)
    return rng.standard_normal(shape, dtype=np.float32).astype(dtype.np)


def _size(size, op, dtype):
    return check_new_size(as_shape(size, op), dtype, op)


def _zero_grad_link(out: Tensor, *inputs) -> Tensor:
    """Make ``out`` depend (with zero gradient) on inputs that require grad, like PyTorch's
    samplers whose backward formula is zeros."""
    if _grad_state.grad_enabled:
        for x in inputs:
            if isinstance(x, Tensor) and x._requires_grad:
                out = out + (x * 0).to(out._dtype)
    return out


def _drawn(draw, dtype, device, requires_grad, what: str, inputs=(), shape=None) -> Tensor:
    """A tensor of fresh samples ``draw(*input arrays)`` (of ``shape``). Under a tracer
    (``ember.compile``) the draw becomes a ``random`` node that samples again, from the same
    generator, at every run of the graph. On the ``meta`` device nothing is drawn."""
    if device is None:      # NOTE: set_default_device("cuda"): the device's generator draws
        from .device.base import default_device
        device = default_device()
    if shape is not None and _device(device).type == "meta":
        from .ops.factories import empty
        return empty(shape, dtype=dtype, device=device, requires_grad=requires_grad)
    draw = _for_device(device, draw)
    try:
        arr = draw(*(x._data if x._device.type == "cpu" else   # NOTE: samples on the host
                     get_backend(x._device).to_host(x._data) for x in inputs))
    except MemoryError as e:         # NOTE: NumPy's names the shape and size, not the op
        raise MemoryError(f"{what}: {e}") from None
    t = _finish(arr, dtype, device, requires_grad)
    if _grad_state.modes:
        m = _grad_state.modes[-1]
        if hasattr(m, "random"):
            m.random(t, draw, inputs, what)
    return t


def _untraceable(what: str) -> None:
    """Tell a tracer that ``what`` can't be recorded (a graph break)."""
    if _grad_state.modes and hasattr(_grad_state.modes[-1], "unsupported"):
        _grad_state.modes[-1].unsupported(what)


# ---------------------------------------------------------------------------- factories
def rand(*args, size=None, generator=None, dtype=None, device=None,
         requires_grad=False) -> Tensor:
    """Uniform samples on [0, 1) (``torch.rand``).

    Example:
        >>> ember.rand(2, 3).shape
        ember.Size([2, 3])
    """
    dtype = _float_dtype(dtype, "rand", complex_ok=True)
    shape = _size(size_args(args, size, "rand"), "rand", dtype)
    return _drawn(_sampling(lambda: _uniform01(_gen(generator), shape, dtype), "uniform",
                            generator, 0.0, 1.0), dtype, device, requires_grad, "rand",
                  shape=shape)


def randn(*args, size=None, generator=None, dtype=None, device=None,
          requires_grad=False) -> Tensor:
    """Standard normal samples (``torch.randn``).

    Example:
        >>> ember.randn(4).dtype
        ember.float32
    """
    dtype = _float_dtype(dtype, "randn", complex_ok=True)
    shape = _size(size_args(args, size, "randn"), "randn", dtype)
    return _drawn(_sampling(lambda: _normal01(_gen(generator), shape, dtype), "normal",
                            generator, 0.0, 1.0), dtype, device, requires_grad, "randn",
                  shape=shape)


def _int_bounds(low, high, dtype, op):
    low, high = int(low), int(high)
    if low >= high:
        raise ValueError(f"{op}: expects 'from' to be less than 'to', but got from={low} >= "
                         f"to={high}")
    if dtype.category == _dt.INT:
        ii = np.iinfo(dtype.np)
        if low < ii.min or high - 1 > ii.max:
            raise ValueError(f"{op}: range [{low}, {high}) does not fit {dtype} "
                             f"[{ii.min}, {ii.max}]")
    return low, high


def randint(*args, size=None, generator=None, dtype=None, device=None,
            requires_grad=False) -> Tensor:
    """Integers uniform on [low, high): ``randint(high, size)`` or ``randint(low, high, size)``.

    Example:
        >>> ember.randint(0, 10, (3,)).dtype
        ember.int64
    """
    if size is not None:
        args = args + (size,)
    if len(args) == 2:
        args = (0,) + args
    if len(args) != 3:
        raise TypeError("randint(): expected randint(high, size) or randint(low, high, size)")
    low, high, size = args
    dtype = _dt.int64 if dtype is None else _dt.as_dtype(dtype)
    shape = _size((size,) if isinstance(size, int) else tuple(size), "randint", dtype)
    low, high = _int_bounds(low, high, dtype, "randint")
    return _drawn(_sampling(lambda: _gen(generator).integers(low, high, shape, dtype=np.int64)
                            .astype(dtype.np), "randint", generator, low, high),
                  dtype, device, requires_grad, "randint", shape=shape)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None,
           requires_grad=False) -> Tensor:
    """Normal samples with (broadcast) ``mean`` and ``std``, each a number or a tensor.

    Example:
        >>> ember.normal(ember.zeros(3), 1.0).shape
        ember.Size([3])
        >>> ember.normal(2.0, 3.0, size=(2,)).shape
        ember.Size([2])
    """
    tens = [x for x in (mean, std) if isinstance(x, Tensor)]
    if not tens:
        if size is None:
            raise TypeError("normal(): with number mean and std, size= is required")
        dt = _float_dtype(dtype, "normal")
        shape = _size((size,) if isinstance(size, int) else tuple(size), "normal", dt)
        if std < 0:
            raise ValueError(f"normal expects std >= 0.0, got std={std!r}")
        return _drawn(_sampling(lambda: np.ascontiguousarray(
            (mean + std * _normal01(_gen(generator), shape, dt)).astype(dt.np)), "normal",
            generator, mean, std), dt, device, requires_grad, "normal", shape=shape)
    else:
        _untraceable("normal() with tensor mean/std")
        dt = _float_dtype(_dt.result_type(*tens), "normal")
        shape = np.broadcast_shapes(*(tuple(t.shape) for t in tens))
    host = lambda x: x.detach().cpu().numpy() if isinstance(x, Tensor) else x  # noqa: E731
    if np.any(np.asarray(host(std)) < 0):
        raise ValueError(f"normal expects std >= 0.0, got std={std!r}")
    z = _normal01(_gen(generator), shape, dt)
    arr = (host(mean) + host(std) * z).astype(dt.np)
    dev = tens[0]._device if tens else device
    out = _finish(np.ascontiguousarray(arr), dt, dev, requires_grad)
    return _zero_grad_link(out, mean, std)


def bernoulli(input: Tensor, p=None, *, generator=None) -> Tensor:
    """0/1 samples with probability ``input`` (or the number ``p``), in ``input``'s dtype.

    Example:
        >>> ember.bernoulli(ember.full((3,), 1.0)).tolist()
        [1.0, 1.0, 1.0]
    """
    if not _grad_state.modes and input._device.type != "meta":   # NOTE: a traced input has
        # no values (nor a copy to read), a meta one none at all
        probs = np.asarray(input.detach().cpu()._data) if p is None else np.asarray(p)
        if np.any((probs < 0) | (probs > 1)):
            raise ValueError("bernoulli: expects all probabilities p to be in [0, 1]")
    ct = input._dtype if input._dtype in (_dt.float32, _dt.float64) else _dt.float64
    shape, odt = tuple(input.shape), input._dtype.np
    if p is None:
        out = _drawn(_sampling(lambda pr: (_uniform01(_gen(generator), shape, ct) < pr).astype(
            odt), "bernoulli", generator), input._dtype, input._device, False, "bernoulli",
            (input.detach(),), shape=shape)
        return _zero_grad_link(out, input)
    return _drawn(_sampling(lambda: (_uniform01(_gen(generator), shape, ct) < p).astype(
        odt), "bernoulli", generator, p), input._dtype, input._device, False, "bernoulli",
        shape=shape)


def randperm(n: int, *, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A random permutation of ``0 .. n-1`` (int64).

    Example:
        >>> sorted(ember.randperm(4).tolist())
        [0, 1, 2, 3]
    """
    n = int(n)
    if n < 0:
        raise ValueError(f"randperm: n must be non-negative, got {n}")
    dtype = _dt.int64 if dtype is None else _dt.as_dtype(dtype)
    check_new_size((n,), _dt.int64, "randperm")      # NOTE: drawn as int64, then cast
    return _drawn(lambda: _gen(generator).permutation(n).astype(dtype.np), dtype, device,
                  requires_grad, "randperm", shape=(n,))


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,
                generator=None) -> Tensor:
    """Indices sampled from the (unnormalised) weights in each row of ``input`` (int64).

    Example:
        >>> ember.multinomial(ember.tensor([0., 1., 0.]), 2, replacement=True).tolist()
        [1, 1]
    """
    _untraceable("multinomial()")
    if input.ndim not in (1, 2):
        raise ShapeError(f"multinomial: prob_dist must be 1 or 2 dim, got shape "
                         f"{tuple(input.shape)}")
    if not input._dtype.is_floating_point:
        raise DTypeError(f"multinomial: only floating point weights are supported, got "
                         f"{input._dtype}")
    w = input.detach().cpu().numpy().astype(np.float64).reshape(-1, input.shape[-1])
    n = w.shape[1]
    if not replacement and num_samples > n:
        raise ValueError(f"multinomial: cannot sample n_sample={num_samples} > "
                         f"prob_dist.size(-1)={n} samples without replacement")
    if num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be positive, got {num_samples}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("multinomial: probability tensor contains either inf, nan or "
                         "element < 0")
    sums = w.sum(axis=1)
    if np.any(sums <= 0):
        raise ValueError("multinomial: invalid multinomial distribution (sum of "
                         "probabilities <= 0)")
    if not replacement and np.any((w > 0).sum(axis=1) < num_samples):
        raise ValueError("multinomial: invalid multinomial distribution (with "
                         "replacement=False, not enough non-zero categories to sample)")
    rng = _gen(generator)
    out = np.stack([rng.choice(n, size=num_samples, replace=replacement, p=row / row.sum())
                    for row in w]).astype(np.int64)
    out = out.reshape(input.shape[:-1] + (num_samples,))
    return _finish(out, _dt.int64, input._device, False)


def _drawn_like(input, memory_format, dtype, device, requires_grad, op, draw):
    """``draw(shape, dtype, device, requires_grad)`` for a ``*_like(input)`` result, in the
    layout ``memory_format`` gives (``preserve_format``: ``input``'s, as the other ``*_like``
    factories). The samples fill memory in order, as PyTorch's fill kernels do. Under a
    tracer (``ember.compile``) the result is row-major: its layout is the compiler's to
    plan."""
    dtype = dtype or input._dtype
    device = device or input._device
    strides = like_strides(input, memory_format, op)
    if strides is None or _grad_state.modes or _device(device).type == "meta":
        return draw(tuple(input.shape), dtype, device, requires_grad)
    shape = tuple(input.shape)
    flat = draw((int(np.prod(shape)),), dtype, device, False)
    out = _wrap(strided_view(get_backend(flat._device).xp, flat._data, shape, strides),
                flat._dtype, flat._device, flat._storage)
    return out.requires_grad_(True) if requires_grad else out


def rand_like(input: Tensor, *, generator=None, dtype=None, device=None,
              requires_grad=False, memory_format=None) -> Tensor:
    """``rand`` with ``input``'s shape, dtype, device and (``preserve_format``) layout."""
    return _drawn_like(input, memory_format, dtype, device, requires_grad, "rand_like",
                       lambda shape, dt, dev, rg: rand(shape, generator=generator, dtype=dt,
                                                        device=dev, requires_grad=rg))


def randn_like(input: Tensor, *, generator=None, dtype=None, device=None,
               requires_grad=False, memory_format=None) -> Tensor:
    """``randn`` with ``input``'s shape, dtype, device and (``preserve_format``) layout."""
    return _drawn_like(input, memory_format, dtype, device, requires_grad, "randn_like",
                       lambda shape, dt, dev, rg: randn(shape, generator=generator, dtype=dt,
                                                         device=dev, requires_grad=rg))


def randint_like(input: Tensor, low=0, high=None, *, generator=None, dtype=None, device=None,
                 requires_grad=False, memory_format=None) -> Tensor:
    """``randint`` with ``input``'s shape, dtype, device and (``preserve_format``) layout:
    ``randint_like(x, high)`` or ``randint_like(x, low, high)``."""
    if high is None:
        low, high = 0, low
    return _drawn_like(input, memory_format, dtype, device, requires_grad, "randint_like",
                       lambda shape, dt, dev, rg: randint(low, high, shape,
                                                          generator=generator, dtype=dt,
                                                          device=dev, requires_grad=rg))

