"""ember.save / ember.load: safetensors format, JSON metadata, atomic writes, validation."""
import io
import json
import math
import os
import pathlib
import signal
import sys

import numpy as np
import pytest

import ember as em
import ember.serialization as ser

ALL_DTYPES = [em.float32, em.float64, em.float16, em.bfloat16, em.int64, em.int32, em.int16,
              em.int8, em.uint8, em.bool]


def _sample(dtype, shape=(2, 3)):
    arr = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) - 2.5
    if dtype == em.bool:
        return em.tensor(arr > 0)
    if not dtype.is_floating_point:
        arr = np.abs(np.round(arr)) if dtype == em.uint8 else np.round(arr)
    return em.tensor(arr).to(dtype)


def _same(a, b):
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
    assert a.to(em.float64).tolist() == b.to(em.float64).tolist()


def _header(path):
    raw = pathlib.Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return raw, n, json.loads(raw[8:8 + n])


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_round_trip_every_dtype(tmp_path, dtype):
    t = _sample(dtype)
    p = tmp_path / "t.safetensors"
    em.save({"t": t, "empty": em.zeros(0, 4, dtype=dtype), "scalar": _sample(dtype, ())}, p)
    out = em.load(p)
    _same(out["t"], t)
    assert tuple(out["empty"].shape) == (0, 4) and out["scalar"].ndim == 0
    _, _, header = _header(p)
    assert header["t"]["dtype"] == ser._ST_NAMES[dtype.name]


def test_nested_structures_and_plain_values(tmp_path):
    w = em.randn(3, 2)
    obj = {"model": {"fc.weight": w, "fc.bias": em.zeros(2)},
           "optim": {"state": {0: {"step": 3, "exp_avg": em.ones(2)}},
                     "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1],
                                       "nesterov": False, "name": None}]},
           "floats": [float("nan"), float("inf"), -float("inf"), 0.1, -0.0],
           "big": 2 ** 100, "text": "héllo ✓", "tuple": (1, (2, [3])), "dtype": em.bfloat16,
           "np": np.arange(3, dtype=np.int16), (1, 2): "tuple key", None: "none key"}
    p = tmp_path / "ck.safetensors"
    em.save(obj, p)
    out = em.load(p)
    _same(out["model"]["fc.weight"], w)
    assert out["optim"]["state"][0]["step"] == 3 and isinstance(out["optim"]["state"], dict)
    g = out["optim"]["param_groups"][0]
    assert g["betas"] == (0.9, 0.999) and isinstance(g["betas"], tuple) and g["params"] == [0, 1]
    assert g["nesterov"] is False and g["name"] is None and g["lr"] == 1e-3
    f = out["floats"]
    assert math.isnan(f[0]) and f[1:4] == [math.inf, -math.inf, 0.1]
    assert math.copysign(1, f[4]) == -1
    assert out["big"] == 2 ** 100 and out["text"] == "héllo ✓" and out["tuple"] == (1, (2, [3]))
    assert out["dtype"] is em.bfloat16 and out["np"].dtype == np.int16
    assert out[(1, 2)] == "tuple key" and out[None] == "none key"
    assert list(out) == list(obj)  # key order kept


def test_flat_state_dict_keeps_names_and_requires_grad(tmp_path):
    p = tmp_path / "sd.safetensors"
    w = em.randn(2, 2, requires_grad=True)
    em.save({"layer.weight": w, "layer.bias": em.zeros(2)}, p)
    _, _, header = _header(p)
    assert {"layer.weight", "layer.bias", "__metadata__"} == set(header)
    out = em.load(p)
    assert out["layer.weight"].requires_grad and not out["layer.bias"].requires_grad
    assert out["layer.weight"].is_leaf


def test_shared_tensor_object_stored_once_views_stored_separately(tmp_path):
    t = em.arange(6.0)
    view = t[2:4]
    p = tmp_path / "s.safetensors"
    em.save({"a": t, "b": t, "v": view}, p)
    _, _, header = _header(p)
    assert len(header) - 1 == 2
    out = em.load(p)
    assert out["a"] is out["b"] and out["v"].tolist() == [2.0, 3.0]


def test_non_contiguous_and_file_objects(tmp_path):
    import io
    t = em.arange(12.0).reshape(3, 4).t()
    buf = io.BytesIO()
    em.save([t], buf)
    buf.seek(0)
    _same(em.load(buf)[0], t.contiguous())


def test_unsupported_objects_rejected():
    with pytest.raises(TypeError, match=r"type object at 'a\.0'"):
        ser.save({"a": [object()]}, os.devnull)
    with pytest.raises(TypeError, match="map_location"):
        em.load(os.devnull, map_location=3.0)


