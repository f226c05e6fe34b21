"""A CuPy-shaped array module over NumPy: the stand-in's strict mode.

``EMBER_FAKE_CUDA_STRICT=1`` (with ``EMBER_FAKE_CUDA``) makes the stand-in's ``xp`` this
module instead of NumPy itself, so code that only works because the stand-in's arrays *are*
NumPy arrays fails on the CPU the way it would fail on a GPU. Its :class:`ndarray` holds a
NumPy array and behaves as CuPy's does where CuPy differs from NumPy:

* no implicit conversion to NumPy: ``np.asarray(a)``/``np.array(a)`` raise CuPy's
  ``TypeError`` (``a.get()`` / :func:`asnumpy` copy explicitly); no ``ctypes``, no
  ``__array_interface__``, no buffer protocol;
* a host array never mixes with device arrays: an operator, a ufunc, a module function or
  ``a[...] = value`` given a NumPy array (or a list as the value) raises
  ``TypeError: Unsupported type <class 'numpy.ndarray'>``; Python and NumPy scalars pass;
* reductions and scalar indexing give 0-d device arrays, never NumPy scalars (``float()``,
  ``int()``, ``bool()``, ``.item()`` and ``.tolist()`` read them back, as on a GPU);
* ``isinstance(a, numpy.ndarray)`` is false; ``a.data.ptr`` is the data address
  (CuPy's ``MemoryPointer``), which emulated kernels (``tests/cuda/_cuda_emu.py``) read;
* one object per array: ``out=`` and in-place methods return the array passed, a view's
  ``.base`` is its base's object (and keeps it alive);
* float16/bfloat16 products (``matmul``, ``dot``, ``@``) and sums/means accumulate in
  float32 and round once, as cuBLAS and CuPy do (NumPy's float16 loops round every partial
  sum; ml_dtypes' bfloat16 ``matmul`` returns float32).

NumPy's own ufuncs and array functions given device arrays dispatch here
(``__array_ufunc__``/``__array_function__``, as CuPy implements them). Host-side inputs
are accepted where CuPy accepts them: :func:`asarray`/:func:`array` (a copy to the
device), index arrays, shapes and dtypes.

* a ufunc (called, through NumPy's protocol, or as an operator) given arrays of dtypes none
  of CuPy's loops takes by a safe cast raises CuPy's ``TypeError: Wrong type`` (the loops of
  CuPy 14.2, :mod:`._cupy_loops`; e.g. ``floor`` has no integer loop but takes int8 as
  float16, ``bitwise_and`` no float one); Python and NumPy scalars are not checked;
* what CuPy lacks is missing: ``xp.insert``, ``xp.errstate``, ``xp.longdouble``, ``np.spacing(a)``
  or ``a.resize(...)`` raise as they would on a GPU (the public names of NumPy that CuPy 14.2
  does not have, :data:`CUPY_LACKS`).

Not modelled: asynchrony, the arguments and dtypes CuPy's other functions refuse, the
result dtypes of its loops, its type-promotion corner cases. The module exists for tests; it is never what a real GPU runs.
"""
from __future__ import annotations

import types as _types
import weakref

import numpy as np

from ..dtypes import bfloat16 as _bfloat16

_IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
             "construct a NumPy array explicitly.")
#: module functions that copy host data to the device (CuPy's ``asarray`` and kin)
_FROM_HOST = frozenset({"asarray", "array", "asanyarray", "ascontiguousarray",
                        "asfortranarray", "frombuffer", "fromiter"})


#: NumPy array attributes CuPy's arrays do not have (``ctypes`` is host memory)
_HOST_ONLY = frozenset({"ctypes", "getfield", "setfield", "resize", "setflags", "to_device",
                        "itemset", "newbyteorder"})

