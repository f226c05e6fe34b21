"""State dicts for :class:`~ember.nn.Module` (PyTorch's protocol and error messages).

``state_dict`` calls each module's ``_save_to_state_dict`` and recurses; ``load_state_dict``
calls each module's ``_load_from_state_dict`` (layers may override both, e.g. to convert
old checkpoints), collects missing/unexpected keys and size mismatches, and raises one
RuntimeError listing them all.
"""
from __future__ import annotations

import warnings

from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from ..autograd.grad_mode import no_grad
from ..tensor import Tensor
from .parameter import Parameter


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """``(missing_keys, unexpected_keys)`` returned by ``load_state_dict``."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class _StateDictMixin:
    """The state-dict half of ``Module`` (kept apart to keep module.py readable)."""

    def get_extra_state(self):
        """Override (with :meth:`set_extra_state`) to save non-tensor state in state_dict."""
        raise RuntimeError("Reached a code path in Module.get_extra_state() that should never "
                           "be called.")

    def set_extra_state(self, state) -> None:
        raise RuntimeError("Reached a code path in Module.set_extra_state() that should never "
                           "be called.")

    def _save_to_state_dict(self, destination, prefix: str, keep_vars: bool) -> None:
        for k, v in self._parameters.items():
            if v is not None:
                destination[prefix + k] = v if keep_vars else v.detach()
        for k, v in self._buffers.items():
            if v is not None and k not in self._non_persistent_buffers:
                destination[prefix + k] = v if keep_vars else v.detach()
        if type(self).get_extra_state is not _StateDictMixin.get_extra_state:
            destination[prefix + "_extra_state"] = self.get_extra_state()

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        """Parameters and persistent buffers by dotted name (detached unless ``keep_vars``).

        Example:
            >>> list(ember.nn.Linear(2, 3).state_dict())
            ['weight', 'bias']
        """
        if args:   # NOTE: PyTorch's deprecated positional form (destination, prefix, keep_vars)
            destination, prefix, keep_vars = (list(args) + [destination, prefix,
                                                            keep_vars][len(args):])[:3]
        if destination is None:
            destination = OrderedDict()
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".",
                             keep_vars=keep_vars)
        return destination

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        assign = local_metadata.get("assign_to_params_buffers", False)
        local = {k: v for k, v in self._parameters.items() if v is not None}
        local.update((k, v) for k, v in self._buffers.items()
                     if v is not None and k not in self._non_persistent_buffers)
        for name, dst in local.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            _load_one(self, name, key, dst, state_dict[key], assign, error_msgs)
        extra_key = prefix + "_extra_state"
        if type(self).set_extra_state is not _StateDictMixin.set_extra_state:
            if extra_key in state_dict:
                self.set_extra_state(state_dict[extra_key])
            elif strict:
                missing_keys.append(extra_key)
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key != extra_key:
                    head, *rest = key[len(prefix):].split(".", 1)
                    if (rest and head not in self._modules) or (not rest and head not in local):
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy (or with ``assign=True`` adopt) tensors from ``state_dict``.

        Returns ``(missing_keys, unexpected_keys)``; with ``strict`` (default) any of them,
        or a size mismatch, raises a RuntimeError listing all problems.

        Example:
            >>> m = ember.nn.Linear(2, 2)
            >>> m.load_state_dict(m.state_dict())
            <All keys matched successfully>
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, unexpected, errors = [], [], []
        meta = {"assign_to_params_buffers": assign}

        def load(module, prefix):
            module._load_from_state_dict(state_dict, prefix, meta, True, missing, unexpected,
                                         errors)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")

        load(self, "")
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)


def _load_one(module, name, key, dst, src, assign, error_msgs) -> None:
    """Copy (or assign) one state-dict entry, collecting PyTorch-style error messages."""
    if not isinstance(src, Tensor):
        error_msgs.append(f'While copying the parameter named "{key}", expected ember.Tensor '
                          f"or Tensor-like object from checkpoint but received {type(src)}")
        return
    if dst.ndim == 0 and src.ndim == 1 and src.shape[0] == 1:
        src = src[0]   # NOTE: PyTorch's backward compatibility for old 0-d params saved as [1]
    if src.shape != dst.shape:
        error_msgs.append(f"size mismatch for {key}: copying a param with shape {src.shape} "
                          f"from checkpoint, the shape in current model is {dst.shape}.")
        return
    try:
        with no_grad():
            if assign:
                if isinstance(dst, Parameter):
                    if not isinstance(src, Parameter):
                        src = Parameter(src, requires_grad=dst.requires_grad)
                    else:
                        src.requires_grad_(dst.requires_grad)
                setattr(module, name, src)
            else:
                if dst.is_meta and not src.is_meta:
                    warnings.warn(
                        f"for {key}: copying from a non-meta parameter in the checkpoint to a "
                        f"meta parameter in the current model, which is a no-op. (Did you mean "
                        f"to pass `assign=True` to assign items in the state dictionary to "
                        f"their corresponding key in the module instead of copying them in "
                        f"place?)", stacklevel=4)
                dst.copy_(src)
    except Exception as ex:   # noqa: BLE001 - reported like PyTorch, with the key
        error_msgs.append(f'While copying the parameter named "{key}", whose dimensions in '
                          f"the model are {dst.shape} and whose dimensions in the checkpoint "
                          f"are {src.shape}, an exception occurred : {ex.args}.")
