"""``ember.multiprocessing``: ``torch.multiprocessing``'s API.

Python's ``multiprocessing`` (everything it exports: ``Process``, ``Queue``,
``SimpleQueue``, ``Pool``, ``get_context``, ``set_start_method``...) with Ember's tensor
reducer registered on its pickler, so a tensor put on a ``Queue`` or passed to a ``Process``
or to :func:`spawn` is moved into shared memory and the receiver views the same bytes
(PyTorch's ``file_descriptor`` strategy), plus :func:`spawn`/:func:`start_processes`.
Ordinary ``pickle`` still refuses tensors.

Example:
    >>> import ember.multiprocessing as mp
    >>> q = mp.get_context("spawn").Queue()
    >>> t = ember.zeros(3)
    >>> q.put(t)                 # t now lives in shared memory  # doctest: +SKIP
"""
import multiprocessing
from multiprocessing import *  # noqa: F401,F403 - torch.multiprocessing re-exports it all

from ._reduce import init_reductions
from ._spawn import (ProcessContext, ProcessException, ProcessExitedException,  # noqa: F401
                     ProcessRaisedException, spawn, start_processes)

__all__ = list(multiprocessing.__all__) + [
    "spawn", "start_processes", "ProcessContext", "ProcessException",
    "ProcessRaisedException", "ProcessExitedException", "set_sharing_strategy",
    "get_sharing_strategy", "get_all_sharing_strategies"]

_STRATEGIES = {"file_descriptor"}
_strategy = "file_descriptor"


def get_all_sharing_strategies() -> set:
    """The sharing strategies this platform supports (``{"file_descriptor"}``)."""
    return set(_STRATEGIES)


def get_sharing_strategy() -> str:
    """The current sharing strategy."""
    return _strategy


def set_sharing_strategy(new_strategy: str) -> None:
    """Set how tensors are shared: only ``"file_descriptor"`` (PyTorch's Linux default:
    the memory file's descriptor is passed) exists; ``"file_system"`` (named files) is not
    implemented.

    Raises:
        ValueError: an unknown or unsupported strategy.
    """
    global _strategy
    if new_strategy not in _STRATEGIES:
        raise ValueError(f"set_sharing_strategy: {new_strategy!r} is not supported; valid "
                         f"strategies: {sorted(_STRATEGIES)}")
    _strategy = new_strategy


init_reductions()