#: public names of NumPy 2.4's modules that CuPy 14.2 lacks (``dir(numpy) - dir(cupy)``,
#: per module); a name NumPy gains later passes, as nothing says CuPy lacks it
CUPY_LACKS = {mod: frozenset(names.split()) for mod, names in {
    "numpy": """False_ ScalarType True_ asmatrix block bmat busday_count busday_offset
        busdaycalendar bytes_ char character clongdouble complex256 core ctypeslib datetime64
        datetime_as_string datetime_data dtypes einsum_path emath errstate f2py flexible
        float128 frompyfunc fromregex geomspace get_include getbufsize geterr geterrcall
        histogram_bin_edges info insert is_busday isnat little_endian longdouble ma matrix
        matvec memmap nanpercentile nanquantile ndenumerate nditer nested_iters object_
        polyder polydiv polyint rec recarray record sctypeDict setbufsize seterr seterrcall
        show_runtime spacing str_ strings timedelta64 typecodes unstack vecdot vecmat void""",
    "numpy.linalg": """diagonal matrix_norm multi_dot outer svdvals tensordot trace vecdot
        vector_norm""",
    "numpy.random": """Generator MT19937 PCG64 PCG64DXSM Philox SFC64 SeedSequence
        bit_generator get_bit_generator get_state mtrand set_bit_generator set_state""",
    "numpy.lib": """Arrayterator NumpyVersion add_docstring add_newdoc array_utils format
        introspect mixins npyio scimath tracemalloc_domain""",
    "numpy.polynomial": """Chebyshev Hermite HermiteE Laguerre Legendre Polynomial chebyshev
        hermite hermite_e laguerre legendre set_default_printstyle""",
}.items()}


def _cupy_lacks(module: str, name: str) -> bool:
    return name in CUPY_LACKS.get(module, ())


_loop_cache: dict = {}


def _loops(name: str):
    """CuPy's loops of ufunc ``name`` as tuples of input dtypes (None: CuPy's table has no
    such ufunc, nothing to check)."""
    got = _loop_cache.get(name, False)
    if got is False:
        from ._cupy_loops import LOOPS
        text = LOOPS.get(name)
        got = None if text is None else [
            tuple(_bfloat16.np if c == "E" else np.dtype(c) for c in loop)
            for loop in text.split() if "V" not in loop]
        _loop_cache[name] = got
    return got


def _check_loop(name: str, args) -> None:
    """Raise CuPy's ``TypeError`` when no loop of ufunc ``name`` takes the device arrays
    among ``args`` by safe casts (other operands, scalars, are not checked)."""
    loops = _loops(name)
    if loops is None:
        return
    dts = [a._a.dtype if type(a) is ndarray else None for a in args]
    if all(d is None for d in dts):
        return
    for loop in loops:
        if len(loop) <= len(dts) and all(
                d is None or np.can_cast(d, t) for d, t in zip(dts, loop)):
            return
    given = tuple(str(d) if d is not None else "scalar" for d in dts)
    raise TypeError(f"Wrong type {given} of arguments for cupy_{name} (CuPy's loops take: "
                    f"{_loop_text(name)})")


def _loop_text(name: str) -> str:
    from ._cupy_loops import LOOPS
    return LOOPS[name]


#: an operator's ufunc (CuPy's operators run these)
_OPERATOR_UFUNC = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
                   "floordiv": "floor_divide", "mod": "remainder", "pow": "power",
                   "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
                   "lshift": "left_shift", "rshift": "right_shift", "eq": "equal",
                   "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
                   "ge": "greater_equal", "divmod": "divmod", "neg": "negative",
                   "pos": "positive", "abs": "absolute", "invert": "invert"}


def _operator_ufunc(dunder: str):
    core = dunder.strip("_")
    if core not in _OPERATOR_UFUNC and core[:1] in "ri" and core[1:] in _OPERATOR_UFUNC:
        core = core[1:]
    return _OPERATOR_UFUNC.get(core)


def _unsupported(x):
    return TypeError(f"Unsupported type {type(x)}")


