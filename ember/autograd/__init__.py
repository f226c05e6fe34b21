"""Automatic differentiation: reverse mode (``backward``, ``grad``), forward mode
(``forward_ad``), Jacobians and Hessians (``functional``), custom ``Function``s,
``gradcheck`` and anomaly detection."""
from . import forward_ad
from . import functional  # noqa: F401 - torch.autograd.functional (jacobian, hessian, ...)
from . import profiler  # noqa: F401 - torch.autograd.profiler's names (ember.profiler's)
from .anomaly import AnomalyError, detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from .engine import backward, grad
from .function import Function, FunctionCtx, once_differentiable
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, no_grad,
                        is_multithreading_enabled, set_grad_enabled,
                        set_multithreading_enabled)
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .graph import Node
from .variable import Variable

__all__ = ["backward", "grad", "forward_ad", "detect_anomaly", "set_detect_anomaly",
           "is_anomaly_enabled", "AnomalyError", "no_grad", "enable_grad", "set_grad_enabled",
           "inference_mode", "is_grad_enabled", "set_multithreading_enabled", "is_multithreading_enabled", "Node",
           "Function",
           "FunctionCtx", "Variable", "functional",
           "once_differentiable", "gradcheck", "gradgradcheck", "GradcheckError"]
