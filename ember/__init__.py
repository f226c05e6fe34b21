"""Ember: a deep-learning framework written from scratch.

Example:
    >>> import ember as em
    >>> x = em.randn(3, requires_grad=True)
    >>> (x * x).sum().backward()
"""
from . import _blas_env  # noqa: F401  (first: before anything imports NumPy)
from . import dtypes
from .dtypes import (DType, bfloat16, bool_ as bool, double, finfo, float, float16, float32,
                     float64, get_default_dtype, half, iinfo, int, int8, int16, int32, int64,
                     long, promote_types, result_type, set_default_dtype, short, uint8)
from .dtypes import cdouble, cfloat, complex64, complex128  # noqa: F401
from .device import Event, Stream, device
from .errors import DTypeError, DeviceError, EmberError, GraphError, ShapeError
from .tensor import Size, Tensor
from . import ops
from .ops.arith import *  # noqa: F401,F403
from .ops.unary import *  # noqa: F401,F403
from .ops.binary import *  # noqa: F401,F403
from .ops.select import *  # noqa: F401,F403
from .ops.reduce import *  # noqa: F401,F403
from .ops.sort import *  # noqa: F401,F403
from .ops.softmax import *  # noqa: F401,F403
from .ops.movement import *  # noqa: F401,F403
from .ops.index import *  # noqa: F401,F403
from .ops.linalg import *  # noqa: F401,F403
from .ops.conv import *  # noqa: F401,F403
from .ops.factories import *  # noqa: F401,F403
from .random import *  # noqa: F401,F403
from .ops.misc import *  # noqa: F401,F403
from .ops.composite_more import *  # noqa: F401,F403
from .ops.convert import clone, contiguous, detach  # noqa: F401
from .ops.tensor_api import *  # noqa: F401,F403 - legacy constructors, new_*, isclose
from .ops import tensor_api2 as _tensor_api2  # noqa: F401 - resize_, set_, share_memory_...
from .ops.composite_math import *  # noqa: F401,F403
from .ops.composite_shape import *  # noqa: F401,F403
from .ops.composite_data import *  # noqa: F401,F403
from .ops.composite_misc import *  # noqa: F401,F403
from .ops.composite_grid import *  # noqa: F401,F403
from .ops.special_gamma import *  # noqa: F401,F403 - lgamma, digamma, polygamma
from .ops.complex import *  # noqa: F401,F403 - real, imag, view_as_real, polar...
from .ops.special_fns import i0, igamma, igammac  # noqa: F401 - torch.i0, torch.igamma
from .ops.toplevel_numerics import *  # noqa: F401,F403 - torch.exp_(x), histogramdd
from .ops import metadata_inplace as _metadata_inplace  # noqa: F401 - x.unsqueeze_(0)
from .ops import random_fills as _random_fills  # noqa: F401 - cauchy_, log_normal_...
from .ops.random_dists import (_sample_dirichlet, _standard_gamma,  # noqa: F401
                               _standard_gamma_grad, binomial, poisson)
from .ops import inplace as _inplace  # noqa: F401
from . import linalg  # noqa: F401 - ember.linalg (LAPACK through NumPy/SciPy)
from .linalg._aliases import *  # noqa: F401,F403 - det, inverse, svd, cholesky_solve...
from .ops.dispatch import broadcast_shapes  # noqa: F401
from .autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                                 is_inference_mode_enabled, no_grad, set_grad_enabled)
from . import autograd
from . import func
from .func import vmap  # noqa: F401 - torch.vmap (= torch.func.vmap)
from . import special  # noqa: F401 - torch.special (SciPy imported on first use)
from . import fft  # noqa: F401 - torch.fft (SciPy's pocketfft imported on first use)
from .fft import istft, stft  # noqa: F401 - torch.stft/istft
from . import nn
from . import data
from . import optim
from . import amp  # noqa: F401 - mixed precision (ember.amp.GradScaler, custom_fwd)
from .amp import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: F401
from .amp import set_autocast_dtype, set_autocast_enabled  # noqa: F401
from .memory import (memory_stats, record_allocation_sites, reset_peak_memory_stats,  # noqa: F401
                     set_memory_limit)
from .autograd.checkpoint import checkpoint, checkpoint_sequential  # noqa: F401
from .memory_estimate import MemoryEstimate, estimate_memory  # noqa: F401
from . import utils  # noqa: F401 - ember.utils.checkpoint, like torch.utils.checkpoint
from .config import show_config
from .serialization import save, load
from . import graph
from .graph import compile  # noqa: A001 - ember.compile, like torch.compile

__version__ = "0.1.0"

# Static graphs: the declarative API (``ember.Graph`` is the define-then-run graph; the IR
# class is ``ember.graph.Graph``) and control flow usable eagerly and in graphs.
from .graph.declarative import Graph, Variable, placeholder, gradients  # noqa: E402,F401
from .graph.control import cond, while_loop, fori_loop, scan  # noqa: E402,F401
from .graph.viz import viz  # noqa: E402 - ember.viz(graph_or_compiled, "g.svg")
from . import onnx  # noqa: E402,F401 - ember.onnx.export (onnx itself is imported lazily)
from . import accelerator, backends, cuda, serialization, testing  # noqa: E402,F401
from . import profiler  # noqa: E402,F401 - ember.profiler.profile, like torch.profiler
from . import multiprocessing  # noqa: E402,F401 - registers the tensor reducer (shared memory)
from . import sparse  # noqa: E402,F401 - sparse COO tensors (SciPy imported on first use)
from .sparse import sparse_coo, sparse_coo_tensor  # noqa: E402,F401
from . import version  # noqa: E402,F401 - torch.version
from . import cpu  # noqa: E402,F401 - torch.cpu (trivial streams/events)
from . import compiler, jit  # noqa: E402,F401 - torch.compiler, torch.jit (no TorchScript)
from . import hub, signal, types  # noqa: E402,F401 - torch.hub, torch.signal, torch.types
from . import library  # noqa: E402,F401 - torch.library.custom_op
from ._torch_names17 import *  # noqa: E402,F401,F403 - GradScaler, dtype, spmm, convolution...
from ._threads import (get_num_interop_threads, get_num_threads,  # noqa: E402,F401
                       set_num_interop_threads, set_num_threads)
from ._torch_globals import *  # noqa: E402,F401,F403 - pi, determinism flags, default device
from ._torch_functional import *  # noqa: E402,F401,F403 - torch.batch_norm etc., ATen order
from ._torch_toplevel_more import *  # noqa: E402,F401,F403 - *_copy, torch.lstm_cell, range

#: Subpackages imported on first attribute access (PEP 562), to keep ``import ember`` fast.
_LAZY_SUBMODULES = {"distributions", "fx", "distributed"}


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