def _unwrap(x):
    """The NumPy data of device arrays in ``x`` (nested lists/tuples/dicts); a host array
    is refused as CuPy refuses one."""
    t = type(x)
    if t is ndarray:
        return x._a
    if isinstance(x, np.ndarray):
        raise _unsupported(x)
    if t is list or t is tuple:
        return t(_unwrap(v) for v in x)
    if t is dict:
        return {k: _unwrap(v) for k, v in x.items()}
    return x


def _unwrap_shapes(x):
    """A method's arguments: as :func:`_unwrap`, but a host array of integers of at most
    one dim passes (axes, a shape or indices, which CuPy's methods read on the host)."""
    if isinstance(x, np.ndarray) and x.ndim <= 1 and x.dtype.kind in "iub":
        return x
    if type(x) is list or type(x) is tuple:
        return type(x)(_unwrap_shapes(v) for v in x)
    return _unwrap(x)


def _unwrap_host_ok(x):
    """As :func:`_unwrap`, host arrays passing (a copy to the device follows)."""
    t = type(x)
    if t is ndarray:
        return x._a
    if t is list or t is tuple:
        return t(_unwrap_host_ok(v) for v in x)
    return x


def _unwrap_index(key):
    """An index: device arrays unwrapped; NumPy index arrays and lists accepted."""
    t = type(key)
    if t is ndarray:
        return key._a
    if t is tuple:
        return tuple(_unwrap_index(k) for k in key)
    return key


#: id(NumPy data) -> its live device array: one object per array, as CuPy has (an in
#: place method or ``out=`` returns the very array passed; ``a.base`` is its base's object)
_live: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _wrap(r):
    """Device arrays for NumPy results (an array already wrapped gives its wrapper)."""
    if isinstance(r, np.ndarray):
        w = _live.get(id(r))
        if w is not None and w._a is r:
            return w
        return ndarray(r)
    if isinstance(r, np.generic):
        return ndarray(np.asarray(r))
    t = type(r)
    if t is tuple or t is list:
        return t(_wrap(v) for v in r)
    return r


def _call(fn, args, kwargs, host_ok=False):
    unwrap = _unwrap_host_ok if host_ok else _unwrap
    return _wrap(fn(*unwrap(args), **{k: unwrap(v) for k, v in kwargs.items()}))


_LOWP = (np.dtype(np.float16), np.dtype(_bfloat16.np))


def _lowp_sum(fn):
    """A sum or mean as CuPy's: float16/bfloat16 accumulated in float32, rounded once
    (NumPy's float16 sum accumulates in float16)."""
    def f(a, *args, **kwargs):
        d = getattr(a, "dtype", None)
        if d in _LOWP and kwargs.get("dtype") is None and "out" not in kwargs and \
                len(args) <= 1:
            return _wrap(np.asarray(fn(_unwrap(a).astype(np.float32), *_unwrap(args),
                                       **_unwrap(kwargs))).astype(d))
        return _call(fn, (a,) + args, kwargs)
    return f


def _matmul(fn):
    """A product as CuPy's (cuBLAS): float16/bfloat16 operands multiplied with float32
    sums, rounded once to their dtype (NumPy's float16 loop rounds every partial sum, and
    ml_dtypes' bfloat16 one returns float32)."""
    def f(*args, **kwargs):
        d = getattr(args[0], "dtype", None) if args else None
        if d in _LOWP and len(args) == 2 and not kwargs and \
                getattr(args[1], "dtype", None) == d:
            a, b = (_unwrap(x) for x in args)
            return _wrap(fn(a.astype(np.float32), b.astype(np.float32)).astype(d))
        return _call(fn, args, kwargs)
    return f


