"""The ``Distribution`` base class (``torch.distributions.Distribution``).

Shapes follow PyTorch: a sample has shape ``sample_shape + batch_shape + event_shape``;
``log_prob`` reduces the event dims. Arguments are validated by default (PyTorch's default
since 1.8); :meth:`Distribution.set_default_validate_args` turns it off globally.
"""
from __future__ import annotations

import warnings

import ember
from ember.tensor import Size, Tensor

from . import constraints
from .utils import lazy_property

__all__ = ["Distribution"]


class Distribution:
    """A probability distribution with a batch of independent parameter sets.

    Example:
        >>> d = ember.distributions.Normal(ember.zeros(3), 1.0)
        >>> tuple(d.sample((2,)).shape), tuple(d.batch_shape)
        ((2, 3), (3,))
    """

    has_rsample = False
    has_enumerate_support = False
    _validate_args = True
    support = None
    arg_constraints: dict = {}

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn argument validation on or off for distributions made without an explicit
        ``validate_args=``."""
        if value not in (True, False):
            raise ValueError(f"set_default_validate_args expects True or False, got {value!r}")
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = Size(batch_shape)
        self._event_shape = Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            self._check_parameters()

    def _check_parameters(self) -> None:
        for param, constraint in self.arg_constraints.items():
            if constraints.is_dependent(constraint):
                continue
            if param not in self.__dict__ and isinstance(getattr(type(self), param, None),
                                                         lazy_property):
                continue                       # NOTE: e.g. probs when logits were given
            value = getattr(self, param)
            if not bool(constraint.check(value).all()):
                raise ValueError(
                    f"Expected parameter {param} ({type(value).__name__} of shape "
                    f"{tuple(value.shape)}) of distribution {self!r} to satisfy the "
                    f"constraint {constraint!r}, but found invalid values:\n{value}")

    def expand(self, batch_shape, _instance=None):
        """A new distribution with the parameters expanded to ``batch_shape`` (no copy)."""
        raise NotImplementedError

    @property
    def batch_shape(self) -> Size:
        """The shape over which parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self) -> Size:
        """The shape of a single sample (without batching)."""
        return self._event_shape

    @property
    def mean(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement mean")

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement variance")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def sample(self, sample_shape=()):
        """Draw a sample (no gradient) of shape ``sample_shape + batch_shape + event_shape``."""
        with ember.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """A reparameterised sample: differentiable in the parameters."""
        raise NotImplementedError(f"{type(self).__name__} does not implement rsample")

    def sample_n(self, n: int):
        """``sample((n,))`` (deprecated in PyTorch, kept for old code)."""
        warnings.warn("sample_n will be deprecated. Use .sample((n,)) instead", UserWarning)
        return self.sample(Size((n,)))

    def log_prob(self, value):
        """Log of the density/mass at ``value``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement log_prob")

    def cdf(self, value):
        """Cumulative distribution function at ``value``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement cdf")

    def icdf(self, value):
        """Inverse of the CDF at ``value`` in [0, 1]."""
        raise NotImplementedError(f"{type(self).__name__} does not implement icdf")

    def enumerate_support(self, expand: bool = True):
        """All values of a discrete distribution's support, along a new leading dim."""
        raise NotImplementedError(f"{type(self).__name__} does not implement "
                                  f"enumerate_support")

    def entropy(self):
        """Entropy (nats), of shape ``batch_shape``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement entropy")

    def perplexity(self):
        """``exp(entropy)``."""
        return ember.exp(self.entropy())

    def _extended_shape(self, sample_shape=()) -> Size:
        if not isinstance(sample_shape, Size):
            sample_shape = Size(sample_shape)
        return Size(tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape))

    def _validate_sample(self, value) -> None:
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        start = value.ndim - len(self._event_shape)
        if tuple(value.shape[start:]) != tuple(self._event_shape):
            raise ValueError(f"The right-most size of value must match event_shape: "
                             f"{value.shape} vs {self._event_shape}.")
        actual = tuple(value.shape)
        expected = tuple(self._batch_shape) + tuple(self._event_shape)
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: "
                                 f"{value.shape} vs {Size(expected)}.")
        support = self.support
        if support is None:
            warnings.warn(f"{self.__class__} does not define `support` to enable sample "
                          f"validation. Please initialize the distribution with "
                          f"`validate_args=False` to turn off validation.")
            return
        if not bool(support.check(value).all()):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape "
                f"{tuple(value.shape)}) to be within the support ({support!r}) of the "
                f"distribution {self!r}, but found invalid values:\n{value}")

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                f"__init__ method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    def _expand_params(self, cls, batch_shape, _instance, params) -> "Distribution":
        """``expand`` for the common case: each named parameter (``{name: its trailing
        event shape}``) present on ``self`` is expanded to ``batch_shape + event shape``."""
        new = self._get_checked_instance(cls, _instance)
        batch_shape = Size(batch_shape)
        for name, tail in params.items():
            if name in self.__dict__:
                setattr(new, name, getattr(self, name).expand(tuple(batch_shape) + tuple(tail)))
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        args = ", ".join(
            f"{p}: {self.__dict__[p] if self.__dict__[p].numel() == 1 else self.__dict__[p].size()}"
            for p in names)
        return f"{self.__class__.__name__}({args})"
