"""``ember.save`` / ``ember.load``: checkpoints in the safetensors format, no pickle.

File layout (https://github.com/huggingface/safetensors): 8-byte little-endian header
length ``N``, ``N`` bytes of JSON header ``{name: {"dtype", "shape", "data_offsets"}}``
(padded with spaces to a multiple of 8), then the raw little-endian tensor bytes, packed
contiguously in header order. Everything that is not a tensor (the nesting of dicts,
lists and tuples; ints, floats, strings, bools, None) is JSON stored under the key
``"ember"`` of the header's ``__metadata__`` string map, where a tensor appears as
``{"tensor": name}``. Loading only parses JSON and copies bytes: it never executes code.

Complex tensors (safetensors has no complex dtype) are stored as their ``view_as_real``
(float32 for complex64, float64 for complex128, a trailing dim of 2) and marked
``"complex": "<dtype>"`` in the metadata, so they load back exactly; a plain safetensors
reader sees the float pairs.

A flat ``{str: tensor}`` dict (a ``state_dict``) keeps its keys as tensor names, so
``safetensors.numpy.load_file`` reads Ember files and ``ember.load`` reads any
safetensors file (without Ember metadata it returns ``{name: tensor}``).

Sharing: the same tensor *object* reached twice is stored once and loaded as one
object; distinct tensors that are views of one storage are stored separately (twice)
and loaded as independent tensors.

Example:
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "ckpt.safetensors")
    >>> ember.save({"w": ember.ones(2), "step": 3}, p)
    >>> ember.load(p)["step"]
    3
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import tempfile
import threading

import numpy as np

from . import dtypes as _dt
from ._load_location import Misplaced, placer as _placer
from .ops.factories import from_numpy
from .tensor import Tensor

__all__ = ["save", "load", "add_safe_globals", "safe_globals", "get_safe_globals",
           "clear_safe_globals"]

_ST_NAMES = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16",
             "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
             "bool": "BOOL"}
_FROM_ST = {v: _dt.as_dtype(k) for k, v in _ST_NAMES.items()}
#: complex dtype -> the real dtype of its (real, imag) pairs in the file.
_COMPLEX = {"complex64": np.dtype(np.float32), "complex128": np.dtype(np.float64)}
_MAX_HEADER = 100 * 1024 * 1024  # NOTE: safetensors' own limit
# NOTE: nesting deeper than this is refused on save and on load, so neither recurses into
# Python's recursion limit (a checkpoint is a few levels deep; a crafted file may not be)
_MAX_DEPTH = 100
_CHUNK = 1 << 24       # stream reads: never allocate more than the stream has delivered
_META_KEY, _FORMAT = "ember", "ember/1"


# ------------------------------------------------------------------------- save
class _Encoder:
    """Turns an object tree into JSON-able data plus a list of (name, tensor)."""

    def __init__(self) -> None:
        self.tensors: dict[str, np.ndarray] = {}
        self._by_id: dict[int, str] = {}
        self._open: dict[int, str] = {}   # id -> path of the containers being encoded

    def name_for(self, t, path: str) -> str:
        if id(t) in self._by_id:
            return self._by_id[id(t)]
        name, k = path or "tensor", 1
        while name in self.tensors or name == "__metadata__":
            name, k = f"{path}#{k}", k + 1
        arr = np.require(t.detach().cpu().numpy() if isinstance(t, Tensor) else t,
                         requirements="C")
        if arr.dtype.name in _COMPLEX:      # NOTE: (real, imag) pairs: view_as_real
            arr = arr.reshape(-1).view(_COMPLEX[arr.dtype.name]).reshape(arr.shape + (2,))
        self.tensors[name] = arr
        self._by_id[id(t)] = name
        return name

    def encode(self, obj, path: str):
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, (int, np.integer)) and not isinstance(obj, np.bool_):
            return int(obj)
        if isinstance(obj, (float, np.floating)):
            obj = float(obj)
            return obj if math.isfinite(obj) else {"float": repr(obj)}
        if isinstance(obj, np.bool_):
            return bool(obj)
        if isinstance(obj, Tensor):
            node = {"tensor": self.name_for(obj, _supported(obj.dtype.name, "tensor", path))}
            if obj.dtype.name in _COMPLEX:
                node["complex"] = obj.dtype.name
            if obj.device.type != "cpu":     # NOTE: PyTorch's location tag, e.g. "cuda:0"
                node["device"] = str(obj.device)
            return {**node, "requires_grad": True} if obj.requires_grad else node
        if isinstance(obj, np.ndarray):
            node = {"ndarray": self.name_for(obj, _supported(obj.dtype.name, "numpy array",
                                                             path))}
            return {**node, "complex": obj.dtype.name} if obj.dtype.name in _COMPLEX else node
        if isinstance(obj, _dt.DType):
            return {"dtype": obj.name}
        if isinstance(obj, (dict, list, tuple)):
            return self._container(obj, path)
        raise TypeError(f"ember.save: cannot save an object of type {type(obj).__name__} at "
                        f"{path or 'the top level'!r}; supported: dict, list, tuple, tensor, "
                        f"numpy array, int, float, str, bool, None, ember dtype")

    def _container(self, obj, path: str):
        """Encode a dict/list/tuple, refusing reference cycles and absurd nesting."""
        where = path or "the top level"
        if id(obj) in self._open:
            outer = self._open[id(obj)] or "the top level"
            raise ValueError(f"ember.save: the {type(obj).__name__} at {where!r} is the same "
                             f"object as its enclosing {type(obj).__name__} at {outer!r} (a "
                             f"reference cycle); only trees can be saved (a tensor may appear "
                             f"twice, a container may not contain itself)")
        if len(self._open) >= _MAX_DEPTH:
            raise ValueError(f"ember.save: the object at {where!r} is nested more than "
                             f"{_MAX_DEPTH} containers deep; flatten it")
        self._open[id(obj)] = path
        try:
            if isinstance(obj, dict):
                return self._encode_dict(obj, path)
            items = [self.encode(v, _join(path, i)) for i, v in enumerate(obj)]
            return {"tuple": items} if isinstance(obj, tuple) else items
        finally:
            del self._open[id(obj)]

    def _encode_dict(self, obj: dict, path: str):
        if all(isinstance(k, str) for k in obj):
            return {"dict": {k: self.encode(v, _join(path, k)) for k, v in obj.items()}}
        items = []
        for k, v in obj.items():
            if not isinstance(k, (str, int, float, bool, type(None), tuple)):
                raise TypeError(f"ember.save: dict key {k!r} at {path!r} has unsupported "
                                f"type {type(k).__name__}")
            items.append([self.encode(k, path), self.encode(v, _join(path, k))])
        return {"items": items}


def _supported(dtype: str, what: str, path: str) -> str:
    """``path`` if a ``dtype`` value can be saved, else a TypeError naming what can."""
    if dtype not in _ST_NAMES and dtype not in _COMPLEX:
        raise TypeError(f"ember.save: {what} at {path!r} has unsupported dtype {dtype}; "
                        f"supported: {', '.join([*_ST_NAMES, *_COMPLEX])}")
    return path


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def _header_bytes(enc: _Encoder, structure) -> bytes:
    header, offset = {}, 0
    for name, arr in enc.tensors.items():
        header[name] = {"dtype": _ST_NAMES[_dtype_name(arr)], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    header["__metadata__"] = {"format": _FORMAT,
                              _META_KEY: json.dumps(structure, separators=(",", ":"))}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw


def _dtype_name(arr: np.ndarray) -> str:
    return "bfloat16" if arr.dtype == _dt.bfloat16.np else arr.dtype.name


def _write(f, header: bytes, enc: _Encoder) -> None:
    f.write(header)
    for arr in enc.tensors.values():
        if sys.byteorder == "big" and arr.dtype.itemsize > 1:
            arr = arr.byteswap()
        f.write(memoryview(arr.reshape(-1).view(np.uint8)))


def save(obj, f) -> None:
    """Save nested dicts/lists/tuples of tensors and plain values to ``f`` atomically.

    The file is written to a temporary file in the same directory
    (``.<name>.<pid>.<random>.tmp``), flushed and fsynced, then renamed over ``f``
    (``os.replace``) and the directory fsynced: a crash at any point leaves either the old
    file or the new one, never a torn one. Any exception (``KeyboardInterrupt`` included)
    removes the temporary file; one left by a killed process is removed by the next save
    to the same path once that process is gone.

    Args:
        obj: e.g. ``{"model": model.state_dict(), "optimizer": opt.state_dict()}``.
        f: a path (str/PathLike), or a binary file object (written directly, no atomicity).

    Example:
        >>> ember.save({"w": ember.zeros(2, 3)}, os.path.join(tempfile.mkdtemp(), "a.st"))
    """
    enc = _Encoder()
    structure = enc.encode(obj, "")
    header = _header_bytes(enc, structure)
    if hasattr(f, "write"):
        _write(f, header, enc)
        return
    path = os.fspath(f)
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    _remove_stale_temps(directory, base)
    tmp = None
    try:
        with _TEMPS_LOCK:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{base}.{os.getpid()}.",
                                       suffix=".tmp")
            _OWN_TEMPS.add(tmp)
        with os.fdopen(fd, "wb") as out:
            _write(out, header, enc)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, _file_mode(path))
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise
    finally:
        _OWN_TEMPS.discard(tmp)
    _fsync_dir(directory)


_TEMPS_LOCK = threading.Lock()
_OWN_TEMPS: set = set()      # temporary files this process is writing now


def _remove_stale_temps(directory: str, base: str) -> None:
    """Delete ``.<base>.<pid>.<random>.tmp`` files whose writer is gone: a process that
    was killed mid-save (SIGKILL, power loss) could not remove its own."""
    pattern = re.compile(re.escape(f".{base}.") + r"(\d+)\.[A-Za-z0-9_]+\.tmp")
    try:
        names = os.listdir(directory)
    except OSError:
        return
    with _TEMPS_LOCK:
        for name in names:
            m = pattern.fullmatch(name)
            full = os.path.join(directory, name)
            if m and full not in _OWN_TEMPS and not _writer_alive(int(m.group(1))):
                with contextlib.suppress(OSError):
                    os.unlink(full)


def _writer_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False     # NOTE: not in _OWN_TEMPS: an earlier save of ours was interrupted
    if os.name != "posix":
        return True      # NOTE: no cheap liveness probe: keep the file
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:      # e.g. PermissionError: alive, another user's
        return True
    return True


def _file_mode(path: str) -> int:
    try:
        return os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # NOTE: e.g. Windows cannot open directories; the rename still happened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------- load
class _Corrupt(ValueError):
    pass


def _read_exact(f, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _Corrupt(f"file is truncated: expected {n} bytes of {what}, got {len(data)}")
    return data


def _json(text, what: str):
    """Parse JSON, refusing duplicate keys and nesting that would exhaust the stack."""
    def pairs(items):
        out = {}
        for k, v in items:
            if k in out:
                raise _Corrupt(f"{what} has the key {k!r} twice (ambiguous: which one?)")
            out[k] = v
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _Corrupt(f"{what} is not valid JSON: {e}") from None
    except RecursionError:
        raise _Corrupt(f"{what} is nested too deeply to parse") from None


def _parse_header(f, size, exact: bool) -> tuple[dict, dict]:
    """Validated ``(tensor entries sorted by offset, metadata)``. ``size``: the bytes the
    file holds from here (None: unknown); ``exact``: whether it must end after the data."""
    n = int.from_bytes(_read_exact(f, 8, "header length"), "little")
    if n <= 0 or n > _MAX_HEADER or (size is not None and n > size - 8):
        raise _Corrupt(f"invalid header length {n} (file size {size}); not a safetensors "
                       f"file or truncated")
    try:
        text = _read_exact(f, n, "header").decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Corrupt(f"header is not valid JSON: {e}") from None
    header = _json(text, "header")
    if not isinstance(header, dict):
        raise _Corrupt("header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _Corrupt("__metadata__ must be a map of strings to strings")
    entries, expect = [], 0
    for name, e in header.items():
        entries.append((name, _check_entry(name, e)))
    entries.sort(key=lambda kv: kv[1][2])
    for name, (dtype, shape, begin, end) in entries:
        if begin != expect:
            raise _Corrupt(f"tensor {name!r}: data_offsets start at {begin}, expected {expect} "
                           f"(offsets must be contiguous)")
        expect = end
    if size is not None and (8 + n + expect > size or exact and 8 + n + expect != size):
        what = "truncated" if 8 + n + expect > size else "has trailing bytes"
        raise _Corrupt(f"file {what}: header describes {expect} data bytes, file holds "
                       f"{size - 8 - n}")
    return dict(entries), meta


def _check_entry(name: str, e) -> tuple:
    if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
        raise _Corrupt(f"tensor {name!r}: entry must have exactly dtype, shape, data_offsets")
    dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
    if dtype not in _FROM_ST:
        raise _Corrupt(f"tensor {name!r}: unsupported dtype {dtype!r}; supported: "
                       f"{sorted(_FROM_ST)}")
    ok_int = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
    if not isinstance(shape, list) or not all(ok_int(s) for s in shape):
        raise _Corrupt(f"tensor {name!r}: shape must be a list of non-negative ints, got "
                       f"{shape!r}")
    if not isinstance(offs, list) or len(offs) != 2 or not all(ok_int(o) for o in offs) \
            or offs[1] < offs[0]:
        raise _Corrupt(f"tensor {name!r}: invalid data_offsets {offs!r}")
    nbytes = math.prod(shape) * _FROM_ST[dtype].itemsize
    if offs[1] - offs[0] != nbytes:
        raise _Corrupt(f"tensor {name!r}: data_offsets span {offs[1] - offs[0]} bytes but "
                       f"dtype {dtype} x shape {shape} needs {nbytes}")
    return _FROM_ST[dtype], tuple(shape), offs[0], offs[1]


def _read_tensors(f, entries: dict, sized: bool) -> dict:
    """The tensors' arrays. ``sized``: the file's size was checked against the header, so
    arrays can be allocated up front; otherwise bytes are read before they are stored."""
    out = {}
    for name, (dtype, shape, begin, end) in entries.items():
        if not sized:
            out[name] = _read_stream(f, end - begin, name).view(dtype.np).reshape(shape)
            if sys.byteorder == "big" and dtype.itemsize > 1:
                out[name] = out[name].byteswap()
            continue
        arr = np.empty(shape, dtype=dtype.np)
        flat = arr.reshape(-1).view(np.uint8)
        got = f.readinto(memoryview(flat)) if hasattr(f, "readinto") else None
        if got is None:
            data = f.read(end - begin)
            got = len(data)
            flat[:got] = np.frombuffer(data, dtype=np.uint8)
        if got != end - begin:
            raise _Corrupt(f"file is truncated inside tensor {name!r}")
        if sys.byteorder == "big" and dtype.itemsize > 1:
            arr = arr.byteswap()
        out[name] = arr
    return out


def _read_stream(f, n: int, name: str) -> np.ndarray:
    """``n`` bytes as a writable uint8 array, read in chunks: a header that claims more
    than the stream holds fails on the missing bytes, not on a huge allocation."""
    buf = bytearray()
    while len(buf) < n:
        chunk = f.read(min(_CHUNK, n - len(buf)))
        if not chunk:
            raise _Corrupt(f"file is truncated inside tensor {name!r}")
        buf += chunk
    return np.frombuffer(buf, dtype=np.uint8)


class _Decoder:
    def __init__(self, arrays: dict, place) -> None:
        self.arrays, self.place, self.made = arrays, place, {}

    def array(self, name: str, cplx) -> np.ndarray:
        """The stored array ``name``; ``cplx``: the complex dtype its float pairs encode."""
        if name not in self.arrays:
            raise _Corrupt(f"metadata refers to a missing tensor {name!r}")
        arr = self.arrays[name]
        if cplx is None:
            return arr
        if cplx not in _COMPLEX or arr.dtype != _COMPLEX[cplx] or arr.shape[-1:] != (2,):
            raise _Corrupt(f"tensor {name!r}: marked {cplx!r} but stored as {arr.dtype} of "
                           f"shape {list(arr.shape)} (expected {_COMPLEX.get(cplx)} pairs, a "
                           f"trailing dim of 2)")
        return np.ascontiguousarray(arr).reshape(-1).view(cplx).reshape(arr.shape[:-1])

    def tensor(self, name: str, requires_grad: bool, cplx=None, loc: str = "cpu"):
        if name not in self.made:
            t = self.place(from_numpy(self.array(name, cplx)), loc)
            self.made[name] = t.requires_grad_(True) if requires_grad else t
        return self.made[name]

    def decode(self, node, depth: int = 0):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if depth > _MAX_DEPTH:
            raise _Corrupt(f"metadata is nested more than {_MAX_DEPTH} levels deep")
        depth += 1
        if isinstance(node, list):
            return [self.decode(v, depth) for v in node]
        if not isinstance(node, dict) or len(node) == 0:
            raise _Corrupt(f"metadata has an unexpected node {node!r}")
        tag = next(iter(node))
        if tag == "tensor":
            return self.tensor(node["tensor"], bool(node.get("requires_grad", False)),
                               node.get("complex"), str(node.get("device", "cpu")))
        if tag == "ndarray" and node["ndarray"] in self.arrays:
            return self.array(node["ndarray"], node.get("complex"))
        if tag == "dict" and isinstance(node["dict"], dict):
            return {k: self.decode(v, depth) for k, v in node["dict"].items()}
        if tag == "items" and isinstance(node["items"], list):
            return {_hashable(self.decode(k, depth)): self.decode(v, depth)
                    for k, v in node["items"]}
        if tag == "tuple" and isinstance(node["tuple"], list):
            return tuple(self.decode(v, depth) for v in node["tuple"])
        if tag == "float" and node["float"] in ("nan", "inf", "-inf"):
            return float(node["float"])
        if tag == "dtype":
            return _dt.as_dtype(node["dtype"])
        raise _Corrupt(f"metadata has an unknown node {node!r}")


def _hashable(k):
    if isinstance(k, list):
        raise _Corrupt(f"metadata has an unhashable dict key {k!r}")
    return k


def load(f, map_location=None, weights_only: bool = True):
    """Load what :func:`save` wrote (or any safetensors file) from a path or file object.

    A file object is read from its position to the end of the data (what follows is left
    unread); a stream that can't seek is read in chunks, so a header that claims more
    data than arrives fails as truncated without allocating it.

    Args:
        map_location: where tensors go, as in PyTorch: ``None`` (the device each was
            saved from, ``"cpu"`` for files without Ember metadata), a ``str`` or
            ``ember.device`` (all of them), a dict from saved location to new location
            (``{"cuda:1": "cuda:0"}``; others stay where saved), or a callable
            ``(tensor, location) -> tensor or None`` (None: where saved). The callable
            gets a CPU *tensor* where PyTorch passes a storage; ``t.cuda(1)`` or
            returning it as is work alike.
        weights_only: accepted for PyTorch compatibility; loading never runs code anyway.

    Raises:
        ValueError: the file is truncated or corrupted: sizes that disagree, JSON that is
            invalid, nested too deeply or has a key twice... (the message names file and
            problem).

    Example:
        >>> p = os.path.join(tempfile.mkdtemp(), "b.st")
        >>> ember.save([1, (2.5, None)], p)
        >>> ember.load(p)
        [1, (2.5, None)]
    """
    dev = _placer(map_location)
    if hasattr(f, "read"):
        return _load_from(f, _remaining(f), False, getattr(f, "name", "<file object>"), dev)
    path = os.fspath(f)
    with open(path, "rb") as fh:
        return _load_from(fh, os.fstat(fh.fileno()).st_size, True, path, dev)


def _remaining(f):
    """Bytes from ``f``'s position to its end, or None for a stream that can't seek."""
    try:
        if not f.seekable():
            return None
        pos = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(pos)
        return end - pos
    except (AttributeError, OSError, ValueError):
        return None


def _load_from(fh, size, exact, name, dev):
    try:
        entries, meta = _parse_header(fh, size, exact)
        arrays = _read_tensors(fh, entries, size is not None)
        if _META_KEY not in meta:
            dec = _Decoder(arrays, dev)
            return {k: dec.tensor(k, False) for k in entries}
        structure = _json(meta[_META_KEY], "Ember metadata")
        return _Decoder(arrays, dev).decode(structure)
    except _Corrupt as e:
        raise ValueError(f"ember.load({name!r}): {e}") from None
    except Misplaced as e:     # NOTE: map_location's own error, not a malformed file
        raise e.error from None
    except RecursionError:     # NOTE: belt and braces; the depth checks come first
        raise ValueError(f"ember.load({name!r}): nested too deeply") from None
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"ember.load({name!r}): malformed Ember metadata: {e!r}") from None


# PyTorch's allowlist for ``weights_only`` unpickling. Ember's loading never unpickles (it
# parses JSON and copies bytes), so no global can ever run and there is nothing to allow:
# these accept PyTorch programs' calls and record the list for ``get_safe_globals``.
_SAFE_GLOBALS: list = []


def add_safe_globals(safe_globals: list) -> None:
    """Accepted for PyTorch compatibility; a no-op for safety: ``load`` never unpickles.

    Args:
        safe_globals: classes/functions (or ``(obj, "name")`` pairs) PyTorch would allow
            its unpickler to rebuild; recorded only.
    """
    if not isinstance(safe_globals, (list, tuple)):
        raise TypeError(f"add_safe_globals(): expected a list of globals, got "
                        f"{type(safe_globals).__name__}")
    _SAFE_GLOBALS.extend(safe_globals)


def get_safe_globals() -> list:
    """The globals passed to :func:`add_safe_globals` (they affect nothing)."""
    return list(_SAFE_GLOBALS)


def clear_safe_globals() -> None:
    """Forget the globals passed to :func:`add_safe_globals`."""
    _SAFE_GLOBALS.clear()


@contextlib.contextmanager
def safe_globals(safe_globals: list):
    """``with safe_globals([...]):`` accepted like PyTorch's; loading never unpickles.

    Example:
        >>> with ember.serialization.safe_globals([dict]):
        ...     pass
    """
    n = len(_SAFE_GLOBALS)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        del _SAFE_GLOBALS[n:]
