"""Automatic differentiation: reverse mode (``backward``, ``grad``), forward mode
(``forward_ad``), custom ``Function``s, ``gradcheck`` and anomaly detection."""
from . import forward_ad
from . import profiler  # noqa: F401 - torch.autograd.profiler's names (ember.profiler's)
from .anomaly import AnomalyError, detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from .engine import backward, grad
from .function import Function, FunctionCtx, once_differentiable
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, no_grad,
                        set_grad_enabled)
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .graph import Node

__all__ = ["backward", "grad", "forward_ad", "detect_anomaly", "set_detect_anomaly",
           "is_anomaly_enabled", "AnomalyError", "no_grad", "enable_grad", "set_grad_enabled",
           "inference_mode", "is_grad_enabled", "Node", "Function", "FunctionCtx",
           "once_differentiable", "gradcheck", "gradgradcheck", "GradcheckError"]
