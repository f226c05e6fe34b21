"""Collectives on Python objects: ``broadcast_object_list``, ``all_gather_object``,
``gather_object``.

Objects travel as bytes in the tensor collectives. Plain data — ``None``, ``bool``,
``int``, ``float``, ``str`` and lists / str-keyed dicts of them — is encoded as JSON,
which decodes without running code. Anything else (tuples, arrays, custom classes) is
pickled, and unpickling bytes can run code: only use such objects with peers you trust
(the ranks of your own job); pass ``allow_pickle=False`` to refuse them instead.
"""
from __future__ import annotations

import json
import pickle

import numpy as np

from .. import dtypes as _dt
from ..device import device as _device
from .collectives import all_gather_into_tensor, broadcast
from .groups import resolve


def _is_plain(obj) -> bool:
    if obj is None or type(obj) in (bool, int, float, str):
        return True
    if type(obj) is list:
        return all(_is_plain(x) for x in obj)
    if type(obj) is dict:
        return all(type(k) is str and _is_plain(v) for k, v in obj.items())
    return False


def encode(obj, allow_pickle: bool = True) -> bytes:
    """``b"J" + JSON`` for plain data, else ``b"P" + pickle`` (refused without pickle)."""
    if _is_plain(obj):
        return b"J" + json.dumps(obj).encode()
    if not allow_pickle:
        raise TypeError(f"object collective: {type(obj).__name__} is not plain JSON data "
                        f"(None/bool/int/float/str, lists, str-keyed dicts) and "
                        f"allow_pickle=False")
    return b"P" + pickle.dumps(obj)


def decode(data: bytes, allow_pickle: bool = True):
    """Inverse of :func:`encode`."""
    kind, body = data[:1], data[1:]
    if kind == b"J":
        return json.loads(body.decode())
    if kind == b"P" and allow_pickle:
        return pickle.loads(body)   # noqa: S301 - documented: peers of the same job
    raise ValueError(f"object collective: refusing payload of kind {kind!r} "
                     f"(allow_pickle={allow_pickle})")


def _t(arr):
    from ..tensor import _wrap
    return _wrap(arr, _dt._by_name[arr.dtype.name], _device("cpu"))


def broadcast_object_list(object_list: list, src: int = 0, group=None, device=None,
                          allow_pickle: bool = True) -> None:
    """Replace ``object_list``'s items on every rank by those of rank ``src``.

    Example:
        >>> objs = [{"epoch": 3}] if dist.get_rank() == 0 else [None]
        >>> dist.broadcast_object_list(objs, src=0)    # objs == [{"epoch": 3}] everywhere
    """
    grp = resolve(group, "broadcast_object_list")
    if grp.comm is None:
        return
    mine = grp.ranks[grp.comm.rank] == src
    payload = encode(list(object_list), allow_pickle) if mine else b""
    size = np.array([len(payload)], np.int64)
    broadcast(_t(size), src, group)
    buf = np.frombuffer(payload, np.uint8).copy() if mine else np.empty(int(size[0]), np.uint8)
    broadcast(_t(buf), src, group)
    items = decode(buf.tobytes(), allow_pickle)
    if len(items) != len(object_list):
        raise ValueError(f"broadcast_object_list: rank {src} sent {len(items)} objects but "
                         f"this rank's object_list has {len(object_list)}; every rank must "
                         f"pass a list of the same length")
    object_list[:] = items


def _gather_bytes(obj, group, allow_pickle):
    """Every rank's encoded ``obj`` (a list of bytes in group-rank order)."""
    grp = resolve(group, "all_gather_object")
    payload = encode(obj, allow_pickle)
    n = grp.size()
    sizes = np.zeros(n, np.int64)
    all_gather_into_tensor(_t(sizes), _t(np.array([len(payload)], np.int64)), group)
    width = int(sizes.max()) if n else 0
    mine = np.zeros(width, np.uint8)
    mine[:len(payload)] = np.frombuffer(payload, np.uint8)
    out = np.zeros(n * width, np.uint8)
    all_gather_into_tensor(_t(out), _t(mine), group)
    return [out[r * width:r * width + int(sizes[r])].tobytes() for r in range(n)]


def all_gather_object(object_list: list, obj, group=None, allow_pickle: bool = True) -> None:
    """Fill ``object_list[r]`` with rank ``r``'s ``obj`` on every rank.

    Example:
        >>> out = [None] * dist.get_world_size()
        >>> dist.all_gather_object(out, {"rank": dist.get_rank()})
    """
    grp = resolve(group, "all_gather_object")
    if grp.comm is None:
        return
    if len(object_list) != grp.size():
        raise ValueError(f"all_gather_object: object_list has {len(object_list)} items; it "
                         f"must have one per rank of the group ({grp.size()})")
    for r, data in enumerate(_gather_bytes(obj, group, allow_pickle)):
        object_list[r] = decode(data, allow_pickle)


def gather_object(obj, object_gather_list=None, dst: int = 0, group=None,
                  allow_pickle: bool = True) -> None:
    """Rank ``dst`` gets every rank's ``obj`` in ``object_gather_list`` (None elsewhere)."""
    grp = resolve(group, "gather_object")
    if grp.comm is None:
        return
    datas = _gather_bytes(obj, group, allow_pickle)
    if grp.ranks[grp.comm.rank] == dst:
        if object_gather_list is None or len(object_gather_list) != grp.size():
            raise ValueError(f"gather_object: on dst={dst} object_gather_list must be a "
                             f"list of {grp.size()} items")
        for r, data in enumerate(datas):
            object_gather_list[r] = decode(data, allow_pickle)
