"""The strict stand-in (``EMBER_FAKE_CUDA_STRICT=1``, ``ember/device/cuda_strict.py``):
its arrays refuse what CuPy's refuse, so device code that only worked because the plain
stand-in's arrays are NumPy's fails in CI as it would on a GPU.

The module's CuPy semantics one by one, the backend it makes (no host kernels, as a GPU),
and the two GPU bugs it found when the ``fake_cuda`` fixture became strict: a traced
``fill_``/``zero_`` (``zero_grad(set_to_none=False)`` in a compiled step) made a NumPy
constant for a device tensor, and a compiled graph's host draws (``randperm``) handed
NumPy samples to device kernels.
"""
import numpy as np
import pytest

import ember as em
from ember.device import cuda_strict as cs

xp = cs.xp


def test_no_implicit_conversion_to_numpy():
    a = xp.asarray(np.arange(6.0).reshape(2, 3))
    assert isinstance(a, xp.ndarray) and not isinstance(a, np.ndarray)
    for convert in (np.asarray, np.array, lambda v: np.float64(v)):
        with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
            convert(a)
    with pytest.raises(AttributeError, match="ctypes"):
        a.ctypes
    with pytest.raises(AttributeError):
        a.__array_interface__
    with pytest.raises(TypeError):
        memoryview(a)
    got = a.get()                                       # an explicit copy
    assert type(got) is np.ndarray and got.tolist() == [[0, 1, 2], [3, 4, 5]]
    got[0, 0] = 9
    assert a[0, 0].item() == 0
    assert xp.asnumpy(a).tolist() == a.tolist()


def test_host_arrays_never_mix_with_device_arrays():
    a = xp.ones(3, np.float32)
    h = np.ones(3, np.float32)
    for op in (lambda: a + h, lambda: h * a, lambda: xp.add(a, h), lambda: np.add(a, h),
               lambda: xp.concatenate([a, h]), lambda: xp.where(a > 0, a, h)):
        with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
            op()
    with pytest.raises(ValueError, match="non-scalar numpy.ndarray cannot be used for fill"):
        a[...] = h
    with pytest.raises(TypeError, match="Unsupported type <class 'list'>"):
        a[...] = [1.0, 2.0, 3.0]
    # scalars pass: Python's, NumPy's, a 0-d host array as a setitem value
    a[0] = np.float32(5.0)
    a[1] = np.array(6.0)
    b = a * 2 + np.float32(1.0) - 1
    assert isinstance(b, xp.ndarray) and b.tolist() == [10.0, 12.0, 2.0]
    # indices and axes read on the host: NumPy integer arrays and lists pass
    assert a[np.array([2, 0])].tolist() == [1.0, 5.0] and a[[1]].tolist() == [6.0]
    m = xp.zeros((2, 3, 4))
    assert m.transpose(np.argsort([2, 0, 1])).shape == (3, 4, 2)


def test_reductions_and_scalar_indexing_stay_on_the_device():
    a = xp.asarray(np.arange(4.0))
    for r in (a.sum(), xp.max(a), a[1], a.mean(), xp.dot(a, a)):
        assert isinstance(r, xp.ndarray) and r.shape == ()
    assert float(a.sum()) == 6.0 and int(a[3]) == 3 and bool(a[1]) and a.max().item() == 3.0
    assert [float(v) for v in a] == [0.0, 1.0, 2.0, 3.0] and len(a) == 4


def test_one_object_per_array_as_cupy():
    a = xp.zeros((4, 4), np.float32)
    b = xp.ones((4, 4), np.float32)
    assert xp.add(a, b, out=a) is a and a.__iadd__(b) is a
    v = a[1:]
    assert v.base is a and v[1:].base is a          # views hold their base's object
    del a
    assert v.base.shape == (4, 4)
    assert v.data.ptr == v.base.data.ptr + 16 and cs.host_view(v).base is not None


def test_low_precision_products_and_sums_as_cublas_and_cupy():
    rng = np.random.default_rng(0)
    x32 = rng.standard_normal((8, 300)).astype(np.float32)
    w32 = rng.standard_normal((300, 5)).astype(np.float32)
    for d in (np.float16, em.bfloat16.np):
        x, w = xp.asarray(x32.astype(d)), xp.asarray(w32.astype(d))
        want = (x32.astype(d).astype(np.float32) @ w32.astype(d).astype(np.float32)).astype(d)
        for got in (x @ w, xp.matmul(x, w)):
            assert got.dtype == np.dtype(d)                 # ml_dtypes' loop: float32
            np.testing.assert_array_equal(got.get(), want)  # float32 sums, one rounding
        s = x.sum(axis=1)
        np.testing.assert_array_equal(
            s.get(), x32.astype(d).astype(np.float32).sum(axis=1).astype(d))


def test_the_strict_backend_is_gpu_like(fake_cuda):
    assert fake_cuda.runtime.strict and "[strict]" in fake_cuda.runtime.name
    assert fake_cuda.xp is xp and not fake_cuda.has("host_kernels")
    t = em.arange(6.0, device="cuda").reshape(2, 3)
    assert isinstance(t._data, xp.ndarray)
    assert (t * 2).sum().item() == 30.0 and t.cpu().numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(TypeError, match="can't convert cuda"):
        t.numpy()