class MemoryPointer:
    """CuPy's ``ndarray.data``: the address of the first element (``ptr``)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


class ndarray:  # noqa: N801 - CuPy's name
    """A device array of the strict stand-in (see the module docstring)."""

    __slots__ = ("_a", "_b", "__weakref__")
    __array_priority__ = 100.0
    #: what GPU-only paths test to take the stand-in's way (``cuda_gemm._copy``)
    stand_in = True

    def __init__(self, a):
        self._a = a
        # NOTE: a view holds its base's object, as CuPy's views do (registries keyed by
        # a buffer's object, cuda_gemm's padded buffers, see it alive through its views)
        b = a.base
        w = _live.get(id(b)) if b is not None else None
        self._b = w if w is not None and w._a is b else None
        _live[id(a)] = self

    # --- what CuPy refuses -------------------------------------------------------------
    def __array__(self, *args, **kwargs):
        raise TypeError(_IMPLICIT)

    # --- attributes --------------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    strides = property(lambda self: self._a.strides)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: ndarray(self._a.T))
    mT = property(lambda self: ndarray(self._a.mT))

    @property
    def real(self):
        return ndarray(self._a.real)

    @real.setter
    def real(self, value):
        self._a.real = _unwrap(value)

    @property
    def imag(self):
        return ndarray(self._a.imag)

    @imag.setter
    def imag(self, value):
        self._a.imag = _unwrap(value)

    @property
    def base(self):
        if self._b is not None:
            return self._b
        b = self._a.base
        return _wrap(b) if isinstance(b, np.ndarray) else None

    @property
    def data(self):
        return MemoryPointer(self._a.__array_interface__["data"][0])

    @property
    def __cuda_array_interface__(self):
        d = dict(self._a.__array_interface__)
        d.pop("descr", None)
        return d

    def sum(self, *args, **kwargs):
        return _lowp_sum(np.sum)(self, *args, **kwargs)

    def mean(self, *args, **kwargs):
        return _lowp_sum(np.mean)(self, *args, **kwargs)

    def __getattr__(self, name):
        # NOTE: no __array_interface__/__array_struct__ (NumPy's ways in), no ctypes (a
        # host pointer): device memory
        if name.startswith("__") or name in _HOST_ONLY:
            raise AttributeError(f"'cupy.ndarray' object has no attribute '{name}'")
        attr = getattr(self._a, name)
        if not callable(attr):
            return _wrap(attr)

        def method(*args, **kwargs):
            return _wrap(attr(*_unwrap_shapes(args),
                              **{k: _unwrap_shapes(v) for k, v in kwargs.items()}))
        method.__name__ = name
        return method

    # --- reading back (a synchronisation on a GPU) -------------------------------------
    def get(self, stream=None, order="C", out=None, blocking=True):
        if out is not None:
            out[...] = self._a
            return out
        return np.array(self._a, copy=True)

    def item(self, *args):
        return self._a.item(*args)

    def tolist(self):
        return self._a.tolist()

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __complex__(self):
        return complex(self._a)

    def __bool__(self):
        return bool(self._a)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (ndarray(np.asarray(v)) for v in self._a)

    def __repr__(self):
        return repr(self._a)

    def __str__(self):
        return str(self._a)

    def __format__(self, spec):
        return format(self._a.item() if self._a.ndim == 0 else self._a, spec)

    def __reduce__(self):
        return (ndarray, (np.array(self._a, copy=True),))

    def __copy__(self):
        return ndarray(self._a.copy())

    def __deepcopy__(self, memo):
        return ndarray(self._a.copy())

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()

    # --- indexing ----------------------------------------------------------------------
    def __getitem__(self, key):
        return _wrap(self._a[_unwrap_index(key)])

    def __setitem__(self, key, value):
        if isinstance(value, np.ndarray):
            if value.shape != ():     # CuPy's fill(): a 0-d host array is a scalar
                raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
            value = value.item()
        elif isinstance(value, list):
            raise _unsupported(value)
        self._a[_unwrap_index(key)] = _unwrap(value)

    # --- NumPy's protocols: CuPy implements both ---------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if _cupy_lacks("numpy", ufunc.__name__):
            return NotImplemented        # NumPy raises its TypeError, as with CuPy's
        if method == "__call__":
            _check_loop(ufunc.__name__, inputs)
        return _call(getattr(ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if _cupy_lacks(func.__module__, func.__name__):
            return NotImplemented        # "no implementation found for 'numpy.insert'"
        return _call(func, args, kwargs)


def _binary(name):
    op = getattr(np.ndarray, name)
    ufunc = _operator_ufunc(name)
    reflected = name.startswith("__r") and name != "__rshift__"

    def f(self, other):
        if isinstance(other, np.ndarray) and type(other) is not ndarray:
            raise _unsupported(other)
        if ufunc is not None:
            _check_loop(ufunc, (other, self) if reflected else (self, other))
        r = op(self._a, other._a if type(other) is ndarray else other)
        if r is NotImplemented:
            return r
        if name.startswith("__i"):
            return self
        return _wrap(r)
    f.__name__ = name
    return f


def _unary(name):
    op = getattr(np.ndarray, name)
    ufunc = _operator_ufunc(name)

    def f(self):
        _check_loop(ufunc, (self,))
        return _wrap(op(self._a))
    f.__name__ = name
    return f


for _n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
           "xor", "lshift", "rshift"):
    for _f in (f"__{_n}__", f"__r{_n}__", f"__i{_n}__"):
        if hasattr(np.ndarray, _f):
            setattr(ndarray, _f, _binary(_f))
ndarray.__matmul__ = lambda self, other: _matmul(np.matmul)(self, other)
ndarray.__rmatmul__ = lambda self, left: _matmul(np.matmul)(left, self)
for _f in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__divmod__"):
    setattr(ndarray, _f, _binary(_f))
for _f in ("__neg__", "__pos__", "__abs__", "__invert__"):
    setattr(ndarray, _f, _unary(_f))
ndarray.__hash__ = None


class _Callable:
    """A NumPy function or ufunc on device arrays (attributes — ``reduce``, ``at``,
    ``outer``, ``nin`` — follow)."""

    __slots__ = ("_f", "_host_ok")

    def __init__(self, f, host_ok=False):
        self._f, self._host_ok = f, host_ok

    def __call__(self, *args, **kwargs):
        if type(self._f) is np.ufunc:
            _check_loop(self._f.__name__, args)
        return _call(self._f, args, kwargs, self._host_ok)

    def __getattr__(self, name):
        return _attr(getattr(self._f, name))

    def __repr__(self):
        return f"<strict {self._f!r}>"


class _Module(_types.ModuleType):
    """A NumPy (sub)module whose functions take and give device arrays."""

    def __init__(self, mod, name):
        super().__init__(name)
        self._mod = mod

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if _cupy_lacks(self._mod.__name__, name):
            raise AttributeError(f"module 'cupy' has no attribute '{name}' (CuPy lacks "
                                 f"{self._mod.__name__}.{name}; the strict stand-in too)")
        a = getattr(self._mod, name)
        if name in _FROM_HOST and callable(a):
            v = _Callable(a, host_ok=True)
        elif name in ("matmul", "dot") and self._mod is np:
            v = _matmul(a)
        elif name in ("sum", "mean") and self._mod is np:
            v = _lowp_sum(a)
        else:
            v = _attr(a)
        setattr(self, name, v)
        return v


def _attr(a):
    if isinstance(a, type) or isinstance(a, (int, float, complex, str, bool, np.dtype,
                                             np.generic, type(None))):
        return a
    if isinstance(a, _types.ModuleType):
        return _Module(a, a.__name__)
    if callable(a):
        return _Callable(a)
    return a


def host_view(a):
    """The NumPy array behind a device array of this module (no copy: writes go through),
    anything else as it is. For emulated kernels (tests' stand-ins for a GPU's launches
    and cuBLAS calls), which compute on the device memory the way a kernel does."""
    return a._a if type(a) is ndarray else a


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    """``cupy.asnumpy``: a host copy of a device array (host data passes through)."""
    if type(a) is ndarray:
        return a.get(out=out)
    return np.asarray(a)


def get_array_module(*args):
    return _this


class _This(_Module):
    ndarray = ndarray
    asnumpy = staticmethod(asnumpy)
    get_array_module = staticmethod(get_array_module)


_this = _This(np, "ember.device.cuda_strict.xp")
#: the module object the strict stand-in uses as ``xp``
xp = _this