def test_map_location_cpu(tmp_path):
    p = tmp_path / "m.safetensors"
    em.save({"x": em.ones(2)}, p)
    assert em.load(p, map_location="cpu")["x"].device == em.device("cpu")
    assert em.load(str(p), map_location=em.device("cpu"))["x"].tolist() == [1.0, 1.0]


def test_format_layout_is_safetensors(tmp_path):
    p = tmp_path / "f.safetensors"
    em.save({"a": em.tensor([1.0, 2.0]), "b": em.tensor([7], dtype=em.int64)}, p)
    raw, n, header = _header(p)
    assert n % 8 == 0 and header["a"] == {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    assert header["b"]["data_offsets"] == [8, 16] and len(raw) == 8 + n + 16
    assert np.frombuffer(raw[8 + n:8 + n + 8], "<f4").tolist() == [1.0, 2.0]
    meta = header["__metadata__"]
    assert all(isinstance(v, str) for v in meta.values())
    assert json.loads(meta["ember"])["dict"]["a"] == {"tensor": "a"}


# ------------------------------------------------------------------ atomicity
def test_crash_during_replace_leaves_old_file(tmp_path, monkeypatch):
    p = tmp_path / "ck.safetensors"
    em.save({"v": em.tensor([1.0]), "step": 1}, p)

    def boom(src, dst):
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="simulated crash"):
        em.save({"v": em.tensor([2.0]), "step": 2}, p)
    monkeypatch.undo()
    assert em.load(p)["step"] == 1 and em.load(p)["v"].tolist() == [1.0]
    assert sorted(os.listdir(tmp_path)) == ["ck.safetensors"]  # temp file cleaned up


def test_crash_while_writing_leaves_old_file(tmp_path, monkeypatch):
    p = tmp_path / "ck.safetensors"
    em.save({"step": 1}, p)
    real_write = ser._write

    def half_write(f, header, enc):
        f.write(header[:10])
        raise KeyboardInterrupt

    monkeypatch.setattr(ser, "_write", half_write)
    with pytest.raises(KeyboardInterrupt):
        em.save({"step": 2, "x": em.ones(100)}, p)
    monkeypatch.setattr(ser, "_write", real_write)
    assert em.load(p) == {"step": 1} and os.listdir(tmp_path) == ["ck.safetensors"]


