"""``torch.nn.factory_kwargs``: validate and canonicalise a layer's factory kwargs."""
from __future__ import annotations

__all__ = ["factory_kwargs"]

_SIMPLE = {"device", "dtype", "memory_format"}


def factory_kwargs(kwargs) -> dict:
    """The ``device``/``dtype``/``memory_format`` entries of ``kwargs`` (merged with its
    optional ``factory_kwargs`` dict), ready for ``ember.empty(..., **result)``.

    Raises:
        TypeError: on any other key, or a key given both directly and in
            ``factory_kwargs``.

    Example:
        >>> ember.nn.factory_kwargs({"dtype": ember.float64})
        {'dtype': ember.float64}
    """
    if kwargs is None:
        return {}
    expected = _SIMPLE | {"factory_kwargs"}
    if not kwargs.keys() <= expected:
        raise TypeError(f"unexpected kwargs {kwargs.keys() - expected}")
    out = dict(kwargs.get("factory_kwargs", {}))
    for k in _SIMPLE:
        if k in kwargs:
            if k in out:
                raise TypeError(f"{k} specified twice, in **kwargs and in factory_kwargs")
            out[k] = kwargs[k]
    return out