def test_plain_stand_in_keeps_numpy_arrays(plain_fake_cuda):
    assert not plain_fake_cuda.runtime.strict and plain_fake_cuda.xp is np
    assert plain_fake_cuda.has("host_kernels")


def test_a_compiled_step_zeroing_grads_in_place(fake_cuda):
    """``zero_grad(set_to_none=False)`` inside a compiled step: the traced ``zero_`` is a
    device constant (it was a NumPy one, which a GPU array refuses to be set from)."""
    def run(compiled):
        em.manual_seed(0)
        model = em.nn.Linear(3, 2).cuda()
        opt = em.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x):
            opt.zero_grad(set_to_none=False)
            loss = model(x).square().sum()
            loss.backward()
            opt.step()
            return loss
        fn = em.compile(step) if compiled else step
        x = em.linspace(-1, 1, 12).reshape(4, 3).cuda()
        losses = [fn(x).item() for _ in range(4)]
        return losses, model.weight.detach().cpu().numpy()
    want, got = run(False), run(True)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


def test_a_compiled_host_draw_feeds_device_kernels(fake_cuda):
    """``randperm`` stays a host draw in a GPU graph: its samples are copied to the device
    before a kernel reads them (NumPy samples in a device op once failed on a GPU)."""
    x = em.zeros(6, dtype=em.int64, device="cuda")
    fn = em.compile(lambda x: x + em.randperm(6, device="cuda"))
    for _ in range(3):
        r = fn(x)
        assert r.device.type == "cuda" and isinstance(r._data, xp.ndarray)
        assert sorted(r.cpu().numpy().tolist()) == list(range(6))


def test_what_cupy_lacks_is_missing():
    a = xp.arange(6.0)
    for name in ("insert", "errstate", "longdouble", "nanquantile", "spacing"):
        with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
            getattr(xp, name)
    with pytest.raises(AttributeError, match="multi_dot"):
        xp.linalg.multi_dot
    with pytest.raises(TypeError, match="no implementation found for 'numpy.insert'"):
        np.insert(a, 1, 5.0)                          # NumPy's function given a device array
    with pytest.raises(TypeError, match="spacing"):
        np.spacing(a)                                 # a ufunc CuPy lacks
    with pytest.raises(AttributeError, match="resize"):
        a.resize(3)
    # what CuPy has goes through, on the device
    assert type(np.cumsum(a)) is xp.ndarray and xp.fft.rfft(a).shape == (4,)
    assert xp.linalg.inv(xp.eye(2)).tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_the_table_of_what_cupy_lacks_matches_the_installed_cupy():
    cupy = pytest.importorskip("cupy", reason="CuPy not installed (the cuda extra)")
    import importlib

    def public(m):
        return {n for n in dir(m) if not n.startswith("_")}
    for mod, lacks in cs.CUPY_LACKS.items():
        cmod = importlib.import_module("cupy" + mod[len("numpy"):])
        assert not lacks & public(cmod), f"cupy{mod[5:]} has these now: {lacks & public(cmod)}"
        now = public(importlib.import_module(mod)) - public(cmod) - {"test"}
        assert now <= lacks, f"{mod}: CuPy {cupy.__version__} lacks {sorted(now - lacks)} too"


def test_ufuncs_refuse_dtypes_no_cupy_loop_takes():
    f = xp.ones(3, np.float32)
    i8 = xp.arange(3, dtype=np.int8)
    for call in (lambda: xp.bitwise_and(f, f), lambda: f & f, lambda: np.bitwise_and(f, f),
                 lambda: ~f, lambda: f >> 1, lambda: xp.left_shift(f, i8)):
        with pytest.raises(TypeError, match=r"Wrong type \('float32'.* of arguments for "
                                            r"cupy_\w+ \(CuPy's loops take: ") as e:
            call()
        assert "f" not in str(e.value).split("take: ")[1]     # integer loops only
    # safe casts to a loop pass: int8 floors in CuPy's float16 loop, bfloat16 adds natively,
    # a Python scalar is not checked
    assert xp.floor(i8).shape == (3,) and (i8 + 1).dtype == np.int8
    b = xp.ones(2, cs._bfloat16.np)
    assert (b + b).dtype == cs._bfloat16.np and xp.arctan2(f, f).dtype == np.float32


def test_the_loop_table_matches_the_installed_cupy():
    cupy = pytest.importorskip("cupy", reason="CuPy not installed (the cuda extra)")
    from cupy._core._kernel import ufunc
    from ember.device._cupy_loops import CUPY_VERSION, LOOPS
    have = {n: getattr(cupy, n) for n in dir(cupy) if isinstance(getattr(cupy, n), ufunc)}
    assert set(have) == set(LOOPS), (cupy.__version__, CUPY_VERSION)
    for name, f in have.items():
        ins = list(dict.fromkeys(t.split("->")[0] for t in f.types))
        assert LOOPS[name].split() == ins, name