def test_save_fsyncs_file_and_directory(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    em.save({"x": em.ones(1)}, tmp_path / "a.safetensors")
    assert len(calls) == 2


def test_file_mode_follows_umask_or_existing(tmp_path):
    p = tmp_path / "m.safetensors"
    em.save({}, p)
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(p).st_mode & 0o777 == 0o666 & ~mask
    os.chmod(p, 0o600)
    em.save({}, p)
    assert os.stat(p).st_mode & 0o777 == 0o600


# ------------------------------------------------------------------ validation
@pytest.fixture
def good(tmp_path):
    p = tmp_path / "good.safetensors"
    em.save({"a": em.arange(4.0), "b": {"c": em.ones(2, dtype=em.int64)}, "n": 1}, p)
    return p


def _rewrite(path, header=None, body=None, n=None):
    raw, old_n, h = _header(path)
    data = raw[8 + old_n:]
    hb = json.dumps(h if header is None else header).encode() if not isinstance(
        header, bytes) else header
    hb = hb + b" " * (-len(hb) % 8)
    path.write_bytes((len(hb) if n is None else n).to_bytes(8, "little") + hb +
                     (data if body is None else body))


@pytest.mark.parametrize("cut", [0, 5, 8, 20, -1, -9])
def test_truncated_files_rejected(good, cut):
    raw = good.read_bytes()
    good.write_bytes(raw[:cut] if cut >= 0 else raw[:len(raw) + cut])
    with pytest.raises(ValueError, match=r"good\.safetensors.*(truncated|header length)"):
        em.load(good)


def test_corrupted_headers_rejected(good):
    _, _, h = _header(good)
    cases = [
        (dict(n=10 ** 12), "invalid header length"),
        (dict(header=b"{not json"), "not valid JSON"),
        (dict(header=b"[1, 2]"), "not a JSON object"),
        (dict(header={**h, "a": {**h["a"], "dtype": "F8"}}), "unsupported dtype"),
        (dict(header={**h, "a": {**h["a"], "shape": [5]}}), "needs"),
        (dict(header={**h, "a": {**h["a"], "shape": [-4]}}), "non-negative"),
        (dict(header={**h, "a": {**h["a"], "data_offsets": [8, 24]}}), "contiguous"),
        (dict(header={**h, "a": {**h["a"], "data_offsets": [16, 0]}}), "invalid data_offsets"),
        (dict(header={**h, "__metadata__": {"ember": "{oops"}}), "Ember metadata"),
        (dict(header={**h, "__metadata__": {"ember": '{"tensor": "zz"}'}}), "missing tensor"),
        (dict(header={**h, "__metadata__": {"ember": '{"evil": "os.system"}'}}), "unknown"),
        (dict(header={**h, "__metadata__": {"ember": 3}}), "map of strings"),
    ]
    raw = good.read_bytes()
    for kw, msg in cases:
        good.write_bytes(raw)
        _rewrite(good, **kw)
        with pytest.raises(ValueError, match=msg):
            em.load(good)


def test_trailing_garbage_rejected(good):
    good.write_bytes(good.read_bytes() + b"xx")
    with pytest.raises(ValueError, match="trailing bytes"):
        em.load(good)


def test_no_pickle_in_serialization():
    src = pathlib.Path(ser.__file__).read_text()
    for bad in ("import pickle", "from pickle", "marshal", "eval(", "exec(", "__import__"):
        assert bad not in src


# ------------------------------------------------------------------ interop
def test_plain_safetensors_file_loads_as_flat_dict(tmp_path):
    # a file written by hand, as another library would (no Ember metadata)
    h = json.dumps({"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]},
                    "__metadata__": {"format": "pt"}}).encode()
    p = tmp_path / "other.safetensors"
    p.write_bytes(len(h).to_bytes(8, "little") + h + np.array([1.5, -2.0]).tobytes())
    out = em.load(p)
    assert list(out) == ["w"] and out["w"].dtype == em.float64 and out["w"].tolist() == [1.5, -2]


def test_safetensors_package_interop(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    arrays = {"f32": np.arange(6, dtype=np.float32).reshape(2, 3), "i8": np.array([-1], np.int8),
              "b": np.array([True, False]), "h": np.ones(3, np.float16),
              "u8": np.zeros(0, np.uint8)}
    p = tmp_path / "from_st.safetensors"
    st.save_file(arrays, str(p))
    out = em.load(p)
    for k, v in arrays.items():
        np.testing.assert_array_equal(out[k].numpy(), v)
    q = tmp_path / "from_ember.safetensors"
    tensors = {k: em.from_numpy(v) for k, v in arrays.items()}
    em.save(tensors, q)
    back = st.load_file(str(q))
    assert set(back) == set(arrays)
    for k, v in arrays.items():
        np.testing.assert_array_equal(back[k], v)
        assert back[k].dtype == v.dtype


def test_bfloat16_readable_by_torch_safetensors(tmp_path):
    pytest.importorskip("safetensors")
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file
    p = tmp_path / "bf.safetensors"
    t = em.tensor([1.5, -3.0, 1e-3]).to(em.bfloat16)
    em.save({"x": t, "n": {"y": em.tensor([1, 2])}}, p)
    back = load_file(str(p))
    assert back["x"].dtype == torch.bfloat16 and back["n.y"].tolist() == [1, 2]
    assert back["x"].float().tolist() == t.to(em.float32).tolist()
    save_file({"z": torch.tensor([0.5, 2.0], dtype=torch.bfloat16)}, str(p))
    z = em.load(p)["z"]
    assert z.dtype == em.bfloat16 and z.to(em.float32).tolist() == [0.5, 2.0]


# ------------------------------------------------------------------ issue 14: hostile files
def _crafted(header, body=b""):
    """A safetensors file whose header is ``header`` (bytes, or JSON-encoded)."""
    hb = header if isinstance(header, bytes) else json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    return len(hb).to_bytes(8, "little") + hb + body


class _Stream(io.RawIOBase):
    """A readable stream that can't seek (a pipe, a socket)."""

    def __init__(self, raw):
        self._b = io.BytesIO(raw)

    def readable(self):
        return True

    def readinto(self, m):
        data = self._b.read(len(m))
        m[:len(data)] = data
        return len(data)


def _load_all_ways(tmp_path, raw):
    """``ember.load`` from a path, a seekable file object and a stream: the errors."""
    p = tmp_path / "crafted.safetensors"
    p.write_bytes(raw)
    errors = []
    for src in (p, io.BytesIO(raw), _Stream(raw)):
        with pytest.raises(ValueError) as info:
            em.load(src)
        errors.append(str(info.value))
    return errors


@pytest.mark.parametrize("where", ["header", "metadata", "metadata parsed"])
def test_deeply_nested_json_is_value_error_not_recursion_error(tmp_path, where):
    deep = 100_000 if where != "metadata parsed" else 500   # the second one parses as JSON
    nested = "[" * deep + "]" * deep
    if where == "header":
        raw = _crafted(b'{"a":' + nested.encode() + b"}")
    else:
        raw = _crafted({"__metadata__": {"format": "ember/1", "ember": nested}})
    for msg in _load_all_ways(tmp_path, raw):
        assert "nested" in msg, msg


def test_header_claiming_terabytes_fails_before_allocating(tmp_path):
    tb = {"w": {"dtype": "F32", "shape": [2 ** 20, 2 ** 20], "data_offsets": [0, 4 << 40]}}
    errors = _load_all_ways(tmp_path, _crafted(tb, b"\0" * 64))
    assert all("truncated" in m for m in errors), errors
    # a stream too is read before it is stored: a legitimate file still loads from one
    buf = io.BytesIO()
    em.save({"a": em.arange(6.0).reshape(2, 3), "b": [1, (2, em.ones(2, dtype=em.int64))]}, buf)
    out = em.load(_Stream(buf.getvalue()))
    assert out["a"].tolist() == [[0, 1, 2], [3, 4, 5]] and out["b"][1][1].tolist() == [1, 1]
    out["a"].add_(1)                          # loaded arrays are writable


def test_duplicate_keys_rejected_naming_the_key(tmp_path):
    entry = b'{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    dup_tensor = _crafted(b'{"w":' + entry + b',"w":' + entry + b"}", b"\0" * 4)
    for msg in _load_all_ways(tmp_path, dup_tensor):
        assert "key 'w' twice" in msg, msg
    dup_field = _crafted(b'{"w":{"dtype":"F32","dtype":"F64","shape":[1],'
                         b'"data_offsets":[0,4]}}', b"\0" * 4)
    assert all("key 'dtype' twice" in m for m in _load_all_ways(tmp_path, dup_field))
    meta = '{"dict":{"step":1,"step":2}}'
    dup_meta = _crafted({"__metadata__": {"format": "ember/1", "ember": meta}})
    assert all("key 'step' twice" in m for m in _load_all_ways(tmp_path, dup_meta))


def test_save_of_a_reference_cycle_names_it():
    loop = [1]
    loop.append(loop)
    with pytest.raises(ValueError, match=r"list at 'x\.1' is the same object as its "
                                         r"enclosing list at 'x' \(a reference cycle\)"):
        em.save({"x": loop}, io.BytesIO())
    d = {"w": em.ones(1)}
    d["self"] = [d]
    with pytest.raises(ValueError, match=r"dict at 'self\.0' .* dict at 'the top level'"):
        em.save(d, io.BytesIO())
    shared = [em.ones(1)]                     # the same list twice, not a cycle: fine
    buf = io.BytesIO()
    em.save({"a": shared, "b": shared}, buf)
    buf.seek(0)
    assert em.load(buf)["b"][0].tolist() == [1.0]


def test_save_of_absurd_nesting_is_value_error():
    deep = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested more than 100 containers deep"):
        em.save(deep, io.BytesIO())


_KILLED_MID_SAVE = """
import os, signal, sys
import ember as em
import ember.serialization as ser
def half_write(f, header, enc):
    f.write(header[:10]); f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
ser._write = half_write
em.save({"step": 2}, sys.argv[1])
"""


def test_temp_files_of_killed_saves_are_removed_by_the_next_save(tmp_path):
    import subprocess
    p = tmp_path / "ck.safetensors"
    em.save({"step": 1}, p)
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_MID_SAVE, str(p)],
                            stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err.decode()
    left = [n for n in os.listdir(tmp_path) if n != p.name]
    assert len(left) == 1 and left[0].startswith(f".{p.name}.{proc.pid}.") and \
        left[0].endswith(".tmp"), left
    assert em.load(p) == {"step": 1}                       # the old file is intact
    alive = tmp_path / f".{p.name}.{os.getppid()}.abc123.tmp"   # a save still running
    other = tmp_path / f".other.safetensors.{proc.pid}.abc123.tmp"  # another target
    alive.write_bytes(b"x")
    other.write_bytes(b"x")
    em.save({"step": 3}, p)
    assert sorted(os.listdir(tmp_path)) == sorted([p.name, alive.name, other.name])
    assert em.load(p) == {"step": 3}


def test_file_object_reads_from_its_position_to_the_end_of_the_data():
    buf = io.BytesIO()
    em.save({"first": em.ones(2)}, buf)
    em.save({"second": 2}, buf)
    buf.seek(0)
    assert em.load(buf)["first"].tolist() == [1.0, 1.0]     # checked against what is left
    assert em.load(buf) == {"second": 2}
    one = io.BytesIO()
    em.save({"first": em.ones(2)}, one)
    with pytest.raises(ValueError, match="truncated"):
        em.load(io.BytesIO(one.getvalue()[:-1]))
