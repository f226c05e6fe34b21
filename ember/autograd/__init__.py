"""Automatic differentiation: reverse mode (``backward``, ``grad``), forward mode
(``forward_ad``), custom ``Function``s, ``gradcheck`` and anomaly detection."""
from . import forward_ad
from .anomaly import detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from .engine import backward, grad
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, no_grad,
                        set_grad_enabled)
from .graph import Node

__all__ = ["backward", "grad", "forward_ad", "detect_anomaly", "set_detect_anomaly",
           "is_anomaly_enabled", "no_grad", "enable_grad", "set_grad_enabled",
           "inference_mode", "is_grad_enabled", "Node"]
